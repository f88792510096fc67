"""The trajectory's schema: tables, enums and the view `post_stats` (docs/store.md).

Categorical columns are DuckDB ENUMs; their values come from the core vocabulary and, for
platforms, from the run's own platforms, so the store needs nothing of the engine.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from sim.core.posts import PostKind
from sim.core.vocabulary import (
    ACTION_NAMES,
    FOLLOW_OPS,
    REASON_NAMES,
    SOURCE,
    STANCE_METHOD,
    TRUST_CAUSES,
    ActionType,
    Reason,
)
from sim.store.graph import DDL as GRAPH_DDL
from sim.store.graph import GRAPH_TABLES

ACTION_ENUM = tuple(ACTION_NAMES[a] for a in ActionType)
KIND_ENUM = tuple(k.name.lower() for k in PostKind)
STATUS_ENUM = tuple(REASON_NAMES[r] for r in Reason)
TRUST_ENUM = TRUST_CAUSES
FOLLOW_ENUM = FOLLOW_OPS
SOURCE_ENUM = tuple(SOURCE)
STANCE_METHOD_ENUM = tuple(STANCE_METHOD)


def _enum(values: tuple[str, ...]) -> str:
    return "ENUM (" + ", ".join("'" + v + "'" for v in values) + ")"


def schema(platforms: Sequence[str]) -> str:
    """The DDL of a trajectory file for a run on `platforms` (names in code order): the
    platform enum and one `on_<platform>` membership column of `agents` per platform."""
    on = "".join(f"on_{p} BOOLEAN, " for p in platforms)
    return f"""
CREATE TYPE platform_t AS {_enum(tuple(platforms))};
CREATE TYPE action_t AS {_enum(ACTION_ENUM)};
CREATE TYPE post_kind_t AS {_enum(KIND_ENUM)};
CREATE TYPE status_t AS {_enum(STATUS_ENUM)};
CREATE TYPE trust_cause_t AS {_enum(TRUST_ENUM)};
CREATE TYPE follow_op_t AS {_enum(FOLLOW_ENUM)};
CREATE TYPE source_t AS {_enum(SOURCE_ENUM)};
CREATE TYPE stance_method_t AS {_enum(STANCE_METHOD_ENUM)};
CREATE TABLE run (
    run_id VARCHAR, name VARCHAR, created_at TIMESTAMP, seed UBIGINT,
    engine_version VARCHAR, config_hash VARCHAR, config JSON, topics VARCHAR[],
    parent_run_id VARCHAR, fork_round INTEGER, lineage JSON
);
CREATE TABLE topics (topic_id SMALLINT, topic VARCHAR, label VARCHAR, keywords VARCHAR[]);
CREATE TABLE agents (
    agent_id INTEGER, name VARCHAR, username VARCHAR, bio VARCHAR, persona VARCHAR,
    group_name VARCHAR, activity DOUBLE, age SMALLINT, gender VARCHAR, mbti VARCHAR,
    country VARCHAR, profession VARCHAR, source_id VARCHAR, {on}joined_round INTEGER
);
CREATE TABLE rounds (
    round INTEGER, sim_time TIMESTAMP, n_active INTEGER, n_acting INTEGER, n_actions INTEGER,
    n_rejected INTEGER, n_posts INTEGER, n_exposures INTEGER, n_trust_events INTEGER,
    n_interventions INTEGER,
    ms_schedule DOUBLE, ms_observe DOUBLE, ms_context DOUBLE, ms_decide DOUBLE, ms_apply DOUBLE,
    ms_update DOUBLE, ms_log DOUBLE, wall_time TIMESTAMP, prefix_reuse DOUBLE,
    driver_cpu_ms DOUBLE, driver_cpu_ms_per_llm_turn DOUBLE
);
CREATE TABLE posts (
    post_id BIGINT, platform platform_t, round INTEGER, author INTEGER, kind post_kind_t,
    parent_id BIGINT, root_id BIGINT, text VARCHAR, seed_up INTEGER, seed_down INTEGER,
    stance_method stance_method_t
);
CREATE TABLE interventions (
    round INTEGER, idx INTEGER, kind VARCHAR, spec JSON, effect JSON
);
CREATE TABLE memory (
    round INTEGER, id BIGINT, kind VARCHAR, level VARCHAR, text VARCHAR, covers_from INTEGER,
    covers_to INTEGER, posts BIGINT[], pinned BOOLEAN, status VARCHAR, attempts INTEGER,
    note VARCHAR, audience BIGINT
);
CREATE TABLE context (
    round INTEGER, platform VARCHAR, agent INTEGER, section VARCHAR, tokens INTEGER,
    lines INTEGER, budget INTEGER, trimmed JSON
);
CREATE TABLE post_stances (post_id BIGINT, topic VARCHAR, stance DOUBLE);
CREATE TABLE profile_fixes (
    round INTEGER, agent INTEGER, field VARCHAR, original VARCHAR, value VARCHAR, fix VARCHAR
);
CREATE TABLE actions (
    round INTEGER, platform platform_t, agent INTEGER, slot TINYINT, action action_t,
    target_post BIGINT, target_agent INTEGER, new_post_id BIGINT, status status_t,
    source source_t
);
CREATE TABLE llm_calls (
    round INTEGER, agent INTEGER, platform VARCHAR, provider VARCHAR, model VARCHAR,
    base_url VARCHAR, call TINYINT, status VARCHAR, http_status SMALLINT,
    prompt_tokens INTEGER, completion_tokens INTEGER, section_tokens JSON, latency_ms DOUBLE,
    retries SMALLINT, outcome VARCHAR, fallback_reason VARCHAR, error VARCHAR,
    cost_usd DOUBLE, cache VARCHAR, saved_usd DOUBLE, wait_ms DOUBLE, cached_tokens INTEGER,
    reused_tokens INTEGER
);
CREATE TABLE exposures (
    round INTEGER, platform platform_t, agent INTEGER, post_id BIGINT, rank SMALLINT
);
CREATE TABLE survey_responses (
    round INTEGER, survey VARCHAR, wave INTEGER, agent INTEGER, item VARCHAR,
    kind VARCHAR, value DOUBLE, choice VARCHAR, text VARCHAR, abstained BOOLEAN,
    source VARCHAR
);
CREATE TABLE beliefs (
    round INTEGER, agent INTEGER, topic VARCHAR, position DOUBLE, confidence DOUBLE
);
CREATE TABLE trust (
    round INTEGER, truster INTEGER, trustee INTEGER, cause trust_cause_t, delta DOUBLE,
    value DOUBLE
);
CREATE TABLE follows (
    round INTEGER, platform platform_t, follower INTEGER, followee INTEGER, op follow_op_t
);
CREATE TABLE markets (
    round INTEGER, market VARCHAR, question VARCHAR, topic VARCHAR, outcomes VARCHAR[],
    maker JSON, opens INTEGER, closes INTEGER, resolution JSON, worst_case_loss DOUBLE
);
CREATE TABLE prices (
    round INTEGER, market VARCHAR, outcome VARCHAR, price DOUBLE, volume DOUBLE,
    n_trades INTEGER
);
CREATE TABLE trades (
    round INTEGER, market VARCHAR, agent INTEGER, side VARCHAR, outcome VARCHAR,
    cash DOUBLE, shares DOUBLE, price_before DOUBLE, price_after DOUBLE, source TINYINT
);
CREATE TABLE positions (
    round INTEGER, market VARCHAR, agent INTEGER, outcome VARCHAR, shares DOUBLE,
    cost DOUBLE, cash DOUBLE, realised DOUBLE
);
CREATE TABLE market_bridge (
    round INTEGER, direction VARCHAR, market VARCHAR, kind VARCHAR, value DOUBLE,
    post_ids BIGINT[], detail VARCHAR
);
CREATE TABLE market_books (
    round INTEGER, traders INTEGER, cash DOUBLE, maker_cash DOUBLE, paid_out DOUBLE,
    cash_imbalance DOUBLE, share_imbalance DOUBLE
);
CREATE TABLE forecasts (
    round INTEGER, market VARCHAR, agent INTEGER, outcome VARCHAR, probability DOUBLE
);
CREATE TABLE payouts (
    round INTEGER, market VARCHAR, agent INTEGER, outcome VARCHAR, payout DOUBLE,
    rule_value DOUBLE
);
{GRAPH_DDL}
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

# Columns added since the first release, with what older rows hold: a run written before
# them gets them when it is opened for writing (a resume), so its new rows fit.
ADDED_COLUMNS = {"llm_calls": (("cache", "VARCHAR", "'off'"), ("saved_usd", "DOUBLE", "0"),
                               ("wait_ms", "DOUBLE", "0"), ("cached_tokens", "INTEGER", "NULL"),
                               ("reused_tokens", "INTEGER", "NULL")),
                 "rounds": (("prefix_reuse", "DOUBLE", "NULL"), ("driver_cpu_ms", "DOUBLE", "NULL"),
                            ("driver_cpu_ms_per_llm_turn", "DOUBLE", "NULL"))}

TABLES = ("run", "topics", "agents", "rounds", "posts", "post_stances", "actions",
          "exposures", "beliefs", "trust", "follows", "interventions", "memory", "context",
          "llm_calls", "profile_fixes", "markets", "prices", "trades", "positions",
          "market_bridge", "market_books", "forecasts", "payouts", "survey_responses",
          *GRAPH_TABLES)


def enum_array(codes: np.ndarray, names: tuple[str, ...]) -> pa.DictionaryArray:
    """An Arrow dictionary array (DuckDB reads it into an ENUM column)."""
    return pa.DictionaryArray.from_arrays(pa.array(np.asarray(codes, dtype=np.int8)),
                                          pa.array(list(names)))


def repeated_topics(topics: list[str], n_rows: int) -> pa.DictionaryArray:
    """Topic names cycling per row (agent-major, topic-minor layouts)."""
    codes = np.tile(np.arange(len(topics), dtype=np.int16), n_rows)
    return pa.DictionaryArray.from_arrays(pa.array(codes), pa.array(topics))


