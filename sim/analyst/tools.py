"""The analyst's tools: what it may read of a run, each a function of JSON arguments to a
JSON result, the same call giving the same result (the verifier re-runs them).

Every tool reads through the notebook API (`shoal.analysis.open_run`) or read-only SQL over
the run's history (`shoal.store.history_sql`); none writes. A result is a table
(`columns`, `rows`, `truncated`) plus what was asked, so the rows a sentence cites can be
shown next to it. A bad argument is a `ToolError`, returned to the model as the tool's
answer so it can correct itself.

A result is bounded (`fit`): one whose JSON text is longer than `max_bytes` loses rows
from the end of its tables, and values longer than `CELL_CHARS`, until it fits, and its
`note` says what was cut. What the model is given is what the trace stores, and the same
call gives the same cut result (the verifier compares them).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

import numpy as np
import pandas as pd

from shoal.analysis.runs import Run
from shoal.core.errors import InputError
from shoal.store.history_sql import ELLIPSIS, Cancel, Limits, QueryResult, query_history

MAX_ROWS = 100  # rows a tool returns at most (the SQL tool's default limit)
MAX_BYTES = 32_000  # a tool result's JSON text at most (UTF-8 bytes; about 8k tokens)
CELL_CHARS = 2_000  # a longer text value of a result is cut (ending in "…")
METRICS = ("belief_stats", "polarization", "echo_chambers", "cascades", "herd_effect",
           "group_distance", "engagement")
TERMINAL = "write_section"


class ToolError(Exception):
    """A tool call the model got wrong (unknown tool, bad arguments, failing query)."""


@dataclass
class Tool:
    """A tool as the model sees it and the function that answers it."""

    name: str
    description: str
    parameters: dict
    run: Callable[..., dict]
    cancellable: bool = False  # `run(args, cancel)`: it can be stopped while it works

    def spec(self) -> dict:
        """The OpenAI tool declaration."""
        return {"type": "function", "function": {
            "name": self.name, "description": self.description,
            "parameters": {"type": "object", **self.parameters}}}


def cell(v: Any) -> Any:
    """A DataFrame cell as JSON data (NaN → None, numpy scalars → Python, floats to 6
    significant digits so a result's text is stable)."""
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float):
        return None if math.isnan(v) or math.isinf(v) else float(f"{v:.6g}")
    if isinstance(v, datetime | date | pd.Timestamp):
        return str(v)
    if isinstance(v, list | tuple | np.ndarray):
        return [cell(x) for x in v]
    if isinstance(v, dict):
        return {str(k): cell(x) for k, x in v.items()}
    if v is pd.NA or v is pd.NaT:
        return None
    return v


def _size(value: object) -> int:
    return len(json.dumps(value, ensure_ascii=False, default=str).encode("utf-8"))


def _cut_strings(value: object, chars: int) -> tuple[object, int]:
    """`value` with every string longer than `chars` cut (ending in "…"); how many."""
    if isinstance(value, str):
        return (value[:chars] + ELLIPSIS, 1) if len(value) > chars else (value, 0)
    if isinstance(value, list):
        parts = [_cut_strings(v, chars) for v in value]
        return [p[0] for p in parts], sum(p[1] for p in parts)
    if isinstance(value, dict):
        parts = {k: _cut_strings(v, chars) for k, v in value.items()}
        return {k: p[0] for k, p in parts.items()}, sum(p[1] for p in parts.values())
    return value, 0


def fit(result: dict, max_bytes: int = MAX_BYTES) -> dict:
    """`result` bounded to `max_bytes` of JSON text: values longer than `CELL_CHARS`
    cut, then rows dropped from the end of its tables (the largest table first), with a
    `note` saying what was cut. A result that fits is returned as it is."""
    if _size(result) <= max_bytes:
        return result
    out, cut = _cut_strings(result, CELL_CHARS)
    notes = [f"{cut} values longer than {CELL_CHARS} characters are cut"] if cut else []
    tables = [t for t in [out, *out.values()] if isinstance(t, dict)
              and isinstance(t.get("rows"), list)]
    for t in sorted(tables, key=_size, reverse=True):
        excess = _size(out) + 200 - max_bytes  # (200: room for the note)
        if excess <= 0:
            break
        rows, keep, freed = t["rows"], len(t["rows"]), 0
        while keep > 0 and freed < excess:
            keep -= 1
            freed += _size(rows[keep]) + 1
        if keep < len(rows):
            notes.append(f"only {keep} of the {len(rows)} rows are shown")
            t.update(rows=rows[:keep], truncated=True)
    note = (f"the result is cut to fit {max_bytes:,} bytes: " + "; ".join(notes)
            + "; aggregate, filter or select fewer columns to see the rest")
    out["note"] = f"{out['note']}; {note}" if out.get("note") else note
    return out


def table(df: pd.DataFrame, limit: int = MAX_ROWS) -> dict:
    """A frame as a tool result table."""
    return {"columns": [str(c) for c in df.columns],
            "rows": [[cell(v) for v in row] for row in df.head(limit).itertuples(index=False)],
            "truncated": len(df) > limit}


class Toolbox:
    """The tools over one run (and the runs it is compared with, labelled B, C, ...)."""

    def __init__(self, run: Run, compare: dict[str, Run] | None = None,
                 sql: Callable[..., QueryResult] | None = None,
                 interview: Callable[..., pd.DataFrame] | None = None,
                 max_rows: int = MAX_ROWS, max_bytes: int = MAX_BYTES):
        """`sql(query, rows, cancel=None)` runs a query (default: `query_history` with
        no time limit); `interview(agents, round, question, cancel=None)` asks agents."""
        self.run = run
        self.compare = dict(compare or {})
        self.sql_fn = sql or (lambda query, rows, cancel=None: query_history(
            run.path, query, limits=Limits(rows=rows)))
        self.interview_fn = interview
        self.max_rows, self.max_bytes = max_rows, max_bytes
        self.tools: dict[str, Tool] = {t.name: t for t in self._tools()}

    def specs(self) -> list[dict]:
        """Every tool's declaration, in a fixed order."""
        return [t.spec() for t in self.tools.values()]

    def call(self, name: str, args: dict, cancel: Cancel | None = None) -> dict:
        """The result of a tool call, bounded (`fit`); ToolError when the call is wrong
        or went past a limit. `cancel` stops a query or interview in flight."""
        tool = self.tools.get(name)
        if tool is None or name == TERMINAL:
            raise ToolError(f"no tool {name!r}; tools: {', '.join(self.tools)}")
        if not isinstance(args, dict):
            raise ToolError("arguments must be a JSON object")
        try:
            result = tool.run(args, cancel) if tool.cancellable else tool.run(args)
        except (InputError, KeyError, ValueError, TypeError) as exc:
            raise ToolError(f"{name}: {exc}") from None
        return fit(result, self.max_bytes)

    # ----------------------------------------------------------------- the tools

    def _tools(self) -> list[Tool]:
        topics = self.run.topics
        tools = [
            Tool("sql", "Read-only SQL (one SELECT, DuckDB dialect, PIVOT and UNPIVOT "
                 f"included) over the run's tables, its whole history; at most "
                 f"{self.max_rows} rows come back, long values are cut, and a query has a "
                 "time and memory limit: aggregate in SQL rather than reading rows.",
                 {"properties": {"query": {"type": "string"}}, "required": ["query"]},
                 self.sql, cancellable=True),
            Tool("metric", "A metric of the run per round (and topic): belief_stats (n, "
                 "mean, sd of positions), polarization (sd, bimodality, Esteban-Ray, distance "
                 "between camps), echo_chambers (follower-followee stance correlation), "
                 "cascades (size, depth, virality per root post), herd_effect (final score "
                 "by initial vote), group_distance, engagement (received per agent).",
                 {"properties": {"name": {"type": "string", "enum": list(METRICS)},
                                 "topic": {"type": "string", "enum": topics},
                                 "round": {"type": "integer"}},
                  "required": ["name"]}, self.metric),
            Tool("top_posts", "The most engaged posts with their authors (engagement = up + "
                 "down + shares + replies).",
                 {"properties": {"limit": {"type": "integer", "minimum": 1, "maximum": 20},
                                 "round_from": {"type": "integer"},
                                 "round_to": {"type": "integer"}}}, self.top_posts),
            Tool("agent", "An agent: without a round, its trajectory (position and confidence "
                 "per round and topic, actions per round); with a round, its state at the "
                 "end of that round: profile, beliefs, actions, the sections of the "
                 "context it was given.",
                 {"properties": {"agent": {"type": "integer"}, "round": {"type": "integer"}},
                  "required": ["agent"]}, self.agent),
        ]
        if self.compare:
            tools.append(Tool(
                "divergence", "Per round and topic, the mean position in this run (A) and a "
                "compared run, and their difference.",
                {"properties": {"run": {"type": "string", "enum": list(self.compare)},
                                "topic": {"type": "string", "enum": topics}},
                 "required": ["run"]}, self.divergence))
        if not self.run.table("graph_relations").empty:
            tools.append(Tool(
                "graph_search", "Facts of the run's graph memory matching a query (BM25), "
                "with provenance.",
                {"properties": {"query": {"type": "string"},
                                "limit": {"type": "integer", "minimum": 1, "maximum": 20},
                                "as_of": {"type": "integer"}},
                 "required": ["query"]}, self.graph_search))
        if self.interview_fn is not None:
            tools.append(Tool(
                "interview", "Ask agents (at most 20) a question, each as it was at the end "
                "of a round, with the context it had then.",
                {"properties": {"agents": {"type": "array", "items": {"type": "integer"},
                                           "maxItems": 20},
                                "round": {"type": "integer"}, "question": {"type": "string"}},
                 "required": ["agents", "question"]}, self.interview, cancellable=True))
        tools.append(Tool(
            TERMINAL, "Finish the section: its text (Markdown paragraphs), every factual "
            "sentence with its citations.",
            {"properties": {"text": {"type": "string"}}, "required": ["text"]},
            lambda args: {}))
        return tools

    def sql(self, args: dict, cancel: Cancel | None = None) -> dict:
        """Rows of a SELECT over the history."""
        query = str(args.get("query") or "")
        if not query.strip():
            raise ToolError("sql: the query is empty")
        result = self.sql_fn(query, self.max_rows, cancel)
        return {"query": query, **result.as_dict()}

    def metric(self, args: dict) -> dict:
        """A metric's rows (filtered by topic and round if given)."""
        name = args.get("name")
        if name not in METRICS:
            raise ToolError(f"metric: unknown metric {name!r}; metrics: {', '.join(METRICS)}")
        df = getattr(self.run, name)()
        df = df.reset_index() if isinstance(df.index, pd.MultiIndex) or df.index.name else df
        if name == "cascades":  # the largest first: the rows a model can see matter most
            df = df.sort_values(["size", "root_id"], ascending=[False, True])
        elif name == "engagement":
            df = df.sort_values(["engagement", "agent"], ascending=[False, True])
        if args.get("topic") is not None and "topic" in df.columns:
            df = df[df["topic"] == args["topic"]]
        if args.get("round") is not None and "round" in df.columns:
            df = df[df["round"] == int(args["round"])]
        return {"metric": name, **{k: args[k] for k in ("topic", "round") if k in args},
                **table(df.reset_index(drop=True))}

    def top_posts(self, args: dict) -> dict:
        """The most engaged posts (ties: higher score, then older)."""
        limit = max(1, min(int(args.get("limit") or 10), 20))  # (as its schema says)
        posts = self.run.posts
        if args.get("round_from") is not None:
            posts = posts[posts["round"] >= int(args["round_from"])]
        if args.get("round_to") is not None:
            posts = posts[posts["round"] <= int(args["round_to"])]
        posts = posts.assign(score=posts["up"] - posts["down"],
                             engagement=posts[["up", "down", "shares", "replies"]].sum(axis=1))
        top = posts.sort_values(["engagement", "score", "post_id"],
                                ascending=[False, False, True]).head(limit)
        names = dict(zip(self.run.agents["agent_id"], self.run.agents["username"],
                         strict=True))
        top = top.assign(author_username=[names.get(a, "the news") for a in top["author"]])
        cols = ["post_id", "round", "platform", "author", "author_username", "kind", "text",
                "engagement", "score", "up", "down", "shares", "replies"]
        return {"limit": limit, **table(top[cols])}

    def agent(self, args: dict) -> dict:
        """One agent: its trajectory, or its state at the end of a round."""
        agent = int(args["agent"])
        agents = self.run.agents
        row = agents[agents["agent_id"] == agent]
        if row.empty:
            raise ToolError(f"agent: no agent {agent} (agents 0..{len(agents) - 1})")
        if args.get("round") is None:
            return self._trajectory(agent)
        round_ = int(args["round"])
        if not 0 <= round_ <= self.run.last_round:
            raise ToolError(f"agent: no round {round_} (rounds 0..{self.run.last_round})")
        beliefs = self.run.beliefs
        beliefs = beliefs[(beliefs["agent"] == agent) & (beliefs["round"] == round_)]
        actions = self.run.actions
        actions = actions[(actions["agent"] == agent) & (actions["round"] == round_)]
        context = self.run.context
        context = context[(context["agent"] == agent) & (context["round"] == round_)]
        profile = {k: cell(v) for k, v in row.iloc[0].items()
                   if k in ("agent_id", "username", "name", "group_name", "bio")}
        return {"agent": agent, "round": round_, "profile": profile,
                "beliefs": table(beliefs[["topic", "position", "confidence"]]),
                "actions": table(actions[["platform", "action", "target_post",
                                          "target_agent", "new_post_id", "status"]]),
                "context": table(context[["platform", "section", "tokens", "lines"]])}

    def _trajectory(self, agent: int) -> dict:
        """Position and confidence per round and topic, with the agent's applied actions
        per round."""
        beliefs = self.run.beliefs
        mine = beliefs[beliefs["agent"] == agent][["round", "topic", "position",
                                                   "confidence"]]
        actions = self.run.actions
        acted = actions[(actions["agent"] == agent) & (actions["status"] == "ok")
                        & (actions["action"] != "do_nothing")]
        per_round = acted.groupby("round").size().rename("actions").reset_index()
        mine = mine.merge(per_round, on="round", how="left").fillna({"actions": 0})
        return {"agent": agent, **table(mine.reset_index(drop=True), limit=400)}

    def divergence(self, args: dict) -> dict:
        """Mean positions per round: this run, the compared run, and the difference."""
        label = args.get("run")
        other = self.compare.get(label)
        if other is None:
            raise ToolError(f"divergence: no compared run {label!r}; runs: "
                            f"{', '.join(self.compare)}")
        a = self.run.belief_stats().reset_index()
        b = other.belief_stats().reset_index()
        both = a[["round", "topic", "mean"]].merge(b[["round", "topic", "mean"]],
                                                   on=["round", "topic"], suffixes=("_a", "_b"))
        if args.get("topic") is not None:
            both = both[both["topic"] == args["topic"]]
        both = both.assign(difference=both["mean_b"] - both["mean_a"])
        return {"run": label, "run_id": other.run_id, **table(both.reset_index(drop=True))}

    def graph_search(self, args: dict) -> dict:
        """BM25 search over the run's graph memory."""
        from shoal.memory.knowledge.model import TABLES
        from shoal.memory.knowledge.retrieval import search_tables

        reader = self.run.graph()
        limit = min(int(args.get("limit") or 10), 20)
        as_of = args.get("as_of")
        hits = search_tables({n: reader.arrow(n) for n in TABLES}, str(args["query"]),
                             limit, None if as_of is None else int(as_of))
        return {"query": args["query"], **table(hits)}

    def interview(self, args: dict, cancel: Cancel | None = None) -> dict:
        """Answers of agents asked a question at a round."""
        agents = [int(a) for a in args.get("agents") or []]
        if not agents or len(agents) > 20:
            raise ToolError("interview: give 1 to 20 agent ids")
        round_ = int(args["round"]) if args.get("round") is not None else self.run.last_round
        answers = self.interview_fn(agents, round_, str(args["question"]), cancel)
        return {"round": round_, "question": args["question"], **table(answers)}
