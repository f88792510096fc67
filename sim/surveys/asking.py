"""`shoal survey RUN`: the LLM agents of a run's survey samples answer the questionnaire,
each as it was at the end of the wave's round, through the interview path (its exact
context as system text, the questionnaire as the user message). Rule-based respondents
were answered during the run (sim/surveys/responses.py). Answers go to `survey_responses`
with source `llm`; a wave already answered is not asked again.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import pandas as pd

from shoal.core.errors import InputError, ProviderDown
from shoal.core.faults import crash_point
from shoal.core.language import DEFAULT, templates
from shoal.engine.agent_context import context_for
from shoal.llm.chat import response_format, strip_reasoning
from shoal.llm.metadata import SURVEY
from shoal.runs.interview import answer_of, ask_all, asked, provider_for
from shoal.runs.simulation import world_at
from shoal.store.lineage import being_written, read_table
from shoal.store.run_dir import open_run_dir
from shoal.store.traces import AnalysisStore
from shoal.surveys.config import Item, Survey

MARK = "Shoal survey"


@dataclass
class SurveyRun:
    """What `shoal survey` asked: per (survey, wave), agents asked and rows written."""

    asked: pd.DataFrame  # survey, wave, round, agents, answered, skipped (already done)


def questionnaire(survey: Survey, labels: dict[str, str], language: str = DEFAULT) -> str:
    """The user message: every item with how to answer it, and the reply format, worded
    in the respondent's `language` (the items' own texts and options are the survey's)."""
    t = templates(language)
    lines = [t("survey.intro", mark=MARK, name=survey.name), ""]
    sep = t.text("survey.options_sep")
    for it in survey.items:
        about = t("survey.about", label=labels[it.topic]) if it.topic else ""
        if it.kind == "likert":
            how = t("survey.likert", points=it.points, about=about,
                    reverse=t("survey.reverse") if it.reverse else "")
        elif it.kind == "numeric":
            how = t("survey.numeric", low=f"{it.range[0]:g}", high=f"{it.range[1]:g}",
                    about=about)
        elif it.kind == "single":
            how = t("survey.single", about=about, options=sep.join(o.label for o in it.options))
        elif it.kind == "multiple":
            how = t("survey.multiple", about=about,
                    options=sep.join(o.label for o in it.options))
        else:
            how = t("survey.text")
        lines.append(t("survey.item", id=it.id, how=how, text=it.text))
    return "\n".join(lines)


def items_data(survey: Survey, labels: dict[str, str]) -> list[dict]:
    """The questionnaire's items as data, as `questionnaire` words them (the requests'
    `shoal` field): id, kind, the topic's label (`about`), a Likert item's points and
    direction, a numeric item's range, a choice item's options."""
    return [{"id": it.id, "kind": it.kind, "about": labels[it.topic] if it.topic else None,
             "points": it.points, "reverse": it.reverse, "range": list(it.range),
             "options": [o.label for o in it.options]} for it in survey.items]


def answer_schema(survey: Survey) -> dict:
    """The JSON schema of a whole reply: one property per item, each the item's kind of
    answer (a Likert point, a number in range, an option's label, a list of them, text)."""
    props: dict[str, dict] = {}
    for it in survey.items:
        labels = [o.label for o in it.options]
        if it.kind == "likert":
            props[it.id] = {"type": "integer", "minimum": 1, "maximum": it.points}
        elif it.kind == "numeric":
            low, high = sorted(it.range)
            props[it.id] = {"type": "number", "minimum": low, "maximum": high}
        elif it.kind == "single":
            props[it.id] = {"type": "string", "enum": labels}
        elif it.kind == "multiple":
            props[it.id] = {"type": "array", "items": {"type": "string", "enum": labels}}
        else:
            props[it.id] = {"type": "string"}
    return {"type": "object", "properties": props, "required": list(props),
            "additionalProperties": False}


def parse_answers(text: str, survey: Survey) -> dict[str, object] | None:
    """The reply's JSON object (first {...} in the text), or None."""
    text = strip_reasoning(text)
    m = re.search(r"\{.*\}", text, re.DOTALL)
    if not m:
        return None
    try:
        data = json.loads(m.group(0))
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def item_row(it: Item, answer: object) -> dict:
    """value, choice, text, abstained of one answer (an invalid answer is an abstention,
    its raw text kept in `text`)."""
    empty = {"value": None, "choice": None, "text": None, "abstained": True}
    if answer is None:
        return empty
    try:
        if it.kind == "likert":
            v = int(answer)
            if 1 <= v <= it.points and float(answer) == v:
                return {**empty, "value": float(v), "abstained": False}
        elif it.kind == "numeric":
            v = float(answer)
            lo, hi = sorted(it.range)
            if lo <= v <= hi:
                return {**empty, "value": v, "abstained": False}
        elif it.kind == "single":
            labels = [o.label for o in it.options]
            if answer in labels:
                return {**empty, "value": float(labels.index(answer)), "choice": answer,
                        "abstained": False}
        elif it.kind == "multiple":
            labels = [o.label for o in it.options]
            picked = [a for a in answer if a in labels] if isinstance(answer, list) else []
            if isinstance(answer, list) and len(picked) == len(answer):
                return {**empty, "value": float(len(picked)), "abstained": False,
                        "choice": "|".join(o for o in labels if o in picked)}
        elif str(answer).strip():
            return {**empty, "text": str(answer), "abstained": False}
    except (TypeError, ValueError):
        pass
    return {**empty, "text": f"invalid: {json.dumps(answer)[:200]}"}


def survey_llm_agents(run: str, base_url: str | None = None, model: str | None = None,
                      api_key_env: str | None = None, concurrency: int | None = None
                      ) -> SurveyRun:
    """Ask every survey's LLM respondents, wave by wave (see the module docstring)."""
    run_dir = open_run_dir(run)
    if being_written(run_dir):
        raise InputError(f"{run_dir.run_id} is being written; survey it when it has stopped")
    kept = run_dir.checkpoints.available()
    if not kept:
        raise InputError(f"{run_dir.run_id}: the run has no checkpoint yet")
    done = read_table(run, "survey_responses", "source = 'llm'")
    answered = set(zip(done["survey"], done["wave"], strict=True))
    world0 = world_at(run_dir, kept[-1])
    if not world0.cfg.surveys:
        raise InputError(f"{run_dir.run_id}: the run's config has no surveys")
    llm = set(world0.llm_providers())
    if not llm and base_url is None:
        raise InputError(f"{run_dir.run_id}: the run has no LLM agents (their surveys were "
                         "answered during the run)")
    from shoal.surveys.responses import panel

    store, asked = AnalysisStore(run_dir.db), []
    for survey in world0.cfg.surveys:
        for wave, round_ in enumerate(survey.waves):
            if round_ > kept[-1]:
                continue  # the run has not reached the wave
            if (survey.name, wave) in answered:
                asked.append((survey.name, wave, round_, 0, 0, True))
                continue
            world = world_at(run_dir, round_, f"surveys.{survey.name}.waves.{wave}")
            ids = [int(a) for a in panel(survey, world, world.cfg.seed)
                   if int(a) in llm and world.alive[a]]
            if not ids:
                continue
            rows = _ask(world, survey, wave, round_, ids, base_url, model, api_key_env,
                        concurrency)
            store.insert("survey_responses", rows)  # a wave whole, or not at all
            crash_point("surveying", sum(not a[-1] for a in asked) + 1)
            asked.append((survey.name, wave, round_, len(ids),
                          len({r["agent"] for r in rows if not r["abstained"]}), False))
    return SurveyRun(pd.DataFrame(asked, columns=["survey", "wave", "round", "agents",
                                                  "answered", "skipped"]))


def _ask(world, survey: Survey, wave: int, round_: int, ids: list[int], base_url, model,
         api_key_env, concurrency) -> list[dict]:
    labels = {t.name: t.label or t.name for t in world.cfg.topics}
    providers = world.llm_providers()
    chosen = {a: provider_for(world.cfg, providers.get(a), base_url, model, api_key_env)
              for a in ids}
    world.memory.boundary(round_ + 1)
    contexts = {a: context_for(world, a, round_ + 1).assembled for a in ids}
    world.memory.close()
    items = items_data(survey, labels)
    # each respondent reads the questionnaire in its own language (one text per language)
    # (English asked as it always was: two arguments)
    texts = {tag: questionnaire(survey, labels) if tag == DEFAULT else
             questionnaire(survey, labels, tag)
             for tag in {world.population.language_of(a) for a in ids}}
    questions = {a: texts[world.population.language_of(a)] for a in ids}
    # A provider that answers in JSON constrained by a schema (what small local models
    # need to answer in JSON at all) is given the questionnaire's.
    schema = response_format(answer_schema(survey), name="survey")
    formats = {a: schema for a, p in chosen.items()
               if p.output == "json_schema" or world.outputs.get(p.name) == "json_schema"}
    replies = ask_all(chosen, contexts, questions, world.cfg.seed, concurrency, None,
                      about=lambda a, context: asked(a, context, SURVEY, items=items),
                      formats=formats)
    answered = {a: answer_of(replies[a]) for a in ids}
    # A reply that never came (no connection, a timeout, an error status) is not the
    # respondent abstaining: nothing of the wave is stored, so the same command asks again.
    # An empty or unreadable answer that did come is an abstention, as for a person.
    lost = [(a, status, error) for a, (_, status, error) in answered.items()
            if status not in ("ok", "empty")]
    if lost:
        a, status, error = lost[0]
        raise ProviderDown(f"survey {survey.name} wave {wave} (round {round_}): {len(lost)} "
                           f"of {len(ids)} LLM respondents got no answer (agent {a}: "
                           f"{status}: {error}); nothing of this wave was stored: run the "
                           "command again when the endpoint answers")
    rows = []
    for a in ids:
        text, status, _ = answered[a]
        answers = parse_answers(text, survey) if status == "ok" else None
        for it in survey.items:
            row = item_row(it, (answers or {}).get(it.id))
            rows.append({"round": round_, "survey": survey.name, "wave": wave, "agent": a,
                         "item": it.id, "kind": it.kind, **row, "source": "llm"})
    return rows
