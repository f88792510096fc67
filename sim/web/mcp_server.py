"""The MCP server of `shoal serve` (mounted at /mcp) and `shoal mcp` (standard input and
output): tools an assistant calls to list, read, query, fork and ask the runs of a folder.

Every tool is a thin call into `Folder` (shoal.web.service), the layer the REST API calls
too, so the two always agree. A refusal from it (a run that does not exist, a query that
is not one SELECT, a read-only server) comes back as a tool error carrying its message,
never as a crash of the server. Every answer is bounded: lists are cut to a stated number
of items (`total` says how many there were), long texts to a stated number of characters.
"""

import contextlib
import functools
import json
import math
import re
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from html.parser import HTMLParser
from pathlib import PurePath
from typing import Annotated, Any
from uuid import UUID

import anyio
import duckdb
import numpy as np
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.stdio import stdio_server
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.message import SessionMessage
from mcp_types import (
    INVALID_REQUEST,
    PARSE_ERROR,
    ErrorData,
    JSONRPCError,
    JSONRPCNotification,
    ToolAnnotations,
)
from pydantic import BaseModel, Field
from starlette.types import ASGIApp

from shoal.core.errors import InputError
from shoal.store.run_dir import engine_version
from shoal.web.service import Conflict, Folder, NotFound, WebError

MAX_RUNS = 500  # runs one list_runs answer may hold
MAX_JOBS = 50  # jobs one list_jobs answer may hold
LOG_LINES = 15  # last lines of a job's output shown
MAX_POSTS = 50  # posts one top_posts answer may hold
MAX_INTERVENTIONS = 50  # fired interventions describe_run shows
REPORT_CHARS = 20_000  # default cut of render_report's text
MAX_REPORT_CHARS = 200_000
ANALYSIS_STR = 4_000  # a longer text in an analysis (evidence, detail) is cut
ANALYSIS_LIST = 50  # a longer list in an analysis (evidence rows) is cut
ELLIPSIS = "…"

INSTRUCTIONS = """\
Shoal runs social simulations: agents with beliefs post, read feeds, follow and react on
simulated platforms, round by round. This server shows the runs of one folder.

Runs are named by their run id (list_runs). Start with describe_run for a run's size,
topics, status and last belief means; read it with top_posts, query_run (read-only SQL
over its tables) and inspect_agent (the exact text an agent was given in a round).
To try a what-if, fork_run it at a round with changed settings: the fork's rounds run in
the background, so poll list_jobs or describe_run until its status is 'finished', then
compare it with query_run on both runs. Configs are paths inside the folder
(list_configs); check_config validates one, run_config starts it. Interviews and
analyses need an LLM (the run's own, or the server's --base-url). On a server started
with --read-only, the tools that start, stop, fork or ask are refused."""

# The tables query_run reads (a fork's early rounds are its parent's).
TABLES = """\
rounds(round, sim_time, n_active, n_actions, n_rejected, n_posts, n_exposures, ...);
beliefs(round, agent, topic, position in [-1, 1], confidence);
agents(agent_id, name, username, bio, persona, group_name, activity, age, country, ...);
posts(post_id, platform, round, author, kind, parent_id, root_id, text, ...);
post_stances(post_id, topic, stance, ...); exposures(round, platform, agent, post_id, rank);
actions(round, platform, agent, slot, action, target_post, target_agent, new_post_id,
status, source); follows(round, platform, follower, followee, op);
trust(round, truster, trustee, cause, delta, value); interventions(round, idx, kind, spec);
memory, llm_calls, topics, markets, prices, trades, positions, graph_entities,
graph_relations, survey_responses. Round 0 is the initial state. A run whose files keep
feeds as lists also has exposures_listed(round, platform, agent, post_id: the feed's
post ids by rank): list_contains(post_id, x) finds a post's readers fastest."""

RunId = Annotated[str, Field(description="the run's id, as list_runs shows it")]
Sets = Annotated[list[str] | None, Field(description="settings to change, each "
                                                     "'field.path=value' as `--set` takes it, "
                                                     "e.g. 'rounds=20', "
                                                     "'policy.engage_rate=0.2'")]

READ = ToolAnnotations(read_only_hint=True, open_world_hint=False)
WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)


class Move(BaseModel):
    """An intervention a fork moves to another round."""

    ref: str = Field(description="the intervention's name, or its index in the config's "
                                 "`interventions` list")
    round: int = Field(description="the round it fires in instead")


def build_server(folder: Folder) -> MCPServer:
    """The MCP server over `folder`: its tools call `folder` and nothing else."""
    server: MCPServer = MCPServer(
        "shoal", title="Shoal", version=engine_version(), instructions=INSTRUCTIONS,
        description=f"The simulation runs of the folder {folder.root.name}"
                    + (" (read-only)" if folder.read_only else ""),
        log_level="WARNING")

    def tool(annotations: ToolAnnotations, description: str | None = None
             ) -> Callable[[Callable[..., dict[str, Any]]], Callable[..., dict[str, Any]]]:
        """Register a tool whose refusals come back as tool errors and whose answer is
        plain JSON data (the wrapper keeps the function's name, docstring and typed
        parameters, which the SDK reads through `functools.wraps`)."""
        def register(fn: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
            @functools.wraps(fn)
            def call(*args: Any, **kwargs: Any) -> dict[str, Any]:
                with _errors(folder):
                    return _bound(fn(*args, **kwargs), root=str(folder.root))

            server.add_tool(call, annotations=annotations, description=description)
            return fn

        return register

    @tool(annotations=READ)
    def list_runs(query: Annotated[str | None, Field(
                      description="text the run id or name must contain")] = None,
                  status: Annotated[str | None, Field(
                      description="only runs with this status (e.g. running, "
                                  "finished, stopped, interrupted)")] = None,
                  limit: Annotated[int, Field(ge=1, le=MAX_RUNS)] = 100
                  ) -> dict[str, Any]:
        """The runs of the folder as a lineage tree (each root run, oldest first, then its
        forks below it, with `depth`): id, name, status, rounds done of rounds, agents,
        parent and fork round, LLM calls and cost. Filter by text and status."""
        runs = folder.runs(query, status)["runs"]
        return {"total": len(runs), "runs": runs[:limit],
                **_cut_note(len(runs), limit, "runs")}

    @tool(annotations=READ)
    def describe_run(run: RunId) -> dict[str, Any]:
        """One run: status, rounds done of rounds, agents, topics, platforms, its lineage
        (the runs its history goes through), the interventions that fired, the job
        writing it if this server started one, and each topic's mean belief position
        (-1 against … +1 for) and its polarization at the last round, with the mean at
        the first round for comparison.
        While a run is being written without a live mirror, only its status and rounds
        done are known (`note` says so): call again once it has finished."""
        try:
            info = folder.run(run)
        except Conflict as exc:  # being written: what the folder's listing knows
            row = next((r for r in folder.runs(run)["runs"] if r["run_id"] == run),
                       {"run_id": run})
            job = folder.jobs.for_run(run)
            return {**row, "job": _job(job.as_dict()) if job else None,
                    "note": str(exc)}
        info.pop("config_yaml", None)
        fired = info["interventions"]
        info["interventions"] = fired[:MAX_INTERVENTIONS]
        if len(fired) > MAX_INTERVENTIONS:
            info["interventions_total"] = len(fired)
        if info.get("job"):
            info["job"] = _job(info["job"])
        series = folder.series(run)
        rounds = series["rounds"]
        last: dict[str, Any] = {}
        for topic, q in series["beliefs"].items():
            known = [(r, m) for r, m in zip(rounds, q["mean"], strict=True)
                     if m is not None]
            if known:
                last[topic] = {"round": known[-1][0], "mean": known[-1][1],
                               "mean_first": known[0][1],
                               "polarization": series["polarization"][topic][
                                   rounds.index(known[-1][0])]}
        info["beliefs_last_round"] = last
        info["activity_last_round"] = ({k: v[-1] for k, v in series["activity"].items()}
                                       if rounds else {})
        return info

    @tool(annotations=READ)
    def list_configs() -> dict[str, Any]:
        """The YAML configs in the folder (paths relative to it), for run_config and
        check_config."""
        configs = folder.configs()["configs"]
        return {"total": len(configs), "configs": configs[:MAX_RUNS],
                **_cut_note(len(configs), MAX_RUNS, "configs")}

    @tool(annotations=READ)
    def check_config(path: Annotated[str | None, Field(
                         description="a config inside the folder, relative to it")] = None,
                     yaml: Annotated[str | None, Field(
                         description="the config's YAML text (instead of a path)")] = None,
                     sets: Sets = None) -> dict[str, Any]:
        """Validate a config as `shoal check` does, without running it. Give `path` or
        `yaml`. Returns ok with notes and the resolved config (every default filled in),
        or ok false with the error naming the field path and line."""
        return folder.check(yaml, path, sets)

    @tool(annotations=WRITE)
    def run_config(path: Annotated[str | None, Field(
                       description="a config inside the folder, relative to it")] = None,
                   yaml: Annotated[str | None, Field(
                       description="the config's YAML text (kept as "
                                   "configs/pasted-N.yaml in the folder)")] = None,
                   sets: Sets = None) -> dict[str, Any]:
        """Start a run of a config (`shoal run`) in the background. Give `path` or `yaml`;
        it is checked first (an invalid one is refused with the error). Returns the new
        run's id and its job: poll list_jobs or describe_run until it has finished."""
        out = folder.start(yaml, path, sets)
        return {**out, "job": _job(out["job"])}

    @tool(annotations=WRITE)
    def fork_run(run: RunId, round: Annotated[int, Field(
                     description="fork from the end of this round (rounds after it are "
                                 "simulated again, under the changes)")],
                 sets: Sets = None,
                 seed: Annotated[int | None, Field(
                     description="a new seed for the rounds after the fork")] = None,
                 drop: Annotated[list[str] | None, Field(
                     description="pending interventions to drop (name or index)")] = None,
                 move: Annotated[list[Move] | None, Field(
                     description="pending interventions to move to another round")] = None,
                 add: Annotated[list[dict[str, Any]] | None, Field(
                     description="interventions to add, each a mapping as in the config's "
                                 "`interventions` list")] = None,
                 name: Annotated[str | None, Field(description="the fork's name")] = None,
                 run_rounds: Annotated[bool, Field(
                     description="simulate the fork's rounds now (false: only create "
                                 "it, to resume later)")] = True,
                 ) -> dict[str, Any]:
        """Fork a run at a round with a plan, exactly as `shoal fork` does: the fork keeps
        the run's history up to `round` and simulates the rest under the changes. Only
        settings that act after the fork can change (not the population, which only
        shaped round 0; the refusal lists what can). Returns the fork's id and its job;
        its rounds run in the background: poll list_jobs or describe_run until its
        status is 'finished'."""
        out = folder.fork(run, round, sets, seed, drop,
                          [m.model_dump() for m in move or []], add, name, run_rounds)
        return {**out, "job": _job(out["job"])}

    @tool(annotations=WRITE)
    def stop_run(run: RunId) -> dict[str, Any]:
        """Ask the process writing a run to stop after its running round (committed and
        checkpointed, so resume_run can continue it)."""
        return folder.stop(run)

    @tool(annotations=WRITE)
    def resume_run(run: RunId) -> dict[str, Any]:
        """Continue a stopped or interrupted run from its last checkpoint, in the
        background (`shoal resume`)."""
        out = folder.resume(run)
        return {**out, "job": _job(out["job"])}

    @tool(annotations=READ, description=(
        "One read-only SQL query (DuckDB dialect: a single SELECT, WITH, PIVOT or "
        "UNPIVOT) over a run's tables; a fork's tables include its parent's rounds up to "
        "the fork. Anything else is refused with the reason. Returns columns and at most "
        "`limit` rows (`truncated` says there were more); long values are cut. "
        "Aggregate in SQL rather than fetching rows. Tables:\n" + TABLES))
    def query_run(run: RunId,
                  sql: Annotated[str, Field(description="one SELECT query")],
                  limit: Annotated[int, Field(ge=1, le=1000,
                                              description="rows to return")] = 100
                  ) -> dict[str, Any]:
        return folder.sql(run, sql, limit)

    @tool(annotations=READ)
    def inspect_agent(run: RunId, agent: Annotated[int, Field(description="the agent's id")],
                      round: Annotated[int, Field(ge=1, description="the round (1 is the "
                                                                "first simulated round)")],
                      platform: Annotated[str | None, Field(
                          description="one platform (default: every platform the agent "
                                      "is on)")] = None) -> dict[str, Any]:
        """The exact text an agent was given in a round (what `shoal inspect` prints):
        per platform, its system prompt and its observation (feed, memory, beliefs) as
        one text, whether it acted, and the tokens used of its budget."""
        out = folder.context(run, agent, round, platform)
        out["contexts"] = [{k: v for k, v in c.items()
                            if k not in ("system", "observation")}
                           for c in out["contexts"]]
        return out

    @tool(annotations=WRITE)
    def interview_agent(run: RunId, agent: Annotated[int, Field(description="the agent's id")],
                        question: Annotated[str, Field(description="what to ask it")],
                        round: Annotated[int | None, Field(
                            description="ask the agent as it was at the end of this round "
                                        "(default: the last)")] = None) -> dict[str, Any]:
        """Ask an agent a question and get its answer in character, as it was at the end
        of a round (its persona, beliefs and memory then). Needs an LLM: the run's own,
        or the server's --base-url. The answer is kept in the run's `interviews` table."""
        return folder.interview(run, agent, question, round)

    @tool(annotations=READ)
    def top_posts(run: RunId,
                  round: Annotated[int | None, Field(
                      description="the round (default: the last)")] = None,
                  limit: Annotated[int, Field(ge=1, le=MAX_POSTS)] = 10,
                  platform: Annotated[str | None, Field(
                      description="one platform (default: all)")] = None) -> dict[str, Any]:
        """The posts of a round, most seen first: author, text, kind, reach (agents it was
        shown to), likes, dislikes, reposts, replies and the stance per topic the post
        takes; `total` is the round's number of posts."""
        return folder.posts(run, round, limit, 0, platform)

    @tool(annotations=WRITE)
    def run_analysis(run: RunId, question: Annotated[str | None, Field(
                         description="a question the analysis must answer (default: a "
                                     "general account of the run)")] = None
                     ) -> dict[str, Any]:
        """Start `shoal analyse` on a run in the background: an LLM analyst writes a report
        whose every claim is checked against the run's data. Needs an LLM. Poll list_jobs,
        then read_analysis."""
        out = folder.start_analysis(run, question)
        return {**out, "job": _job(out["job"])}

    @tool(annotations=READ)
    def read_analysis(run: RunId, analysis_id: Annotated[str | None, Field(
                          description="the analysis (default: the latest)")] = None
                      ) -> dict[str, Any]:
        """An analysis of a run: its sections, each with its text and its claims, every
        claim with its verdict (verified or not) and the evidence checked. Without
        `analysis_id`, the latest; `analyses` lists the run's others."""
        listed = folder.analyses(run)
        rows = listed["analyses"]
        if analysis_id is None:
            if not rows:
                job = listed.get("job")
                raise NotFound(f"{run} has no analysis yet"
                               + (" (one is being written: see list_jobs)" if job
                                  else ": start one with run_analysis"))
            analysis_id = rows[0]["analysis_id"]
        out = _bound(folder.analysis(run, analysis_id), ANALYSIS_LIST, ANALYSIS_STR)
        out["analyses"] = rows[:20]
        return out

    @tool(annotations=READ)
    def render_report(run: RunId, max_chars: Annotated[int, Field(
                          ge=1000, le=MAX_REPORT_CHARS,
                          description="cut the text after this many characters")] = REPORT_CHARS
                      ) -> dict[str, Any]:
        """A run's report as readable text: summary, lineage, config highlights, timings,
        top posts, interventions, memory, LLM cost and the resolved config (the plots are
        left out). The HTML page itself is large: `shoal report RUN` writes it as
        report.html in the run's folder, and `shoal serve` shows it at
        /api/runs/RUN/report. Nothing is written here."""
        html = folder.report(run)
        text = folder.shown(_report_text(html))
        cut = len(text) > max_chars
        return {"run_id": run, "chars": len(text), "truncated": cut,
                "text": text[:max_chars] + (ELLIPSIS if cut else ""),
                "html_chars": len(html),
                "full_report": f"`shoal report {run}` writes {run}/report.html; "
                               f"`shoal serve` shows it at /api/runs/{run}/report"}

    @tool(annotations=READ)
    def list_jobs() -> dict[str, Any]:
        """The commands this server started (runs, forks, resumes, analyses), newest
        first: kind, run id, whether it is still running, its exit code and the last
        lines of its output."""
        jobs = folder.jobs.all()
        return {"total": len(jobs), "jobs": [_job(j.as_dict()) for j in jobs[:MAX_JOBS]],
                **_cut_note(len(jobs), MAX_JOBS, "jobs")}

    return server


def http_app(server: MCPServer) -> ASGIApp:
    """The Streamable HTTP endpoint of `server`, for `shoal serve` to route at /mcp (the
    session manager it creates is `server.session_manager`, which the app's lifespan
    runs). The app's middleware checks the token, the host name and the origin, so the
    SDK's own host check, which knows only loopback names, is off."""
    server.streamable_http_app(
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        max_sessions=MAX_SESSIONS, session_idle_timeout=SESSION_IDLE_S)
    return StreamableHTTPASGIApp(server.session_manager)


# An assistant keeps one session; the SDK's defaults (10,000 sessions, each kept 30
# minutes idle) let a loop of `initialize` requests hold ~400 MB and lock every new
# assistant out for half an hour.
MAX_SESSIONS = 64
SESSION_IDLE_S = 300.0


async def run_stdio(server: MCPServer) -> None:
    """Serve `server` over standard input and output until input closes, answering a line
    that is no JSON-RPC message as JSON-RPC 2.0 says (the SDK's transport drops it
    without a word, and the client waits for an answer that never comes): -32700 with
    id null for a line that is not JSON, -32600 for JSON that is no valid message (with
    the message's id when it has a valid one); then it goes on serving."""
    lines: deque[str] = deque()  # the lines read, each until its message is handled

    async def read() -> AsyncIterator[str]:
        # (the SDK's own reader makes exactly one message or exception of each line)
        with open(0, encoding="utf-8", errors="replace", closefd=False) as stdin:
            async for line in anyio.wrap_file(stdin):
                if line.strip():  # (blank lines between messages are no message)
                    lines.append(line)
                    yield line

    checked_send, checked = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    lowlevel = server._lowlevel_server
    async with stdio_server(stdin=read()) as (read_stream, write_stream):  # type: ignore[arg-type]

        async def check() -> None:
            async with checked_send:
                async for item in read_stream:
                    line = lines.popleft()
                    if isinstance(item, Exception) or _stray_id(item, line):
                        await write_stream.send(SessionMessage(_invalid_message(line)))
                    else:
                        await checked_send.send(item)

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(check)
            await lowlevel.run(checked, write_stream, lowlevel.create_initialization_options())


def _stray_id(item: SessionMessage, line: str) -> bool:
    """Whether `item`, read as a notification, has an `id` (of a type no request id may
    have: true, null, 1.5, an object), which makes it an invalid request, not a
    notification."""
    if not isinstance(item.message, JSONRPCNotification) or '"id"' not in line:
        return False
    try:
        return "id" in json.loads(line)
    except ValueError:
        return True


def _invalid_message(line: str) -> JSONRPCError:
    """The JSON-RPC 2.0 error answering `line`, which is no valid message."""
    def no_constant(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    try:
        data = json.loads(line, parse_constant=no_constant)
    except ValueError as exc:
        return JSONRPCError(jsonrpc="2.0", id=None, error=ErrorData(
            code=PARSE_ERROR, message=f"Parse error: the line is not JSON ({exc})"))
    given = data.get("id") if isinstance(data, dict) else None
    request_id = given if isinstance(given, str) or type(given) is int else None
    return JSONRPCError(jsonrpc="2.0", id=request_id, error=ErrorData(
        code=INVALID_REQUEST, message="Invalid Request: not a JSON-RPC 2.0 request, "
                                      "notification or response object"))


# ---------------------------------------------------------------- helpers


@contextlib.contextmanager
def _errors(folder: Folder) -> Iterator[None]:
    """A refusal of the folder's (or a query DuckDB rejects) as a tool error with its
    message; anything else is a crash the SDK reports as such."""
    try:
        yield
    except (WebError, InputError) as exc:
        raise ToolError(folder.shown(str(exc))) from None
    except duckdb.Error as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ToolError(folder.shown(f"the run could not be read: {first}")) from None


def _cut_note(total: int, shown: int, what: str) -> dict[str, str]:
    return {"note": f"only the first {shown} of {total} {what} are shown"} if total > shown \
        else {}


def _job(job: dict[str, Any]) -> dict[str, Any]:
    """A job as the tools show it: its last lines of output, not its whole tail."""
    lines = (job.get("log_tail") or "").splitlines()
    return {**{k: v for k, v in job.items() if k != "log_tail"},
            "log_tail": "\n".join(lines[-LOG_LINES:])}


def _bound(value: Any, max_list: int | None = None, max_str: int | None = None,
           root: str | None = None) -> Any:
    """`value` as JSON-able data; with limits, every list cut to `max_list` items (then a
    note of how many there were) and every string to `max_str` characters; with `root`,
    that folder's path shown relative to it in every string (answers name no paths
    outside the folder)."""
    if isinstance(value, dict):
        return {str(k): _bound(v, max_list, max_str, root) for k, v in value.items()}
    if isinstance(value, list | tuple):
        items = list(value)
        shown = items if max_list is None else items[:max_list]
        out = [_bound(v, max_list, max_str, root) for v in shown]
        if len(shown) < len(items):
            out.append(f"{ELLIPSIS} {len(items) - len(shown)} more of {len(items)}")
        return out
    if isinstance(value, str):
        if root and root in value:
            value = value.replace(f"{root}/", "").replace(root, ".")
        return value if max_str is None or len(value) <= max_str else \
            value[:max_str] + ELLIPSIS
    return _plain(value)


def _plain(value: Any) -> Any:
    """A scalar as JSON data (NaN as null, numpy values as Python ones)."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, datetime | date | time | timedelta | UUID | PurePath):
        return str(value)
    return value


_BLOCK = {"p", "div", "section", "h1", "h2", "h3", "h4", "h5", "tr", "li", "br", "table",
          "ul", "ol", "pre", "figure", "figcaption", "details", "summary", "nav", "header"}
_SKIP = {"script", "style", "svg", "noscript", "template", "head"}


class _Text(HTMLParser):
    """The readable text of an HTML page: headings marked with #, table cells split by
    |, preformatted blocks kept as they are, scripts, styles and images left out."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.skip = 0
        self.pre = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _SKIP:
            self.skip += 1
        elif tag == "title":
            self.skip += 1  # (the h1 says it again)
        if self.skip:
            return
        if tag in _BLOCK:
            self.parts.append("\n")
        if tag in ("h1", "h2", "h3", "h4", "h5"):
            self.parts.append("#" * int(tag[1]) + " ")
        elif tag in ("td", "th"):
            self.parts.append("| " if self._at_line_start() else " | ")
        elif tag == "li":
            self.parts.append("- ")
        if tag == "pre":
            self.pre += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIP or tag == "title":
            self.skip = max(0, self.skip - 1)
        elif not self.skip and tag == "pre":
            self.pre = max(0, self.pre - 1)
            self.parts.append("\n")
        elif not self.skip and tag in _BLOCK and tag not in ("tr", "li", "br"):
            self.parts.append("\n")

    def _at_line_start(self) -> bool:
        return not self.parts or self.parts[-1].endswith("\n")

    def handle_data(self, data: str) -> None:
        if self.skip:
            return
        if not self.pre:
            data = re.sub(r"\s+", " ", data)
            if self._at_line_start():
                data = data.lstrip()
        if data:
            self.parts.append(data)


def _report_text(html: str) -> str:
    """The report's HTML as text (see `_Text`)."""
    parser = _Text()
    parser.feed(html)
    parser.close()
    text = "".join(parser.parts)
    text = re.sub(r"[ \t]+\n", "\n", text)
    return re.sub(r"\n{3,}", "\n\n", text).strip() + "\n"
