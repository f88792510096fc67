"""The trajectory's schema: the engine's own tables, the enums and the view `post_stats`
(docs/store.md). Each table is declared once, here or beside the component that writes
it (`sim/store/tables.py`); `schema()` creates every declared table.

Categorical columns are DuckDB ENUMs; their values come from the core vocabulary and, for
platforms, from the run's own platforms, so the store needs nothing of the engine.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa

from shoal.core.posts import PostKind
from shoal.core.vocabulary import (
    ACTION_NAMES,
    FOLLOW_OPS,
    REASON_NAMES,
    SOURCE,
    STANCE_METHOD,
    TRUST_CAUSES,
    ActionType,
    Reason,
)
from shoal.store.tables import PER_PLATFORM, TABLES, TableSpec

ACTION_ENUM = tuple(ACTION_NAMES[a] for a in ActionType)
KIND_ENUM = tuple(k.name.lower() for k in PostKind)
STATUS_ENUM = tuple(REASON_NAMES[r] for r in Reason)
TRUST_ENUM = TRUST_CAUSES
FOLLOW_ENUM = FOLLOW_OPS
SOURCE_ENUM = tuple(SOURCE)
TEXT = pd.Series(["x"]).dtype  # pandas' default text dtype (object, or str in pandas 3)


def typed_frame(result: duckdb.DuckDBPyRelation, raw: Collection[str] = ()) -> pd.DataFrame:
    """`result` as a DataFrame whose text columns (VARCHAR, ENUM, JSON but those in `raw`,
    parsed by the reader) have the text dtype also when it has no rows: DuckDB gives them
    `object` then, and the text dtype with rows."""
    df = result.df()
    if len(df):
        return df
    return df.astype({c: TEXT for c, t in zip(result.columns, map(str, result.types),
                                              strict=True)
                      if t == "VARCHAR" or t.startswith("ENUM(")
                      or (t == "JSON" and c not in raw)})
STANCE_METHOD_ENUM = tuple(STANCE_METHOD)


def _enum(values: tuple[str, ...]) -> str:
    return "ENUM (" + ", ".join("'" + v + "'" for v in values) + ")"


def schema(platforms: Sequence[str], known: bool = False, plain: bool = False) -> str:
    """The DDL of a trajectory file for a run on `platforms` (names in code order): the
    enum types, every declared table created with the file (Shoal's own, the market's, the
    graph's and the installed plug-ins'), each with its declaration as its comment, and
    the view `post_stats`. `known`: only the tables this process has declared so far
    (readers, which load no plug-in); `plain`: listed tables as tables of their declared
    rows (the live mirror's)."""
    specs = [s for s in TABLES if s.created == "run"] if known else TABLES.with_run()
    tables = "".join(s.ddl(platforms, plain=plain) for s in specs)
    return types(platforms) + tables + POST_STATS


def types(platforms: Sequence[str]) -> str:
    """The ENUM types the tables' columns use (`platform_t`: the run's platforms)."""
    return f"""
CREATE TYPE platform_t AS {_enum(tuple(platforms))};
CREATE TYPE action_t AS {_enum(ACTION_ENUM)};
CREATE TYPE post_kind_t AS {_enum(KIND_ENUM)};
CREATE TYPE status_t AS {_enum(STATUS_ENUM)};
CREATE TYPE trust_cause_t AS {_enum(TRUST_ENUM)};
CREATE TYPE follow_op_t AS {_enum(FOLLOW_ENUM)};
CREATE TYPE source_t AS {_enum(SOURCE_ENUM)};
CREATE TYPE stance_method_t AS {_enum(STANCE_METHOD_ENUM)};
"""


# Columns added since the first release, with what older rows hold: a run written before
# them gets them when it is opened for writing (a resume), so its new rows fit.
ADDED_COLUMNS = {"llm_calls": (("cache", "VARCHAR", "'off'"), ("saved_usd", "DOUBLE", "0"),
                               ("wait_ms", "DOUBLE", "0"), ("cached_tokens", "INTEGER", "NULL"),
                               ("reused_tokens", "INTEGER", "NULL"),
                               ("output", "VARCHAR", "NULL"),
                               ("counted_prompt_tokens", "INTEGER", "NULL")),
                 "rounds": (("prefix_reuse", "DOUBLE", "NULL"), ("driver_cpu_ms", "DOUBLE", "NULL"),
                            ("driver_cpu_ms_per_llm_turn", "DOUBLE", "NULL"))}

def _declare(name: str, columns: str, owner: str, doc: str, **how: Any) -> TableSpec:
    return TABLES.declare(TableSpec(name, " ".join(columns.split()), owner, doc, **how))


# The run's own tables: a fork writes complete copies of them.
RUN = _declare("run", """
    run_id VARCHAR, name VARCHAR, created_at TIMESTAMP, seed UBIGINT, engine_version VARCHAR,
    config_hash VARCHAR, config JSON, topics VARCHAR[], parent_run_id VARCHAR,
    fork_round INTEGER, lineage JSON""", "run", "The run's one row: id, seed, config, lineage.",
    round_key=None, lineage="own", order="run_id",
    volatile=("run_id", "created_at", "engine_version", "config_hash", "config", "lineage",
              "parent_run_id"))
_declare("topics", "topic_id SMALLINT, topic VARCHAR, label VARCHAR, keywords VARCHAR[]",
         "run", "The run's topics.", round_key=None, lineage="own", order="topic_id")
AGENTS = _declare("agents", f"""
    agent_id INTEGER, name VARCHAR, username VARCHAR, bio VARCHAR, persona VARCHAR,
    group_name VARCHAR, activity DOUBLE, age SMALLINT, gender VARCHAR, mbti VARCHAR,
    country VARCHAR, profession VARCHAR, source_id VARCHAR, {PER_PLATFORM},
    joined_round INTEGER""",
    "population", "One row per agent that joined by the last round: persona and platform "
    "membership.", round_key="joined_round", lineage="own", order="agent_id", frame=True)
# The round's tables, inherited by a fork up to its fork round.
_declare("rounds", """
    round INTEGER, sim_time TIMESTAMP, n_active INTEGER, n_acting INTEGER, n_actions INTEGER,
    n_rejected INTEGER, n_posts INTEGER, n_exposures INTEGER, n_trust_events INTEGER,
    n_interventions INTEGER, ms_schedule DOUBLE, ms_observe DOUBLE, ms_context DOUBLE,
    ms_decide DOUBLE, ms_apply DOUBLE, ms_update DOUBLE, ms_log DOUBLE, wall_time TIMESTAMP,
    prefix_reuse DOUBLE, driver_cpu_ms DOUBLE, driver_cpu_ms_per_llm_turn DOUBLE""",
    "engine", "One row per completed round: counts and timings.", order="round",
    volatile=("ms_schedule", "ms_observe", "ms_context", "ms_decide", "ms_apply", "ms_update",
              "ms_log", "wall_time", "driver_cpu_ms", "driver_cpu_ms_per_llm_turn"),
    frame=True)
_declare("posts", """
    post_id BIGINT, platform platform_t, round INTEGER, author INTEGER, kind post_kind_t,
    parent_id BIGINT, root_id BIGINT, text VARCHAR, seed_up INTEGER, seed_down INTEGER,
    stance_method stance_method_t""", "engine", "One row per post, reply, repost, quote, "
    "comment or event.", round_key=None, post_key="post_id",
    order="round, post_id", frame=True)
_declare("interventions", "round INTEGER, idx INTEGER, kind VARCHAR, spec JSON, effect JSON",
         "engine", "One row per fired intervention; spec and effect parsed from JSON.",
         order="round, idx", frame=True)
_declare("memory", """
    round INTEGER, id BIGINT, kind VARCHAR, level VARCHAR, text VARCHAR, covers_from INTEGER,
    covers_to INTEGER, posts BIGINT[], pinned BOOLEAN, status VARCHAR, attempts INTEGER,
    note VARCHAR, audience BIGINT""", "memory", "Round-memory records and their compaction.",
    frame=True)
_declare("context", """
    round INTEGER, platform VARCHAR, agent INTEGER, section VARCHAR, tokens INTEGER,
    lines INTEGER, budget INTEGER, trimmed JSON""", "memory",
    "Per agent context section: tokens, lines, budget, what was trimmed.", frame=True)
_declare("post_stances", "post_id BIGINT, topic VARCHAR, stance DOUBLE", "engine",
         "Each post's stance per topic it addresses.", round_key=None, post_key="post_id",
         order="post_id, topic")
_declare("profile_fixes", """
    round INTEGER, agent INTEGER, field VARCHAR, original VARCHAR, value VARCHAR,
    fix VARCHAR""", "population", "Every change made to a profile field on import.")
_declare("actions", """
    round INTEGER, platform platform_t, agent INTEGER, slot TINYINT, action action_t,
    target_post BIGINT, target_agent INTEGER, new_post_id BIGINT, status status_t,
    source source_t""", "engine", "One row per decision, applied (`status == 'ok'`) or "
    "rejected (the reason).", order="round, platform, agent, slot", frame=True)
_declare("llm_calls", """
    round INTEGER, agent INTEGER, platform VARCHAR, provider VARCHAR, model VARCHAR,
    base_url VARCHAR, call TINYINT, status VARCHAR, http_status SMALLINT,
    prompt_tokens INTEGER, completion_tokens INTEGER, section_tokens JSON, latency_ms DOUBLE,
    retries SMALLINT, outcome VARCHAR, fallback_reason VARCHAR, error VARCHAR,
    cost_usd DOUBLE, cache VARCHAR, saved_usd DOUBLE, wait_ms DOUBLE, cached_tokens INTEGER,
    reused_tokens INTEGER, output VARCHAR, counted_prompt_tokens INTEGER""", "llm",
    "One row per LLM call: model, tokens (the server's, and Shoal's own count beside them), "
    "latency, output mode, outcome, cost (empty for rule-based runs).",
    # the calls of a round that stopped for want of answers were made all the same
    kept="outcome = 'round_stopped'",
    # the loopback server listens on a fresh port each run; latency and waits for endpoint
    # limits are wall time; what a server has in its prefix cache depends on what it was
    # asked before, by every agent, in whatever order they came
    volatile=("base_url", "latency_ms", "wait_ms", "cached_tokens"), frame=True)
_declare("exposures", """
    round INTEGER, platform platform_t, agent INTEGER, post_id BIGINT, rank SMALLINT""",
    "engine", "One row per feed item shown: round, platform, agent, post_id, rank.",
    order="round, platform, agent, rank", frame=True, listed=("post_id", "rank"))
_declare("survey_responses", """
    round INTEGER, survey VARCHAR, wave INTEGER, agent INTEGER, item VARCHAR, kind VARCHAR,
    value DOUBLE, choice VARCHAR, text VARCHAR, abstained BOOLEAN, source VARCHAR""",
    "surveys", "Every survey answer (docs/surveys.md).")
_declare("beliefs", """
    round INTEGER, agent INTEGER, topic VARCHAR, position DOUBLE, confidence DOUBLE""",
    "beliefs", "One row per (round, agent, topic): position, confidence.",
    order="round, agent, topic", frame=True)
_declare("trust", """
    round INTEGER, truster INTEGER, trustee INTEGER, cause trust_cause_t, delta DOUBLE,
    value DOUBLE""", "beliefs", "One row per trust-changing interaction: truster, trustee, "
    "cause, delta, value.", order="round, truster, trustee, cause, delta, value", frame=True)
_declare("follows", """
    round INTEGER, platform platform_t, follower INTEGER, followee INTEGER,
    op follow_op_t""", "engine", "The follow-graph log: init (round 0), follow and unfollow "
    "rows.", order="round, platform, follower, followee, op", frame=True)

POST_STATS = """
CREATE VIEW post_stats AS
    SELECT p.*,
        p.seed_up + coalesce(v.up, 0) AS up,
        p.seed_down + coalesce(v.down, 0) AS down,
        coalesce(s.shares, 0) AS shares,
        coalesce(v.replies, 0) AS replies
    FROM posts p
    LEFT JOIN (SELECT target_post AS post_id,
                      count(*) FILTER (WHERE action IN ('like', 'upvote')) AS up,
                      count(*) FILTER (WHERE action = 'downvote') AS down,
                      count(*) FILTER (WHERE action IN ('reply', 'comment')) AS replies
               FROM actions WHERE status = 'ok' GROUP BY ALL) v USING (post_id)
    -- a repost shares its root (its parent); a quote shares the post it quotes
    LEFT JOIN (SELECT parent_id AS post_id, count(*) AS shares FROM posts
               WHERE kind IN ('repost', 'quote') GROUP BY ALL) s USING (post_id);
"""


def enum_array(codes: np.ndarray, names: tuple[str, ...]) -> pa.DictionaryArray:
    """An Arrow dictionary array (DuckDB reads it into an ENUM column)."""
    return pa.DictionaryArray.from_arrays(pa.array(np.asarray(codes, dtype=np.int8)),
                                          pa.array(list(names)))


def repeated_topics(topics: list[str], n_rows: int) -> pa.DictionaryArray:
    """Topic names cycling per row (agent-major, topic-minor layouts)."""
    codes = np.tile(np.arange(len(topics), dtype=np.int16), n_rows)
    return pa.DictionaryArray.from_arrays(pa.array(codes), pa.array(topics))


