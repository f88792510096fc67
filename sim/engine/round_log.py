"""Step 9 of a round: the rows a round writes, as Arrow tables (one per DuckDB table).

Every table must own its memory (no views of world state): the writer thread commits it
while the driver is already mutating the world for the next round.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from shoal.agents.observation import PlatformView
from shoal.config import Config
from shoal.core.workers import SERIAL, Workers
from shoal.engine.apply import Applied
from shoal.platforms.spec import MAX_CODE, spec
from shoal.store.schema import (
    ACTION_ENUM,
    FOLLOW_ENUM,
    KIND_ENUM,
    SOURCE_ENUM,
    STANCE_METHOD_ENUM,
    STATUS_ENUM,
    TRUST_ENUM,
    enum_array,
    repeated_topics,
)
from shoal.world.world import World


@dataclass(frozen=True)
class PlatformEnum:
    """A run's platform enum: its platforms' names in code order, and where each platform
    code sits in it."""

    names: tuple[str, ...]
    index: np.ndarray  # int8 [MAX_CODE + 1]: platform code -> enum position

    @classmethod
    def of(cls, cfg: Config) -> PlatformEnum:
        """The enum of the platforms a config has (enabled or not)."""
        names = tuple(cfg.platforms.names())
        index = np.full(MAX_CODE + 1, -1, np.int8)
        for i, name in enumerate(names):
            index[spec(name).code] = i
        return cls(names, index)

    def array(self, codes: np.ndarray) -> pa.DictionaryArray:
        """Platform codes as the store's platform enum."""
        return enum_array(self.index[np.asarray(codes, dtype=np.int64)], self.names)


def _const(value: int, n: int, dtype=np.int32) -> pa.Array:
    return pa.array(np.full(n, value, dtype=dtype))


def beliefs_table(world: World, round_: int, workers: Workers = SERIAL) -> pa.Table:
    """Every agent's position and confidence on every topic (agent-major; a range of
    agents per worker, one Arrow chunk each)."""
    position, confidence = world.beliefs.position, world.beliefs.confidence
    n, t = position.shape

    def rows_of(rows: slice) -> pa.Table:
        m = rows.stop - rows.start
        return pa.table({
            "round": _const(round_, m * t),
            "agent": pa.array(np.repeat(np.arange(rows.start, rows.stop, dtype=np.int32), t)),
            "topic": repeated_topics(world.topics, m),
            # Copies: Arrow wraps numpy memory without copying, and the writer thread
            # commits this table while the driver already updates beliefs for the next
            # round.
            "position": pa.array(position[rows].ravel().copy()),
            "confidence": pa.array(confidence[rows].ravel().copy()),
        })

    return _chunks(workers.over(n, rows_of))


def _chunks(parts: list[pa.Table]) -> pa.Table:
    """One table of the ranges' chunks, in range order."""
    return parts[0] if len(parts) == 1 else pa.concat_tables(parts)


def posts_tables(world: World, ids: np.ndarray,
                 seed_votes: dict[str, list[int]] | None = None,
                 workers: Workers = SERIAL) -> dict[str, pa.Table]:
    """The posts with the given ids, their per-topic stances (addressed topics only), and
    the votes interventions gave them at creation (`seed_votes`: counter -> post ids). A
    range of posts per worker, one Arrow chunk each."""
    p = world.posts
    seeded = {name: np.zeros(len(ids), np.int32) for name in ("up", "down")}
    for name, post_ids in (seed_votes or {}).items():
        if len(post_ids):
            np.add.at(seeded[name], np.searchsorted(ids, np.asarray(post_ids)), 1)
    texts = p.text_column(ids)  # (encoded once a round: the checkpoint's column)
    platforms, topics = PlatformEnum.of(world.cfg), pa.array(world.topics)

    def rows_of(rows: slice) -> tuple[pa.Table, pa.Table]:
        part = ids[rows]
        parent = p.parent[part]
        posts = pa.table({
            "post_id": pa.array(part),
            "platform": platforms.array(p.platform[part]),
            "round": pa.array(p.round[part]),
            "author": pa.array(p.author[part]),
            "kind": enum_array(p.kind[part], KIND_ENUM),
            "parent_id": pa.array(parent, mask=parent < 0),
            "root_id": pa.array(p.root[part]),
            "text": texts.slice(rows.start, rows.stop - rows.start),
            "seed_up": pa.array(seeded["up"][rows]),
            "seed_down": pa.array(seeded["down"][rows]),
            "stance_method": enum_array(p.stance_method[part], STANCE_METHOD_ENUM),
        })
        stance = p.stance[part]
        row, topic = np.nonzero(~np.isnan(stance))
        stances = pa.table({
            "post_id": pa.array(part[row]),
            "topic": pa.DictionaryArray.from_arrays(pa.array(topic.astype(np.int16)), topics),
            "stance": pa.array(stance[row, topic]),
        })
        return posts, stances

    parts = workers.over(len(ids), rows_of)
    return {"posts": _chunks([a for a, _ in parts]),
            "post_stances": _chunks([b for _, b in parts])}


def exposures_table(round_: int, views: list[PlatformView], platforms: PlatformEnum,
                    workers: Workers = SERIAL) -> pa.Table:
    """The feed items shown, as the `exposures` table keeps them (listed): one row per
    agent shown anything, (round, platform, agent, [post ids by rank]), its list up to
    the last item shown (NULL for an empty slot before it); agent-major as the views'
    rows are (a range of rows per worker, one Arrow chunk each)."""
    parts = []
    for v in views:
        code = int(platforms.index[v.platform])

        def rows_of(rows: slice, v=v, code=code) -> pa.Table:
            feed = v.feed[rows]
            valid = feed >= 0
            full = bool(valid.all())
            if full:  # every slot filled (the common case): the matrix as it is
                keep, length, items = slice(None), np.full(len(feed), feed.shape[1]), feed
            else:  # each row up to its last item
                last = feed.shape[1] - np.argmax(valid[:, ::-1], axis=1)
                keep = valid.any(axis=1)
                length = last[keep]
                items = feed[keep][np.arange(feed.shape[1]) < length[:, None]]
            offsets = np.zeros(len(length) + 1, np.int32)
            np.cumsum(length, out=offsets[1:])
            flat = items.ravel()
            n = len(length)
            return pa.table({
                "round": _const(round_, n),
                "platform": enum_array(np.full(n, code, np.int8), platforms.names),
                "agent": pa.array(v.agents[rows][keep].astype(np.int32)),
                "post_id": pa.ListArray.from_arrays(
                    pa.array(offsets), pa.array(flat, mask=None if full else flat < 0)),
            })

        parts += workers.over(len(v.agents), rows_of)
    if not parts:  # no platform had anyone acting
        return pa.table({"round": pa.array([], pa.int32()),
                         "platform": platforms.array(np.empty(0, np.int8)),
                         "agent": pa.array([], pa.int32()),
                         "post_id": pa.array([], pa.list_(pa.int64()))})
    return _chunks(parts)


def actions_table(round_: int, applied: Applied, log_idle: bool, platforms: PlatformEnum,
                  workers: Workers = SERIAL) -> pa.Table:
    """Every decision with its outcome (status 'ok' or the rejection reason); `log_idle`
    False: only the decisions to do something. A range of rows per worker, one Arrow
    chunk each."""
    a = applied.actions
    source = a.meta.get("source")

    def rows_of(rows: slice) -> pa.Table:
        # every row of the range (no copy), or those that did something
        keep = rows if log_idle else rows.start + np.flatnonzero(a.action[rows] != 0)
        n = rows.stop - rows.start if log_idle else len(keep)

        def ids(values: np.ndarray) -> pa.Array:  # -1: none (NULL)
            kept = values[keep]
            return pa.array(kept, mask=kept < 0)

        return pa.table({
            "round": _const(round_, n),
            "platform": platforms.array(a.platform[keep]),
            "agent": pa.array(a.agent[keep]),
            "slot": pa.array(a.slot[keep]),
            "action": enum_array(a.action[keep], ACTION_ENUM),
            "target_post": ids(a.target_post),
            "target_agent": ids(a.target_agent),
            "new_post_id": ids(applied.new_post),
            "status": enum_array(applied.reason[keep], STATUS_ENUM),
            "source": enum_array(source[keep] if source is not None else np.zeros(n, np.int8),
                                 SOURCE_ENUM),
        })

    return _chunks(workers.over(len(a), rows_of))


def trust_table(round_: int, applied: Applied) -> pa.Table:
    """One row per trust-changing interaction, with the pair's value after the round."""
    t = applied.trust
    return pa.table({
        "round": _const(round_, len(t["truster"])),
        "truster": pa.array(t["truster"].astype(np.int32)),
        "trustee": pa.array(t["trustee"].astype(np.int32)),
        "cause": enum_array(t["cause"], TRUST_ENUM),
        "delta": pa.array(t["delta"]),
        "value": pa.array(t["value"]),
    })


def follows_table(round_: int, platform: np.ndarray, follower: np.ndarray,
                  followee: np.ndarray, op: np.ndarray, platforms: PlatformEnum) -> pa.Table:
    """Follow-graph changes; op codes index FOLLOW_ENUM (0 init, 1 follow, 2 unfollow)."""
    return pa.table({
        "round": _const(round_, len(follower)),
        "platform": platforms.array(platform),
        "follower": pa.array(np.asarray(follower, dtype=np.int32)),
        "followee": pa.array(np.asarray(followee, dtype=np.int32)),
        "op": enum_array(op, FOLLOW_ENUM),
    })


def applied_follows_table(round_: int, applied: Applied, platforms: PlatformEnum) -> pa.Table:
    """This round's follows and unfollows."""
    f = applied.follows
    op = np.where(np.asarray(f["op"]) > 0, 1, 2)
    return follows_table(round_, f["platform"], f["follower"], f["followee"], op, platforms)


def topics_table(cfg) -> pa.Table:
    """The topics of a run, in index order."""
    return pa.table({
        "topic_id": pa.array(np.arange(len(cfg.topics), dtype=np.int16)),
        "topic": [t.name for t in cfg.topics], "label": [t.label for t in cfg.topics],
        "keywords": [t.keywords for t in cfg.topics],
    })


def agents_table(world: World, ids: np.ndarray) -> pa.Table:
    """Rows of the agents table for some agents (all at round 0, newcomers later)."""
    frame = world.population.to_frame(world.cfg.topic_names).iloc[ids]
    frame = frame[[c for c in frame.columns if not c.startswith("interest_")]]
    for name in world.cfg.platforms.names():
        plat = world.platforms.get(name) or world.engines.get(name)
        frame[f"on_{name}"] = plat.members[ids] if plat is not None else False
    frame["joined_round"] = world.joined[ids]
    return pa.Table.from_pandas(frame, preserve_index=False)


def interventions_table(rows: list[dict]) -> pa.Table:
    """One row per fired intervention: round, its index in the schedule, kind, the entry
    and what it did (JSON)."""
    return pa.table({
        "round": pa.array([r["round"] for r in rows], pa.int32()),
        "idx": pa.array([r["index"] for r in rows], pa.int32()),
        "kind": pa.array([r["kind"] for r in rows], pa.string()),
        "spec": pa.array([r["spec"] for r in rows], pa.string()),
        "effect": pa.array([r["effect"] for r in rows], pa.string()),
    })


def memory_table(rows: list[dict]) -> pa.Table:
    """Round-memory log rows: items recorded, summaries' state changes, unpinnings."""
    return pa.table({
        "round": pa.array([r["round"] for r in rows], pa.int32()),
        "id": pa.array([r["id"] for r in rows], pa.int64()),
        "kind": pa.array([r["kind"] for r in rows], pa.string()),
        "level": pa.array([r["level"] for r in rows], pa.string()),
        "text": pa.array([r["text"] for r in rows], pa.string()),
        "covers_from": pa.array([r["covers_from"] for r in rows], pa.int32()),
        "covers_to": pa.array([r["covers_to"] for r in rows], pa.int32()),
        "posts": pa.array([r["posts"] for r in rows], pa.list_(pa.int64())),
        "pinned": pa.array([r["pinned"] for r in rows], pa.bool_()),
        "status": pa.array([r["status"] for r in rows], pa.string()),
        "attempts": pa.array([r["attempts"] for r in rows], pa.int32()),
        "note": pa.array([r["note"] for r in rows], pa.string()),
        "audience": pa.array([r["audience"] for r in rows], pa.int64()),
    })


LLM_CALL_COLUMNS = {
    "round": pa.int32(), "agent": pa.int32(), "platform": pa.string(),
    "provider": pa.string(), "model": pa.string(), "base_url": pa.string(),
    "call": pa.int8(), "status": pa.string(), "http_status": pa.int16(),
    "prompt_tokens": pa.int32(), "completion_tokens": pa.int32(),
    "section_tokens": pa.string(), "latency_ms": pa.float64(), "retries": pa.int16(),
    "outcome": pa.string(), "fallback_reason": pa.string(), "error": pa.string(),
    "cost_usd": pa.float64(), "cache": pa.string(), "saved_usd": pa.float64(),
    "wait_ms": pa.float64(), "cached_tokens": pa.int32(), "reused_tokens": pa.int32(),
    "output": pa.string(), "counted_prompt_tokens": pa.int32(),
}
_LLM_CALL_DEFAULTS = {"cache": "off", "saved_usd": 0.0, "wait_ms": 0.0, "cached_tokens": None,
                      "reused_tokens": None, "output": None, "counted_prompt_tokens": None}


def llm_calls_table(calls: list[dict]) -> pa.Table:
    """One row per LLM call: who, where, tokens (per section too), latency, retries,
    status, what came of it and why it fell back, estimated cost, the response cache's
    part (hit or miss, and the cost a hit saved), the wait for the endpoint's limits, the
    prompt tokens the server says it had cached, the prompt tokens equal to the start
    of the agent's previous prompt (NULL for calls that are not an agent's turn), the
    output mode an agent's turn asked in, and Shoal's own count of the prompt's tokens
    (beside `prompt_tokens`, the server's, to show the drift between the two)."""
    return pa.table({name: pa.array([c[name] if name not in _LLM_CALL_DEFAULTS
                                     else c.get(name, _LLM_CALL_DEFAULTS[name]) for c in calls],
                                    type=t)
                     for name, t in LLM_CALL_COLUMNS.items()})


def context_table(round_: int, contexts, budget: int) -> pa.Table:
    """Budget accounting of each assembled turn: one row per section (and a `total` row),
    with the lines kept and the lines trimmed (text and provenance, as JSON). `contexts`:
    (platform, agent, `memory.context.accounting_rows` of its context) per turn."""
    rows: dict[str, list] = {k: [] for k in ("round", "platform", "agent", "section", "tokens",
                                             "lines", "budget", "trimmed")}
    for platform, agent, accounting in contexts:
        for section, tokens, lines, trimmed in accounting:
            rows["platform"].append(platform)
            rows["agent"].append(agent)
            rows["section"].append(section)
            rows["tokens"].append(tokens)
            rows["lines"].append(lines)
            rows["trimmed"].append(trimmed)
    n = len(rows["agent"])
    return pa.table({
        "round": pa.array(np.full(n, round_, np.int32)),
        "platform": pa.array(rows["platform"], pa.string()),
        "agent": pa.array(rows["agent"], pa.int32()),
        "section": pa.array(rows["section"], pa.string()),
        "tokens": pa.array(rows["tokens"], pa.int32()),
        "lines": pa.array(rows["lines"], pa.int32()),
        "budget": pa.array(np.full(n, budget, np.int32)),
        "trimmed": pa.array(rows["trimmed"], pa.string()),
    })


def initial_follows_table(world: World) -> pa.Table:
    """The round-0 graph of every platform."""
    parts = []
    for plat in world.platforms.values():
        src, dst = plat.graph.edge_arrays()
        parts.append(follows_table(0, np.full(len(src), plat.code), src, dst,
                                   np.zeros(len(src), dtype=np.int8),
                                   PlatformEnum.of(world.cfg)))
    return pa.concat_tables(parts)
