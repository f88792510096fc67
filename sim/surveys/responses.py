"""Surveys taken at the end of their wave rounds (docs/surveys.md).

A survey reads the world and writes rows; it changes nothing. Its sample is drawn once
from the agents present at round 0 (a panel: the same respondents every wave) with its
own seeded generator, and its answers use their own counter-based stream
(`Purpose.SURVEY`), so a run with surveys has exactly the trajectory of the run without.

The response model of a rule-based agent with position x on the item's topic and
confidence c: a noise scale s = floor + (noise − floor)(1 − c); it abstains with
probability abstain·(1 − c)²; otherwise its latent answer is z = ±x + s·L with L a
standard logistic draw (− for reverse-coded items), so a Likert item with k points has
the ordered-logit probabilities P(answer ≤ j) = F((τ_j ∓ x)/s), cut points τ_j = −1 + 2j/k.
A numeric item maps clip(z, −1, 1) linearly onto its range; a single choice is the option
whose position is nearest z; a multiple choice takes each option whose position is within
`WITHIN` of its own draw of z. Free-text items are for LLM agents, who answer through
the interview path (`shoal survey RUN`), not here.
"""

from __future__ import annotations

import zlib

import numpy as np
import pyarrow as pa

from shoal.core.counter_rng import CounterRNG, Purpose
from shoal.surveys.config import Item, Survey, sample_note
from shoal.world.selection import select

WITHIN = 0.35  # a multiple-choice option is ticked when the latent answer is this close
COLUMNS = ("round", "survey", "wave", "agent", "item", "kind", "value", "choice", "text",
           "abstained", "source")


def _pool(survey: Survey, world, seed: int) -> np.ndarray:
    """The agents the survey's sample is drawn from: the round-0 agents its selector
    picks (sorted ids)."""
    alive0 = np.flatnonzero(world.joined == 0)
    i = [s.name for s in world.cfg.surveys].index(survey.name)  # (names are unique)
    where = f"surveys.{i}.sample.select"
    mask = select(survey.sample.select, world.population,
                  lambda: CounterRNG(seed).generator(_key(survey), 1), where)
    return alive0[mask[alive0]]


def panel(survey: Survey, world, seed: int) -> np.ndarray:
    """The survey's respondents (sorted ids): its sample of the round-0 agents (all of
    them when the pool has no more than `size`)."""
    ids = _pool(survey, world, seed)
    size = survey.sample.size
    if size is not None and size < len(ids):
        ids = np.sort(CounterRNG(seed).generator(_key(survey), 2).choice(ids, size,
                                                                          replace=False))
    return ids


def check_samples(world) -> None:
    """Every survey's sample resolves against the round-0 population: its ids exist and
    its groups are the population's (an InputError naming the field otherwise). Run
    before anything is written; for a generated population the config's validation has
    checked this already, for a profile file only the population knows."""
    for i, survey in enumerate(world.cfg.surveys):
        # ids and groups only: the seeded fraction is drawn with the sample
        select(survey.sample.select.model_copy(update={"fraction": None}), world.population,
               lambda: None, f"surveys.{i}.sample.select")


def sample_sizes(world) -> list[dict]:
    """Per survey: the sample `size` asked for (None: everyone), the `pool` it is drawn
    from and the number of respondents actually `drawn` (what run.json records)."""
    out = []
    for survey in world.cfg.surveys:
        pool = len(_pool(survey, world, world.cfg.seed))
        size = survey.sample.size
        out.append({"survey": survey.name, "size": size, "pool": pool,
                    "drawn": pool if size is None else min(size, pool)})
    return out


def sample_notes(sizes: list[dict]) -> list[str]:
    """A warning per survey whose sample is larger than its pool (`sizes` as
    `sample_sizes` gives them)."""
    return [sample_note(f"surveys.{i}", s["size"], s["pool"], "when the run started")
            for i, s in enumerate(sizes) if s["size"] is not None and s["size"] > s["pool"]]


def _key(survey: Survey) -> int:
    return zlib.crc32(survey.name.encode()) & 0xFFFFFF


def _draws(item_kinds: list[Item]) -> list[int]:
    """Uniform draws each item needs: abstention, then one per latent answer."""
    return [2 + (len(it.options) if it.kind == "multiple" else 0) for it in item_kinds]


def rule_responses(survey: Survey, wave: int, round_: int, agents: np.ndarray,
                   position: np.ndarray, confidence: np.ndarray, topic_index: dict[str, int],
                   seed: int) -> dict[str, list]:
    """The response model's answers of `agents` (rows as column lists). `position` and
    `confidence` are the world's [N, T] arrays at the end of `round_`."""
    items = [it for it in survey.items if it.kind != "text"]
    out: dict[str, list] = {c: [] for c in COLUMNS}
    if not len(agents) or not items:
        return out
    need = _draws(items)
    u = CounterRNG(seed).uniform((_key(survey) << 8 ^ round_) & 0xFFFFFFFF, Purpose.SURVEY,
                                 agents, sum(need))
    u = np.clip(u, 1e-12, 1 - 1e-12)  # logistic quantiles stay finite
    m = survey.response
    at = 0
    for it, n in zip(items, need, strict=True):
        t = topic_index[it.topic]
        x, c = position[agents, t], confidence[agents, t]
        s = m.floor + (m.noise - m.floor) * (1.0 - c)
        abstain = u[:, at] < m.abstain * (1.0 - c) ** 2
        z = (-x if it.reverse else x) + s * np.log(u[:, at + 1] / (1.0 - u[:, at + 1]))
        value = np.full(len(agents), np.nan)
        choice: list[str | None] = [None] * len(agents)
        if it.kind == "likert":
            value = np.clip(np.floor((z + 1.0) / 2.0 * it.points) + 1, 1, it.points)
        elif it.kind == "numeric":
            lo, hi = it.range
            value = lo + (hi - lo) * (np.clip(z, -1.0, 1.0) + 1.0) / 2.0
        elif it.kind == "single":
            anchors = np.array([o.position for o in it.options])
            pick = np.abs(z[:, None] - anchors[None, :]).argmin(axis=1)
            value = pick.astype(float)
            choice = [it.options[k].label for k in pick]
        else:  # multiple: each option against its own draw of the latent answer
            anchors = np.array([o.position for o in it.options])
            q = u[:, at + 2: at + 2 + len(anchors)]
            zz = x[:, None] + s[:, None] * np.log(q / (1.0 - q))
            ticked = np.abs(zz - anchors[None, :]) <= WITHIN
            value = ticked.sum(axis=1).astype(float)
            choice = ["|".join(o.label for o, t in zip(it.options, row, strict=True) if t)
                      for row in ticked]
        at += n
        value = np.where(abstain, np.nan, value)
        out["round"] += [round_] * len(agents)
        out["survey"] += [survey.name] * len(agents)
        out["wave"] += [wave] * len(agents)
        out["agent"] += agents.tolist()
        out["item"] += [it.id] * len(agents)
        out["kind"] += [it.kind] * len(agents)
        out["value"] += [None if np.isnan(v) else float(v) for v in value]
        out["choice"] += [None if a else ch for a, ch in zip(abstain, choice, strict=True)]
        out["text"] += [None] * len(agents)
        out["abstained"] += abstain.tolist()
        out["source"] += ["rule"] * len(agents)
    return out


def survey_table(world, round_: int, llm_agents: set[int]) -> pa.Table | None:
    """The rows of every survey with a wave at `round_` (rule-based respondents; LLM
    agents answer with `shoal survey`), or None when no survey is due."""
    cfg = world.cfg
    due = [(s, s.waves.index(round_)) for s in cfg.surveys if round_ in s.waves]
    if not due:
        return None
    topic_index = {t.name: i for i, t in enumerate(cfg.topics)}
    cols: dict[str, list] = {c: [] for c in COLUMNS}
    for survey, wave in due:
        ids = panel(survey, world, cfg.seed)
        ids = ids[world.alive[ids] & ~np.isin(ids, list(llm_agents))]
        rows = rule_responses(survey, wave, round_, ids, world.beliefs.position,
                              world.beliefs.confidence, topic_index, cfg.seed)
        for c in COLUMNS:
            cols[c] += rows[c]
    return pa.table({
        "round": pa.array(cols["round"], pa.int32()), "survey": pa.array(cols["survey"]),
        "wave": pa.array(cols["wave"], pa.int32()), "agent": pa.array(cols["agent"],
                                                                       pa.int32()),
        "item": pa.array(cols["item"], pa.string()), "kind": pa.array(cols["kind"],
                                                                      pa.string()),
        "value": pa.array(cols["value"], pa.float64()),
        "choice": pa.array(cols["choice"], pa.string()),
        "text": pa.array(cols["text"], pa.string()),
        "abstained": pa.array(cols["abstained"], pa.bool_()),
        "source": pa.array(cols["source"], pa.string())})
