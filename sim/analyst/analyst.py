"""`shoal analyse`: an LLM analyst writes a report on a run, every sentence checked.

1. **Plan.** One call with the run's facts and the `plan_sections` tool gives the sections
   (an unusable plan falls back to `default_plan`, and the trace says why).
2. **Sections**, at most `parallel` at a time, each its own bounded loop: the model calls
   tools (`shoal.analyst.tools`) at most `tool_calls` times, then must call `write_section`;
   the section has a deadline. A failed section (the model erred, never wrote, or wrote
   only a refusal) or a timed-out one does not stop the others.
3. **Verification.** Each sentence's citations are resolved and its numbers checked
   (`shoal.analyst.citations`); step citations are checked by re-running the tool call.
4. **Traces.** Every step (model message, tool call with its full result, verdict) is
   written to the run's `analysis_*` tables as it happens (`shoal.store.traces`). A
   section that did not finish (failed, timed out, killed) is retried alone with
   `retry_sections`, reusing the finished ones.

Database work (tool calls and writes) runs on one worker thread, so a write never meets
a reader of the same file; SQL queries run on threads of their own (each on its own
cursor), so a slow query holds up neither the trace nor the other sections; model calls
run concurrently on the event loop.

**Limits** (`Settings`, docs/analyst.md): each query is interrupted after
`query_timeout_s`, returns at most `max_rows` rows with long values cut, and the database
has a memory limit (spilling to at most `temp_limit_mb` of temporary files); each tool
result is cut to `max_result_bytes` (what the model is given is what is stored). A
section's deadline interrupts its query or interview in flight. Ctrl-C stops at once: the
queries are interrupted, finished sections are kept, the sections under way and the
analysis are marked `interrupted`, and the same `analyse` call continues it. A full disk
stops the analysis with a `StorageFull` error; what was stored stays.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd

from shoal.analysis.analyses import analyses, analysis_frames, write_markdown
from shoal.analysis.runs import Run
from shoal.analyst.citations import (
    Citation,
    Claim,
    citations_json,
    numbers,
    numeric_values,
    parse_claim,
    sentences,
    supports,
    verify,
)
from shoal.analyst.prompt import (
    PLAN_SYSTEM,
    PLAN_TOOL,
    SYSTEM,
    Section,
    default_plan,
    facts,
    parse_plan,
    run_facts,
)
from shoal.analyst.tools import TERMINAL, Toolbox, ToolError, table
from shoal.config import parse_config
from shoal.config.llm import ProviderConfig
from shoal.core.errors import InputError, StorageFull, out_of_space
from shoal.core.faults import crash_point
from shoal.llm.chat import ChatModel, ChatReply, ChatRequest, chat_model, cost
from shoal.llm.endpoints import Endpoints
from shoal.llm.metadata import ANALYST, meta
from shoal.runs.interview import interview_agents, provider_for
from shoal.store.history_sql import (
    Cancel,
    Limits,
    QueryResult,
    attach_history,
    bound_connection,
    select_rows,
)
from shoal.store.lineage import LiveRun, being_written, lineage
from shoal.store.run_dir import open_run_dir
from shoal.store.traces import UNVERIFIED, AnalysisStore, open_for_writing, read_tables

EVIDENCE_ROWS = 10  # rows of a citation kept with the claim (those with the numbers first)
LABELS = "BCDEFGHIJKLMNOPQRSTUVWXYZ"


@dataclass
class Settings:
    """Bounds of one analysis (docs/analyst.md, "Limits")."""

    tool_calls: int = 8  # per section
    deadline_s: float = 300.0  # per section
    parallel: int = 4  # sections written at once
    query_timeout_s: float = 30.0  # one SQL query (interrupted after)
    max_rows: int = 100  # rows of a SQL result
    max_result_bytes: int = 32_000  # a tool result's JSON text (what the model reads)
    memory_limit_mb: int = 1024  # DuckDB's memory while the analysis holds the run
    temp_limit_mb: int = 2048  # temporary files a query may spill to beyond that
    query_threads: int = field(default_factory=lambda: min(4, os.cpu_count() or 1))

    def check(self) -> None:
        """InputError naming the flag (or field) of a bound that cannot be used."""
        for flag, value in (("--tool-calls", self.tool_calls), ("--parallel", self.parallel),
                            ("max_rows", self.max_rows), ("query_threads", self.query_threads)):
            if value < 1:
                raise InputError(f"{flag} {value}: at least 1")
        for flag, value in (("--deadline", self.deadline_s),
                            ("--query-timeout", self.query_timeout_s)):
            if not value > 0 or value == float("inf"):
                raise InputError(f"{flag} {value:g}: must be a positive number of seconds")
        if self.memory_limit_mb < 64:
            raise InputError(f"--memory-limit {self.memory_limit_mb}: at least 64 (MB)")
        if self.max_result_bytes < 1000 or self.temp_limit_mb < 0:
            raise InputError("max_result_bytes: at least 1000; temp_limit_mb: at least 0")


class AnalysisInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped an analysis: its finished sections are kept, the others marked
    interrupted; the same `analyse` call continues it."""

    def __init__(self, run: Path, analysis_id: str, kept: int | None):
        if kept is None:  # (before its plan was stored: the next call starts it anew)
            said = (f"analysis {analysis_id} interrupted before its plan was made: nothing "
                    "kept; the same `shoal analyse` command starts it again")
        else:
            said = (f"analysis {analysis_id} interrupted: {kept} finished sections kept; "
                    "run the same `shoal analyse` command to continue it")
        super().__init__(said)
        self.run, self.analysis_id, self.kept = run, analysis_id, kept or 0


@dataclass
class Outcome:
    """What an analysis came to."""

    analysis_id: str
    status: str  # done | partial
    sections: pd.DataFrame
    claims: int
    unverified: int
    cost_usd: float
    markdown: Path
    seconds: float
    reused: list[str] = field(default_factory=list)  # sections kept from before (retry)


class SectionFailed(Exception):
    """A section that cannot finish (the model failed, or never wrote)."""


class Analyst:
    """One analysis of one run: its model, tools and store."""

    def __init__(self, run: str | Path, provider: ProviderConfig, analysis_id: str,
                 compare: list[str] | None = None, question: str | None = None,
                 settings: Settings | None = None, seed: int = 0):
        self.run_dir = open_run_dir(run)
        if being_written(self.run_dir):
            raise InputError(f"{self.run_dir.run_id} is being written; analyse it when the "
                             "run has stopped")
        self.path = self.run_dir.root
        self.provider, self.analysis_id, self.question = provider, analysis_id, question
        self.settings = settings or Settings()
        self.settings.check()
        self.compare_paths = {LABELS[i]: str(open_run_dir(c).root)
                              for i, c in enumerate(compare or [])}
        # Compared runs are read now: a fork of this run reads this run's file, which is
        # held below for the whole analysis.
        compared = {k: Run(p) for k, p in self.compare_paths.items()}
        for r in compared.values():
            r.beliefs  # noqa: B018  (cached: what the divergence tool reads)
        # One connection holds the run's file for the whole analysis: the tools read and
        # the trace is written through it (opening the file per step costs ~50 ms).
        self.con = open_for_writing(self.run_dir.db)
        attach_history(self.con, self.path, own=self.con.execute(
            "SELECT current_database()").fetchone()[0])
        s = self.settings
        bound_connection(self.con, s.memory_limit_mb, s.temp_limit_mb, s.query_threads)
        # SQL runs on cursors of a connection of its own (cursors are made from one
        # parent at a time), on threads of its own: a slow query holds up no one else.
        self.sql_con = self.con.cursor()
        run_obj = Run(LiveRun(self.run_dir.run_id, self.con.cursor, self.run_dir.read_meta,
                              self.run_dir.read_config,
                              lineage(self.path)[:-1], self.path))
        self.toolbox = Toolbox(run_obj, compared, self._sql, self._interview, s.max_rows,
                               s.max_result_bytes)
        self.store = AnalysisStore(self.run_dir.db, self.con)
        self.db = ThreadPoolExecutor(1, thread_name_prefix="shoal-analyst-db")
        self.sql_pool = ThreadPoolExecutor(max(1, s.parallel),
                                           thread_name_prefix="shoal-analyst-sql")
        self.cancels: set[Cancel] = set()  # of the section attempts under way
        self.seed = seed
        self.has_llm_agents = bool(run_obj.config.get("llm"))
        self.urls: list[str] = list(provider.base_urls)  # loopback resolved when started
        self.sections_done = 0  # in this process (a crash point counts them)
        self.model: ChatModel | None = None
        self._facts: dict[str, Any] | None = None  # the run's facts as data (run_facts)

    def facts(self) -> str:
        """The run's facts, as every request states them."""
        return facts(self.toolbox.run, self.toolbox.compare, self.question,
                     self.toolbox.sql_fn, self._fact_data())

    def _fact_data(self) -> dict[str, Any]:
        if self._facts is None:
            self._facts = run_facts(self.toolbox.run, self.toolbox.compare, self.question)
        return self._facts

    def _meta(self, section: str | None) -> dict[str, Any]:
        """The `shoal` field of a plan request (`section` None) or a section's requests:
        the same facts their text states, as data."""
        return meta(ANALYST, call="plan" if section is None else "section", section=section,
                    **self._fact_data())

    # ------------------------------------------------------------ plumbing

    async def _db(self, fn, *args) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.db, fn, *args)

    def _sql(self, query: str, rows: int, cancel: Cancel | None = None) -> QueryResult:
        """One query within the settings' limits (`cancel`: a section's, to stop it)."""
        return select_rows(self.sql_con, query, Limits(
            rows=rows, timeout_s=self.settings.query_timeout_s), cancel)

    def _interview(self, agents: list[int], round_: int, question: str,
                   cancel: Cancel | None = None) -> pd.DataFrame:
        """Agents answer with their own provider (an LLM run's) or the analyst's model;
        the batch ends at the section's deadline at the latest, or when `cancel` is."""
        own = self.has_llm_agents
        batch = interview_agents(str(self.path), agents, question, round_,
                                 None if own else self.urls[0],
                                 None if own else self.provider.model,
                                 None if own else self.provider.api_key_env,
                                 deadline_s=self.settings.deadline_s,
                                 batch_id=f"{self.analysis_id}-{secrets.token_hex(3)}",
                                 store=self.store,
                                 stop=None if cancel is None
                                 else (lambda: cancel.reason is not None))
        return batch.rows[["batch_id", "agent", "answer", "status", "context_hash"]]

    async def _chat(self, request: ChatRequest) -> ChatReply:
        return await self.model.chat(request)

    async def _step(self, section: str, attempt: int, n: int, kind: str, *,
                    call: int | None = None, name: str = "", arguments: Any = None,
                    content: str = "", result: str | None = None, status: str = "ok",
                    reply: ChatReply | None = None) -> None:
        row = {"analysis_id": self.analysis_id, "section_id": section, "attempt": attempt,
               "step": n, "kind": kind, "call": call, "name": name,
               "arguments": None if arguments is None else json.dumps(arguments),
               "content": content, "status": status,
               "prompt_tokens": reply.prompt_tokens if reply else None,
               "completion_tokens": reply.completion_tokens if reply else None,
               "cost_usd": cost(self.provider, reply.prompt_tokens or 0,
                                reply.completion_tokens or 0) if reply else None,
               "latency_ms": reply.latency_ms if reply else None,
               "created_at": datetime.now()}
        await self._db(self.store.add_step, row, result)

    # ------------------------------------------------------------ the plan

    async def plan(self, run_facts: str) -> list[Section]:
        """The sections to write (the model's plan, else the default plan)."""
        request = ChatRequest(messages=[{"role": "system", "content": PLAN_SYSTEM},
                                        {"role": "user", "content": run_facts}],
                              tools=[PLAN_TOOL], tool_choice="required", meta=self._meta(None))
        problem = ""
        sections = None
        try:  # (bounded like a section: a plan that never comes does not hold up the rest)
            reply: ChatReply | None = await asyncio.wait_for(self._chat(request),
                                                             self.settings.deadline_s)
        except TimeoutError:
            reply = None
            problem = (f"the plan call failed: no answer within the deadline "
                       f"({self.settings.deadline_s:g} s); the default plan is used")
        if reply is not None and reply.status != "ok":
            problem = f"the plan call failed: {reply.status}: {reply.error}"
        elif reply is not None:
            try:
                calls = (reply.message or {}).get("tool_calls") or []
                sections = parse_plan(json.loads(calls[0]["function"]["arguments"]))
            except (IndexError, KeyError, TypeError, ValueError) as exc:
                problem = f"unusable plan ({exc}); the default plan is used"
        await self._step("plan", 1, 1, "plan",
                         content=json.dumps(reply.message if reply else None),
                         status="ok" if sections else "fallback", reply=reply,
                         name="plan_sections", arguments={"problem": problem} if problem
                         else None)
        return sections or default_plan(bool(self.compare_paths), self.question)

    # ------------------------------------------------------------ a section

    async def section(self, sec: Section, attempt: int, run_facts: str) -> None:
        """Write, verify and store one section (its row says how it ended)."""
        key = {"analysis_id": self.analysis_id, "section_id": sec.id, "attempt": attempt}
        await self._db(self.store.insert, "analysis_sections", [{
            **key, "position": sec.position, "title": sec.title, "brief": sec.brief,
            "status": "running", "tool_calls": 0, "started_at": datetime.now()}])
        counter = {"step": 0, "calls": 0}
        cancel = Cancel()  # stops this attempt's query or interview in flight
        self.cancels.add(cancel)
        try:
            text = await asyncio.wait_for(
                self._write(sec, attempt, run_facts, counter, cancel),
                self.settings.deadline_s)
            if refusal(text):  # not a section: failed, as an empty answer is (--retry)
                raise SectionFailed(f"the model refused to write the section: {text[:200]!r}")
            claims = await self._verify(sec.id, attempt, text, counter, cancel)
        except TimeoutError:
            cancel.cancel(f"the section's deadline ({self.settings.deadline_s:g} s) passed")
            await self._db(self.store.update, "analysis_sections", key, {
                "status": "timeout", "tool_calls": counter["calls"],
                "finished_at": datetime.now(),
                "error": f"not finished within {self.settings.deadline_s:g} s"
                         + (" (its tool call in flight was stopped)"
                            if counter.get("in_flight") else "")})
            return
        except SectionFailed as exc:
            await self._db(self.store.update, "analysis_sections", key, {
                "status": "failed", "tool_calls": counter["calls"],
                "finished_at": datetime.now(), "error": str(exc)})
            return
        except BaseException:  # interrupted (Ctrl-C) or failed: stop what it runs
            cancel.cancel("the analysis was interrupted")
            raise
        finally:
            self.cancels.discard(cancel)
        rows = [{**key, "claim": i, "paragraph": c.paragraph, "sentence": c.sentence,
                 "citations": citations_json(c), "verdict": c.verdict, "detail": c.detail,
                 "evidence": json.dumps(c.evidence)} for i, c in enumerate(claims)]
        await self._db(self.store.finish_section, key, {
            "status": "done", "text": text, "tool_calls": counter["calls"],
            "finished_at": datetime.now()}, rows)
        self.sections_done += 1
        crash_point("analysing", self.sections_done)

    async def _write(self, sec: Section, attempt: int, run_facts: str, counter: dict,
                     cancel: Cancel | None = None) -> str:
        """The tool loop of a section; its text."""
        budget = self.settings.tool_calls
        user = (f"{run_facts}\n\nSection id: {sec.id}\nSection title: {sec.title}\n"
                f"Brief: {sec.brief}\nYou may make {budget} tool calls, then call "
                f"{TERMINAL}.")
        messages: list[dict] = [{"role": "system", "content": SYSTEM},
                                {"role": "user", "content": user}]
        specs = self.toolbox.specs()
        final = [s for s in specs if s["function"]["name"] == TERMINAL]
        about = self._meta(sec.id)
        for _ in range(budget + 3):  # every turn makes a call or ends; a few to spare
            forced = counter["calls"] >= budget
            reply = await self._chat(ChatRequest(messages=messages,
                                                 tools=final if forced else specs,
                                                 meta=about))
            counter["step"] += 1
            await self._step(sec.id, attempt, counter["step"], "model",
                             content=json.dumps(reply.message), status=reply.status,
                             reply=reply)
            if reply.status != "ok":
                raise SectionFailed(f"the model call failed: {reply.status}: {reply.error}")
            message = reply.message or {}
            calls = _within_budget(message.get("tool_calls") or [], budget - counter["calls"])
            if not calls:
                if reply.text:
                    return reply.text
                raise SectionFailed("the model answered with neither text nor a tool call")
            messages.append({"role": "assistant", "content": message.get("content"),
                             "tool_calls": calls})
            for tc in calls:
                name, args = _parse_call(tc)
                if name == TERMINAL and isinstance(args, dict) and args.get("text"):
                    return str(args["text"])
                result = await self._tool(sec.id, attempt, name, args, counter, cancel)
                messages.append({"role": "tool", "tool_call_id": tc.get("id", ""),
                                 "content": result})
            if forced:
                messages.append({"role": "user", "content": "The tool budget is spent: "
                                 f"call {TERMINAL} with the section's text now."})
        raise SectionFailed(f"no {TERMINAL} after {budget} tool calls")

    async def _tool(self, section: str, attempt: int, name: str, args: Any,
                    counter: dict, cancel: Cancel | None = None) -> str:
        """Run one tool call and record it; the text the model is given (its result)."""
        counter["calls"] += 1
        call = counter["calls"]
        status = "ok"
        if counter["calls"] > self.settings.tool_calls:
            result, status = {"error": f"tool budget spent: call {TERMINAL}"}, "refused"
        elif not isinstance(args, dict):
            result, status = {"error": f"{name}: the arguments are not a JSON object: "
                                       f"{str(args)[:200]}"}, "error"
        elif name == TERMINAL:
            result, status = {"error": f"{TERMINAL} needs the section's text"}, "error"
        else:
            # SQL on its own threads; every other tool reads through the db thread
            pool = self.sql_pool if name == "sql" else self.db
            counter["in_flight"] = True  # (still set if the deadline cancels the call)
            try:
                result = await asyncio.get_running_loop().run_in_executor(
                    pool, self.toolbox.call, name, args, cancel)
            except ToolError as exc:
                result, status = {"error": str(exc)}, "error"
            counter["in_flight"] = False
        content = json.dumps({"step": call, **result}, ensure_ascii=False)
        counter["step"] += 1
        await self._step(section, attempt, counter["step"], "tool", call=call, name=name,
                         arguments=args if isinstance(args, dict) else {"raw": str(args)},
                         result=content, status=status)
        return content

    # ------------------------------------------------------------ verification

    async def _verify(self, section: str, attempt: int, text: str, counter: dict,
                      cancel: Cancel | None = None) -> list[Claim]:
        """Each sentence of `text` verified, each verdict recorded as a step."""
        claims = []
        paragraph = 0
        for sentence in sentences(text):
            if sentence == "\n":
                paragraph += 1
                continue
            claim = parse_claim(sentence)
            claim.paragraph = paragraph
            await self._db(verify, claim, self._resolver(section, attempt, cancel))
            claim.evidence = [_pick_rows(e, numbers(claim.text)) for e in claim.evidence]
            counter["step"] += 1
            await self._step(section, attempt, counter["step"], "verify",
                             content=json.dumps({"sentence": sentence,
                                                 "verdict": claim.verdict,
                                                 "detail": claim.detail}),
                             status=claim.verdict, name="verify")
            claims.append(claim)
        return claims

    def _resolver(self, section: str, attempt: int, cancel: Cancel | None = None):
        """How citations of one section attempt resolve (runs on the db thread; `cancel`
        stops a re-run query)."""
        run = self.toolbox.run
        steps = None

        def resolve(c: Citation) -> tuple[dict | None, str]:
            nonlocal steps
            if c.kind == "post":
                return _post(run, c.key[0])
            if c.kind == "agent":
                return _agent(run, *c.key)
            if steps is None:
                steps = _tool_steps(self.con, self.analysis_id, section, attempt)
            stored = steps.get(c.key[0])
            if stored is None:
                return None, f"this section made no tool call {c.key[0]}"
            name, args, result = stored
            if "error" in result:
                return None, f"tool call {c.key[0]} failed: {result['error']}"
            return self._recheck(name, args, result, c.key[0], cancel)

        return resolve

    def _recheck(self, name: str, args: dict, result: dict, call: int,
                 cancel: Cancel | None = None) -> tuple[dict | None, str]:
        """A stored result if the data still give it (interviews: if the table has it)."""
        if name == "interview":
            rows = pd.DataFrame(result.get("rows") or [], columns=result.get("columns"))
            batch = set(rows.get("batch_id", pd.Series(dtype=str)))
            kept = read_tables(self.con, ["interviews"])["interviews"]
            if not batch or not batch <= set(kept["batch_id"]):
                return None, f"the answers of call {call} are not in the interviews table"
            return result, ""
        try:
            again = {"step": call, **self.toolbox.call(name, args, cancel)}
        except ToolError as exc:
            return None, f"re-running call {call} failed: {exc}"
        if _canonical(again) != _canonical(result):
            return None, f"re-running call {call} gives a different result"
        return result, ""

    # ------------------------------------------------------------ the whole

    async def _run_sections(self, plan: list[Section], attempts: dict[str, int],
                            run_facts: str) -> None:
        gate = asyncio.Semaphore(max(1, self.settings.parallel))

        async def one(sec: Section) -> None:
            async with gate:
                await self.section(sec, attempts[sec.id], run_facts)

        await asyncio.gather(*(one(s) for s in plan))

    async def _with_model(self, body) -> Any:
        endpoints = Endpoints(self.seed)
        self.urls = endpoints.urls(self.provider)
        self.model = chat_model(self.provider, self.urls, seed=self.seed)
        try:
            return await body()
        finally:
            await self.model.close()
            endpoints.stop()

    def stop(self, reason: str) -> None:
        """Interrupt every query and interview under way (Ctrl-C, a full disk)."""
        for cancel in list(self.cancels):
            cancel.cancel(reason)

    def drain(self) -> None:
        """Wait for the database and SQL threads to finish what they run (queued work
        whose caller is gone is dropped)."""
        self.sql_pool.shutdown(wait=True, cancel_futures=True)
        self.db.shutdown(wait=True, cancel_futures=True)

    def mark_interrupted(self) -> int | None:
        """After Ctrl-C (threads drained): the sections under way and the analysis are
        marked `interrupted`; the number of finished sections kept (None: stopped before
        its plan was stored, so there is nothing to continue)."""
        key = {"analysis_id": self.analysis_id}
        self.store.update("analysis_sections", {**key, "status": "running"}, {
            "status": "interrupted", "finished_at": datetime.now(),
            "error": "interrupted (Ctrl-C); the same `shoal analyse` command continues it"})
        self.store.update("analysis_runs", key, {"status": "interrupted"})
        try:
            frames = analysis_frames(self.con, self.analysis_id)
        except InputError:  # interrupted before the analysis was stored
            return None
        if not json.loads(frames["analysis_runs"]["plan"].iloc[0] or "[]"):
            return None
        latest = _latest_sections(frames["analysis_sections"])
        return sum(v["status"] == "done" for v in latest.values())

    def close(self) -> None:
        """Stop the threads and release the run's file (on a full disk the file keeps
        what was committed: its WAL is replayed when next opened)."""
        self.drain()
        try:
            self.sql_con.close()
            self.con.close()
        except duckdb.Error as exc:
            if not out_of_space(exc):
                raise


@contextmanager
def _guarded(analyst: Analyst | None, run: str | Path, what: Callable[[], str]
             ) -> Iterator[None]:
    """Ctrl-C and a full disk, as the analysis reports them: Ctrl-C interrupts what runs,
    marks the analysis interrupted and raises AnalysisInterrupted; a full disk is a
    StorageFull (exit 2) saying what is kept. `what()`: the analysis, for messages."""
    try:
        yield
    except KeyboardInterrupt:
        if analyst is None:
            raise
        analyst.stop("the analysis was interrupted")
        analyst.drain()
        kept = analyst.mark_interrupted()
        raise AnalysisInterrupted(analyst.path, analyst.analysis_id, kept) from None
    except (duckdb.Error, OSError) as exc:
        if not out_of_space(exc):
            raise
        if analyst is not None:
            analyst.stop("the disk is full")
        where = analyst.path if analyst is not None else open_run_dir(run).root
        raise StorageFull(
            f"no space left on the device of {where}: {what()} stopped; what it stored "
            "before is kept, and the run's own tables are untouched; free some space, "
            "then run the same `shoal analyse` command to continue it") from None


def analyse(run: str | Path, question: str | None = None, compare: list[str] | None = None,
            base_url: str | None = None, model: str | None = None,
            api_key_env: str | None = None, settings: Settings | None = None,
            markdown: str | Path | None = None) -> Outcome:
    """Write a new analysis of `run` (see the module docstring)."""
    started = time.perf_counter()
    (settings or Settings()).check()
    if question is not None and not question.strip():
        raise InputError("--question: the question is empty")
    run_obj = Run(run)
    cfg = parse_config(run_obj.config)
    provider = provider_for(cfg, None, base_url, model, api_key_env, "analyst")
    analysis_id = f"an-{datetime.now():%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"
    with _guarded(None, run, lambda: "the analysis"):
        analyst = Analyst(run, provider, analysis_id, compare, question, settings, cfg.seed)
    try:
        with _guarded(analyst, run, lambda: f"analysis {analyst.analysis_id}"):
            return _analyse(analyst, question, provider, started, markdown)
    finally:
        analyst.close()


def _analyse(analyst: Analyst, question: str | None, provider: ProviderConfig,
             started: float, markdown: str | Path | None) -> Outcome:
    """The body of `analyse`: continue the interrupted analysis asking the same, or
    write a new one."""
    analysis_id = analyst.analysis_id
    run_facts = analyst.facts()
    # This process holds the file: an analysis still marked running was interrupted
    # (killed). The same question asked again continues it.
    stopped = analyst.store.interrupted(question, list(analyst.compare_paths.values()),
                                        provider.name, provider.model)
    if stopped is not None:
        resumed = _continue(analyst, stopped, run_facts, started, markdown)
        if resumed is not None:
            return resumed
    analyst.store.insert("analysis_runs", [{
        "analysis_id": analysis_id, "created_at": datetime.now(), "question": question,
        "compare": [analyst.compare_paths[k] for k in analyst.compare_paths],
        "provider": provider.name, "model": provider.model, "status": "running",
        "sections": 0, "claims": 0, "unverified": 0, "prompt_tokens": 0,
        "completion_tokens": 0, "cost_usd": 0.0}])

    async def body() -> list[Section]:
        plan = await analyst.plan(run_facts)
        await analyst._db(analyst.store.update, "analysis_runs",
                          {"analysis_id": analysis_id},
                          {"plan": json.dumps([s.__dict__ for s in plan]),
                           "sections": len(plan)})
        await analyst._run_sections(plan, {s.id: 1 for s in plan}, run_facts)
        return plan

    asyncio.run(analyst._with_model(body))
    return _finish(analyst, started, markdown, reused=[])


def _continue(analyst: Analyst, analysis_id: str, run_facts: str, started: float,
              markdown: str | Path | None) -> Outcome | None:
    """Finish an interrupted analysis: its finished sections are kept, the attempts that
    were under way are discarded (with their steps, claims and interview answers) and
    written again under the same numbers, so the analysis ends as an uninterrupted one
    would. None if it stopped before its plan was stored: it is deleted, to start anew."""
    frames = analysis_frames(analyst.con, analysis_id)
    plan = [Section(**s) for s in json.loads(frames["analysis_runs"]["plan"].iloc[0] or "[]")]
    if not plan:
        analyst.store.delete(analysis_id)
        return None
    analyst.analysis_id = analysis_id
    analyst.store.update("analysis_runs", {"analysis_id": analysis_id}, {"status": "running"})
    latest = _latest_sections(frames["analysis_sections"])
    todo = [s for s in plan
            if latest.get(s.id, {}).get("status") in (None, "running", "interrupted")]
    attempts = {s.id: int(latest[s.id]["attempt"]) if s.id in latest else 1 for s in todo}
    analyst.store.discard_attempts(analysis_id, [(s.id, attempts[s.id]) for s in todo
                                                 if s.id in latest])
    if todo:
        asyncio.run(analyst._with_model(lambda: analyst._run_sections(todo, attempts,
                                                                      run_facts)))
    return _finish(analyst, started, markdown, [s.id for s in plan if s not in todo])


def retry_sections(run: str | Path, analysis_id: str | None = None, which: str = "unfinished",
                   base_url: str | None = None, model: str | None = None,
                   api_key_env: str | None = None, settings: Settings | None = None,
                   markdown: str | Path | None = None) -> Outcome:
    """Write again the sections of an analysis that did not finish (`which`:
    "unfinished", or one section id, finished or not), keeping the others."""
    started = time.perf_counter()
    (settings or Settings()).check()
    run_dir = open_run_dir(run)
    frames = analysis_frames(run_dir.db, analysis_id)
    info = frames["analysis_runs"].iloc[0]
    analysis_id = str(info["analysis_id"])
    plan = [Section(**s) for s in json.loads(info["plan"] or "[]")]
    if not plan:
        raise InputError(f"analysis {analysis_id} has no plan (it stopped before planning); "
                         "start a new one")
    latest = _latest_sections(frames["analysis_sections"])
    if which == "unfinished":
        todo = [s for s in plan if latest.get(s.id, {}).get("status") != "done"]
    else:
        todo = [s for s in plan if s.id == which]
        if not todo:
            raise InputError(f"--retry-section {which}: analysis {analysis_id} has no such "
                             f"section; sections: {', '.join(s.id for s in plan)}")
    cfg = parse_config(Run(run).config)
    provider = provider_for(cfg, None, base_url, model, api_key_env, "analyst")
    compare = list(info["compare"]) if info["compare"] is not None else []
    question = info["question"] if isinstance(info["question"], str) else None
    with _guarded(None, run, lambda: f"analysis {analysis_id}"):
        analyst = Analyst(run, provider, analysis_id, compare, question, settings, cfg.seed)
    try:
        with _guarded(analyst, run, lambda: f"analysis {analysis_id}"):
            run_facts = analyst.facts()
            attempts = {s.id: int(latest.get(s.id, {}).get("attempt", 0)) + 1 for s in todo}
            # (running while it works: killed, it reads as interrupted and is continued)
            analyst.store.update("analysis_runs", {"analysis_id": analysis_id},
                                 {"status": "running"})
            if todo:
                asyncio.run(analyst._with_model(
                    lambda: analyst._run_sections(todo, attempts, run_facts)))
            reused = [s.id for s in plan if s not in todo]
            return _finish(analyst, started, markdown, reused)
    finally:
        analyst.close()


def delete_analysis(run: str | Path, analysis_id: str) -> int:
    """Delete an analysis and its trace; the number of step rows deleted."""
    run_dir = open_run_dir(run)
    if being_written(run_dir):
        raise InputError(f"{run_dir.run_id} is being written; delete when the run has stopped")
    known = analyses(run_dir.db)  # read-only: a wrong id writes nothing to the run
    if analysis_id not in set(known["analysis_id"]):
        listed = ", ".join(known["analysis_id"]) or "none"
        raise InputError(f"--delete {analysis_id}: no analysis {analysis_id!r} in "
                         f"{run_dir.run_id} (analyses: {listed})")
    deleted = AnalysisStore(run_dir.db).delete(analysis_id)
    (run_dir.root / f"{analysis_id}.md").unlink(missing_ok=True)  # its default Markdown
    return deleted


def _finish(analyst: Analyst, started: float, markdown: str | Path | None,
            reused: list[str]) -> Outcome:
    """Count the claims of the latest attempts, close the analysis row, write Markdown."""
    frames = analysis_frames(analyst.con, analyst.analysis_id)
    latest = _latest_sections(frames["analysis_sections"])
    claims = frames["analysis_claims"]
    if not claims.empty:
        keep = [(s, int(v["attempt"])) for s, v in latest.items()]
        claims = claims[[(s, int(a)) in keep for s, a in
                         zip(claims["section_id"], claims["attempt"], strict=True)]]
    factual = claims[claims["verdict"] != "interpretation"]
    unverified = int(factual["verdict"].isin(UNVERIFIED).sum())
    done = all(v["status"] == "done" for v in latest.values())
    steps = frames["analysis_steps"]  # every model call is a step: what it all cost
    usage = {"prompt": int(steps["prompt_tokens"].fillna(0).sum()),
             "completion": int(steps["completion_tokens"].fillna(0).sum()),
             "cost": float(steps["cost_usd"].fillna(0).sum())}
    analyst.store.update("analysis_runs", {"analysis_id": analyst.analysis_id}, {
        "status": "done" if done else "partial", "finished_at": datetime.now(),
        "claims": len(factual), "unverified": unverified, "prompt_tokens": usage["prompt"],
        "completion_tokens": usage["completion"], "cost_usd": usage["cost"]})
    path = Path(markdown) if markdown else analyst.path / f"{analyst.analysis_id}.md"
    try:
        write_markdown(analyst.con, analyst.analysis_id, path)
    except OSError as exc:
        if not out_of_space(exc):
            raise
        raise StorageFull(f"no space left on the device of {path.parent}: analysis "
                          f"{analyst.analysis_id} is stored in the run (`shoal report` "
                          f"shows it) but its Markdown {path} could not be written") from None
    sections = pd.DataFrame([{"section_id": s, **v} for s, v in latest.items()])
    return Outcome(analyst.analysis_id, "done" if done else "partial", sections,
                   len(factual), unverified, usage["cost"], path,
                   time.perf_counter() - started, reused)


def _latest_sections(sections: pd.DataFrame) -> dict[str, dict]:
    """Each section's latest attempt, as a dict of its row."""
    if sections.empty:
        return {}
    last = sections.sort_values("attempt").groupby("section_id").tail(1)
    return {str(r["section_id"]): r for r in last.to_dict("records")}


def _parse_call(tc: dict) -> tuple[str, Any]:
    fn = tc.get("function") or {}
    raw = fn.get("arguments")
    try:
        args = json.loads(raw) if isinstance(raw, str) else (raw or {})
    except ValueError:
        args = raw  # (not a JSON object: the call is answered with that error)
    return str(fn.get("name") or ""), args


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def _tool_steps(con: duckdb.DuckDBPyConnection, analysis_id: str, section: str,
                attempt: int) -> dict[int, tuple[str, dict, dict]]:
    """The tool calls of a section attempt: call number → (name, arguments, result)."""
    steps = read_tables(con, ["analysis_steps", "analysis_results"])
    s, res = steps["analysis_steps"], steps["analysis_results"]
    s = s[(s["analysis_id"] == analysis_id) & (s["section_id"] == section)
          & (s["attempt"] == attempt) & (s["kind"] == "tool")]
    contents = dict(zip(res["result_hash"], res["content"], strict=True))
    out = {}
    for r in s.itertuples():
        args = json.loads(r.arguments) if isinstance(r.arguments, str) else {}
        out[int(r.call)] = (r.name, args, json.loads(contents[r.result_hash]))
    return out


def _post(run: Run, post_id: int) -> tuple[dict | None, str]:
    posts = run.posts
    row = posts[posts["post_id"] == post_id]
    if row.empty:
        return None, f"the run has no post {post_id}"
    row = row.assign(score=row["up"] - row["down"],
                     engagement=row[["up", "down", "shares", "replies"]].sum(axis=1))
    cols = ["post_id", "round", "platform", "author", "kind", "text", "engagement", "score",
            "up", "down", "shares", "replies"]
    return table(row[cols]), ""


def _agent(run: Run, agent: int, round_: int) -> tuple[dict | None, str]:
    beliefs = run.beliefs
    rows = beliefs[(beliefs["agent"] == agent) & (beliefs["round"] == round_)]
    if rows.empty:
        return None, f"the run has no agent {agent} at round {round_}"
    return table(rows[["round", "agent", "topic", "position", "confidence"]]), ""


def _pick_rows(evidence: dict, stated: list) -> dict:
    """A citation's evidence cut to EVIDENCE_ROWS rows, those holding a stated number
    first (what a reader needs to see next to the sentence)."""
    rows = evidence.get("rows")
    if not isinstance(rows, list) or len(rows) <= EVIDENCE_ROWS:
        return evidence
    hit = [r for r in rows if any(supports(v, d, p, list(numeric_values(r)))
                                  for v, d, p, _ in stated)]
    rest = [r for r in rows if r not in hit]
    return {**evidence, "rows": (hit + rest)[:EVIDENCE_ROWS], "rows_total": len(rows)}


# A model's refusal: an optional apology, then declining in the first person ("I'm sorry,
# but I can't help with that.", "I cannot assist with this request."), or "As an AI ...".
_APOLOGY = (r"(?:i'?m\s+(?:really\s+|so\s+)?sorry|i\s+am\s+(?:really\s+|so\s+)?sorry|sorry"
            r"|i\s+apologi[sz]e|unfortunately)")
_DECLINE = (r"(?:i|we)\s*(?:can'?t|cannot|can\s+not|won'?t|will\s+not|'?m\s+unable\s+to"
            r"|am\s+unable\s+to|'?m\s+not\s+able\s+to|am\s+not\s+able\s+to)\s+"
            r"(?:help(?!\s+(?:but|\w+ing)\b)|assist|comply|provide|do|write|fulfil|fulfill"
            r"|complete|answer)")  # (not "I can't help noticing ...")
_REFUSAL = re.compile(rf"\W*(?:(?:{_APOLOGY})\W+(?:but\s+)?)?{_DECLINE}\b|\W*as\s+an\s+ai\b",
                      re.IGNORECASE)
REFUSAL_CHARS = 300  # a refusal is a sentence or two; a section's text says more


def refusal(text: str) -> bool:
    """Whether a section's text is only the model's refusal ("I'm sorry, but I can't help
    with that."): short, citing nothing, and opening by declining. A section that
    reports something cites the steps it read, so is never taken for one."""
    text = text.replace("\u2019", "'").strip()
    return (len(text) <= REFUSAL_CHARS and "[" not in text
            and _REFUSAL.match(text) is not None)


def _within_budget(calls: list[dict], left: int) -> list[dict]:
    """The tool calls of one message that are answered: every `write_section`, and of the
    others as many as the budget has left plus one (answered with the refusal that tells
    the model the budget is spent). The rest stay in the recorded message only, so a model
    that asks for thousands of calls at once cannot multiply the trace."""
    kept, others = [], 0
    for tc in calls:
        fn = tc.get("function") if isinstance(tc, dict) else None
        terminal = isinstance(fn, dict) and fn.get("name") == TERMINAL
        if terminal or others < max(left, 0) + 1:
            kept.append(tc)
            others += not terminal
    return kept
