"""The HTTP face of `shoal serve`: the REST API (documented at /api/openapi.json), the
live event stream, the browser app's files and, mounted at /mcp, the MCP server.

Safety (docs/web.md): every /api and /mcp request must carry the token when one is set
(`Authorization: Bearer TOKEN`; the event stream, which a browser opens without headers,
may pass `?token=`); without a token the server only answers requests addressed to a
loopback host name (a page elsewhere cannot reach it by rebinding its DNS name); a POST
must be JSON and, when the browser says where it comes from, come from this server's own
origin, so no other site can forge one; `--read-only` refuses every mutation.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import os
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, StreamingResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from shoal.core.errors import InputError
from shoal.store.lineage import run_status
from shoal.store.run_dir import engine_version
from shoal.web.service import Folder, NotFound, WebError

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1", "[::1]")
EVENT_POLL_S = 0.25  # how often the event stream looks for a new round
MAX_BODY = 4 * 2**20  # the largest request body (a pasted config, a fork plan, a query)


class MoveBody(BaseModel):
    """A pending intervention to fire at another round."""

    ref: str | int = Field(description="the intervention's name or index")
    round: int = Field(description="the round it fires at instead")


class ForkBody(BaseModel):
    """A fork plan: `shoal fork`'s flags as fields."""

    round: int = Field(description="fork from the end of this round")
    sets: list[str] = Field(default_factory=list, description="`--set` fields, e.g. "
                            "policy.engage_rate=0.2")
    seed: int | None = None
    drop: list[str] = Field(default_factory=list, description="interventions to drop "
                            "(name or index)")
    move: list[MoveBody] = Field(default_factory=list,
                                 description="[{ref, round}]: interventions to move")
    add: list[dict[str, Any]] = Field(default_factory=list,
                                      description="interventions to add, as in the YAML")
    name: str | None = None
    run: bool = Field(True, description="run the fork's rounds (else only create it)")


class ConfigBody(BaseModel):
    """A config: its text, or a path inside the folder; `sets` as `--set`."""

    yaml: str | None = None
    path: str | None = None
    sets: list[str] = Field(default_factory=list)


class SqlBody(BaseModel):
    """One read-only SELECT over the run's tables."""

    sql: str
    limit: int = 100


class InterviewBody(BaseModel):
    """A question to an agent, as it was at the end of `round` (default: the last)."""

    question: str
    round: int | None = None


class AnalysisBody(BaseModel):
    """A question the analysis must answer (optional)."""

    question: str | None = None


def static_dir() -> Path:
    """The browser app's files, shipped in the package."""
    return Path(str(resources.files("shoal.web") / "static"))


def create_app(folder: Folder, token: str | None = None, mcp: bool = True) -> FastAPI:
    """The app serving `folder` (with `token` required on every API and MCP request)."""
    mounted: list[Any] = []
    if mcp:
        from shoal.web.mcp_server import build_server, http_app

        mounted.append(build_server(folder))

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if mounted:
            async with mounted[0].session_manager.run():
                yield
        else:
            yield
        folder.jobs.close()

    app = FastAPI(title="Shoal", version=engine_version(), lifespan=lifespan,
                  openapi_url="/api/openapi.json", docs_url=None, redoc_url=None,
                  description="The runs of one folder: read them, watch them live, fork "
                              "them, ask them (docs/web.md).")
    if mounted:
        # the endpoint is /mcp itself (mounting the SDK's app would put it at /mcp/mcp);
        # the guard below checks host names, the token and the origin
        app.add_route("/mcp", http_app(mounted[0]), include_in_schema=False)

    app.add_middleware(ChunkedBodyLimit)  # (inside the guard: after its checks)

    @app.middleware("http")
    async def guard(request: Request, call_next: Callable[..., Any]) -> Any:
        path = request.url.path
        guarded = path.startswith(("/api", "/mcp"))
        if guarded and token is None and not _loopback_host(request.headers.get("host")):
            return _error(403, "this server answers only requests addressed to "
                               "127.0.0.1 or localhost (start it with a token to serve "
                               "other addresses)")
        if guarded and token is not None and not _token_ok(request, token):
            return _error(401, "missing or wrong token: send 'Authorization: Bearer "
                               "TOKEN' (the event stream also takes ?token=TOKEN)")
        size = request.headers.get("content-length")
        if size is not None and (not size.isdigit() or int(size) > MAX_BODY):
            return _error(413, f"the request body is larger than {MAX_BODY // 2**20} MiB")
        if request.method == "POST" and path.startswith(("/api", "/mcp")):
            origin = request.headers.get("origin")
            if origin and urlsplit(origin).netloc != request.headers.get("host"):
                return _error(403, f"a request from {origin} may not change anything here")
            if not request.headers.get("content-type", "").startswith("application/json"):
                return _error(415, "send the request body as JSON "
                                   "(Content-Type: application/json)")
        return await call_next(request)

    app.add_middleware(SecurityHeaders)  # (outermost: the guard's answers get them too)

    @app.exception_handler(WebError)
    async def web_error(_: Request, exc: WebError) -> JSONResponse:
        return _error(exc.status, folder.shown(str(exc)))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return _error(exc.status_code, str(exc.detail))

    @app.exception_handler(RequestValidationError)
    async def bad_request(_: Request, exc: RequestValidationError) -> JSONResponse:
        return _error(422, "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}"
                                     for e in exc.errors()))

    @app.exception_handler(InputError)
    async def input_error(_: Request, exc: InputError) -> JSONResponse:
        return _error(getattr(exc, "status", 400), folder.shown(str(exc)))

    api = folder

    @app.get("/api/info")
    def info() -> dict[str, Any]:
        """The server: version, the folder's name, whether it is read-only."""
        return {"version": engine_version(), "folder": folder.root.name,
                "read_only": folder.read_only, "token": token is not None}

    @app.get("/api/runs")
    def runs(q: str | None = None, status: str | None = None) -> dict[str, Any]:
        """The runs as a lineage tree (roots, then their forks), filtered."""
        return api.runs(q, status)

    @app.get("/api/runs/{run}")
    def run(run: str) -> dict[str, Any]:
        """One run: status, size, history, interventions, whether it is live."""
        return api.run(run)

    @app.get("/api/runs/{run}/series")
    def series(run: str) -> dict[str, Any]:
        """Per-round aggregates: belief quantiles, polarization, echo, activity, actions,
        rejections, prices, LLM use, and the rounds to mark."""
        return api.series(run)

    @app.get("/api/runs/{run}/posts")
    def posts(run: str, round: int | None = None, limit: int = 20, offset: int = 0,
              platform: str | None = None) -> dict[str, Any]:
        """A round's posts, most seen first (paged)."""
        return api.posts(run, round, limit, offset, platform)

    @app.get("/api/runs/{run}/posts/{post_id}")
    def post(run: str, post_id: int) -> dict[str, Any]:
        """One post, who saw it and who engaged with it."""
        return api.post(run, post_id)

    @app.get("/api/runs/{run}/network")
    def network(run: str, round: int | None = None, max_nodes: int = 2000,
                topic: str | None = None, platform: str | None = None) -> dict[str, Any]:
        """The follow graph at a round (a stated sample above `max_nodes`)."""
        return api.network(run, round, max_nodes, topic, platform)

    @app.get("/api/runs/{run}/knowledge")
    def knowledge(run: str, round: int | None = None, withdrawn: bool = False
                  ) -> dict[str, Any]:
        """The graph memory as of a round, relations with provenance."""
        return api.knowledge(run, round, withdrawn)

    @app.get("/api/runs/{run}/agents")
    def agents(run: str, q: str | None = None, offset: int = 0, limit: int = 50
               ) -> dict[str, Any]:
        """A page of agents."""
        return api.agents(run, q, offset, limit)

    @app.get("/api/runs/{run}/agents/{agent}")
    def agent(run: str, agent: int) -> dict[str, Any]:
        """One agent's trajectories, posts, engagement, memory and interviews."""
        return api.agent(run, agent)

    @app.get("/api/runs/{run}/agents/{agent}/context")
    def context(run: str, agent: int, round: int = Query(..., ge=1),
                platform: str | None = None) -> dict[str, Any]:
        """The exact context the agent got in a round (as `shoal inspect` prints it)."""
        return api.context(run, agent, round, platform)

    @app.post("/api/runs/{run}/agents/{agent}/interview")
    def interview(run: str, agent: int, body: InterviewBody) -> dict[str, Any]:
        """Ask the agent a question; the answer is kept in `interviews`."""
        return api.interview(run, agent, body.question, body.round)

    @app.get("/api/runs/{run}/events")
    async def events(run: str, request: Request) -> StreamingResponse:
        """Server-sent events: `hello`, then `round` whenever a round is committed or
        the status changes."""
        api.run_dir(run)  # (404 now, not inside the stream)

        async def stream() -> AsyncIterator[str]:
            last = None
            progress = _Progress(folder, run)
            yield "retry: 1000\n\n"
            while not await request.is_disconnected():
                try:
                    now = await asyncio.to_thread(progress)
                except WebError:  # (its folder deleted: the next request says so)
                    return
                if now != last:
                    kind = "hello" if last is None else "round"
                    last = now
                    yield f"event: {kind}\ndata: {json.dumps(now)}\n\n"
                await asyncio.sleep(EVENT_POLL_S)

        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store"})

    @app.post("/api/runs/{run}/stop")
    def stop(run: str) -> dict[str, Any]:
        """Stop the run after its running round."""
        return api.stop(run)

    @app.post("/api/runs/{run}/resume")
    def resume(run: str) -> dict[str, Any]:
        """Continue a stopped or interrupted run."""
        return api.resume(run)

    @app.get("/api/runs/{run}/schedule")
    def schedule(run: str, round: int) -> dict[str, Any]:
        """The interventions pending after a round (what a fork there may change)."""
        return api.schedule(run, round)

    @app.post("/api/runs/{run}/fork")
    def fork(run: str, body: ForkBody) -> dict[str, Any]:
        """Fork the run at a round with a plan (as `shoal fork` does)."""
        return api.fork(run, body.round, body.sets, body.seed, body.drop,
                        [m.model_dump() for m in body.move], body.add, body.name, body.run)

    @app.get("/api/compare")
    def compare(runs: str) -> dict[str, Any]:
        """Where runs diverge from the first, per measure, with their series."""
        return api.compare([r for r in runs.split(",") if r])

    @app.get("/api/runs/{run}/analyses")
    def analyses(run: str) -> dict[str, Any]:
        """The run's analyses."""
        return api.analyses(run)

    @app.post("/api/runs/{run}/analyses")
    def start_analysis(run: str, body: AnalysisBody) -> dict[str, Any]:
        """Start `shoal analyse` on the run."""
        return api.start_analysis(run, body.question)

    @app.get("/api/runs/{run}/analyses/{analysis_id}")
    def analysis(run: str, analysis_id: str) -> dict[str, Any]:
        """An analysis: sections, claims, verdicts, evidence."""
        return api.analysis(run, analysis_id)

    @app.get("/api/runs/{run}/report", response_class=HTMLResponse)
    def report(run: str) -> HTMLResponse:
        """The run's self-contained HTML report."""
        return HTMLResponse(api.report(run))

    @app.post("/api/runs/{run}/sql")
    def sql(run: str, body: SqlBody) -> dict[str, Any]:
        """One read-only SELECT (the analyst's guard and limits)."""
        return api.sql(run, body.sql, body.limit)

    @app.get("/api/configs")
    def configs() -> dict[str, Any]:
        """The configs in the folder."""
        return api.configs()

    @app.post("/api/check")
    def check(body: ConfigBody) -> dict[str, Any]:
        """Validate a config as `shoal check` does."""
        return api.check(body.yaml, body.path, body.sets)

    @app.post("/api/start")
    def start(body: ConfigBody) -> dict[str, Any]:
        """Start a run of a config."""
        return api.start(body.yaml, body.path, body.sets)

    @app.get("/api/jobs")
    def jobs() -> dict[str, Any]:
        """What this server started."""
        return {"jobs": [j.as_dict() for j in folder.jobs.all()]}

    static = static_dir()
    if static.is_dir():
        app.mount("/static", StaticFiles(directory=static), name="static")

    @app.get("/", include_in_schema=False)
    def index() -> FileResponse:
        return FileResponse(static / "index.html")

    return app


# What a page of this server may load and do, said to the browser on every answer
# (defence in depth: everything shown is escaped already). The app: its own scripts and
# styles only (styles inline too: a report written into a tab from the app's script
# inherits this policy), images of its own or data: URLs, requests to itself, no framing.
APP_POLICY = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
              "img-src 'self' data: blob:; connect-src 'self'; object-src 'none'; "
              "base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
# A run's report (`shoal report`'s page): no scripts at all, its inline style and data:
# images, sandboxed (an origin of its own: it cannot reach the app's API or token).
REPORT_POLICY = ("default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
                 "base-uri 'none'; form-action 'none'; frame-ancestors 'none'; sandbox")


class SecurityHeaders:
    """Adds the content security policy (`APP_POLICY`, or `REPORT_POLICY` for a run's
    report), `nosniff` and no referrer (an event stream's URL may carry the token) to
    every HTTP answer, the guard's refusals included."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        policy = REPORT_POLICY if path.startswith("/api/runs/") and path.endswith(
            "/report") else APP_POLICY

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", [])
                           if k.lower() not in _SECURITY_HEADERS]
                headers += [(b"content-security-policy", policy.encode()),
                            (b"x-content-type-options", b"nosniff"),
                            (b"referrer-policy", b"no-referrer")]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, with_headers)


_SECURITY_HEADERS = {b"content-security-policy", b"x-content-type-options",
                     b"referrer-policy"}


class ChunkedBodyLimit:
    """Refuses a request body sent without a Content-Length (chunked) once it passes
    MAX_BODY bytes, as the guard refuses a larger Content-Length: such a body is read here
    (at most MAX_BODY bytes of it) before the app reads it, so a client cannot make the
    server hold, and parse, a body of any size."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or any(name == b"content-length"
                                          for name, _ in scope["headers"]):
            await self.app(scope, receive, send)
            return
        body, more = bytearray(), True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # (the client went away)
                return
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > MAX_BODY:
                await _error(413, f"the request body is larger than {MAX_BODY // 2**20} "
                                  "MiB")(scope, receive, send)
                return
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if sent:  # (then only the client's disconnect is left to hear)
                return await receive()
            sent = True
            return {"type": "http.request", "body": bytes(body), "more_body": False}

        await self.app(scope, replay, send)


class _Progress:
    """What one event stream reports: the last whole round and the status. run.json says
    `running` (or `resumed`) from the start of a run to its end, also when its process
    was stopped or killed; so when a run so marked has shown no new round for a second,
    whether a process still holds its file is asked, as `GET /api/runs/ID` asks (at
    most once a second while a slow round runs, once for a run found stopped)."""

    STALL_S = 1.0

    def __init__(self, folder: Folder, run_id: str):
        self.run_dir = folder.run_dir(run_id, links=False)  # (checked when it opened)
        self.run_id = run_id
        self.key: tuple[Any, ...] | None = None  # (run.json's stamp, the last round)
        self.since = 0.0  # when `key` was first seen
        self.checked = 0.0  # when a writer was last looked for
        self.derived: str | None = None  # the status found then

    def __call__(self) -> dict[str, Any]:
        run_dir = self.run_dir
        if not (run_dir.root / "run.json").is_file():
            raise NotFound(f"no run {self.run_id}")
        meta = run_dir.read_meta()
        done = meta.get("rounds_done")
        rounds = run_dir.root / "live" / "rounds"
        if rounds.is_dir():  # a live run: what a reader can see now
            files = sorted(rounds.glob("round=*.parquet"))
            if files:
                done = int(files[-1].name[6:12])
        status = meta.get("status")
        if status in ("running", "resumed"):
            status = self._derived(meta, done, status)
        return {"run_id": self.run_id, "rounds_done": done, "status": status}

    def _derived(self, meta: dict[str, Any], done: Any, status: str) -> str:
        now = time.monotonic()
        with suppress(OSError):
            key = (os.stat(self.run_dir.root / "run.json").st_mtime_ns, done)
            if key != self.key:
                self.key, self.since, self.derived = key, now, None
            if self.derived not in (None, "running", "resumed"):
                return self.derived  # (found stopped: it stays so until run.json changes)
            first = self.checked == 0.0
            if first or (now - self.since >= self.STALL_S and now - self.checked >= 1.0):
                self.checked = now
                self.derived = run_status(self.run_dir, meta)
            return self.derived or status
        return status


def _loopback_host(host: str | None) -> bool:
    if not host:
        return False
    name, _, port = host.rpartition(":") if not host.endswith("]") else (host, "", "")
    if not name:  # (no port given)
        name, port = host, ""
    return name in LOOPBACK_NAMES and (port == "" or port.isdigit())


def _token_ok(request: Request, token: str) -> bool:
    header = request.headers.get("authorization", "")
    given = header[7:] if header.lower().startswith("bearer ") else None
    if given is None and request.url.path.endswith("/events"):
        given = request.query_params.get("token")
    return given is not None and hmac.compare_digest(given.encode(), token.encode())


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)
