"""The MCP server driven by the SDK's own client: `shoal mcp FOLDER` over standard input
and output, and /mcp of `shoal serve` over Streamable HTTP (with its token), on a tiny
run made with the command line."""

from __future__ import annotations

import json
import queue
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from tests.conftest import CONFIGS

WAIT_S = 180  # the most a test waits for a job or a server (never asserted on)
TOOLS = {"list_runs", "describe_run", "run_config", "check_config", "fork_run", "stop_run",
         "resume_run", "query_run", "inspect_agent", "interview_agent", "top_posts",
         "run_analysis", "read_analysis", "render_report", "list_jobs", "list_configs"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, str]:
    """A folder with one tiny finished run (3 rounds of 60 rule agents) and its id."""
    out = tmp_path_factory.mktemp("mcp-runs")
    done = subprocess.run(
        [sys.executable, "-m", "shoal", "run", str(CONFIGS / "quickstart.yaml"), "--out",
         str(out), "--set", "rounds=3", "--set", "population.size=60", "--quiet"],
        capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    (run_id,) = [p.name for p in out.iterdir() if (p / "run.json").is_file()]
    return out, run_id


def stdio(folder: Path, *flags: str, errlog: Any) -> Client:
    """A client of `shoal mcp FOLDER FLAGS` spawned over stdio (its stderr to `errlog`)."""
    params = StdioServerParameters(command=sys.executable,
                                   args=["-m", "shoal", "mcp", str(folder), *flags])
    return Client(stdio_client(params, errlog=errlog), read_timeout_seconds=WAIT_S)


def with_log(body: Callable[[Any], Awaitable[None]]) -> None:
    """Run `body(errlog)`; on failure, show what the server wrote to its stderr."""
    with tempfile.TemporaryFile("w+") as errlog:
        try:
            anyio.run(body, errlog)
        except BaseException:
            errlog.seek(0)
            sys.stderr.write(f"--- server stderr ---\n{errlog.read()[-5000:]}\n")
            raise


async def call(client: Client, tool: str, **args: Any) -> dict[str, Any]:
    """A tool's answer as data (it must not be an error)."""
    result = await client.call_tool(tool, args)
    text = "".join(getattr(c, "text", "") for c in result.content)
    assert not result.is_error, f"{tool}: {text}"
    data = result.structured_content
    return data if isinstance(data, dict) else json.loads(text)


async def refused(client: Client, tool: str, **args: Any) -> str:
    """A tool's error message (it must be an error)."""
    result = await client.call_tool(tool, args)
    text = "".join(getattr(c, "text", "") for c in result.content)
    assert result.is_error, f"{tool} was not refused: {text}"
    return text


async def wait_job(client: Client, run_id: str) -> dict[str, Any]:
    """The server's job writing `run_id`, once it has ended."""
    with anyio.fail_after(WAIT_S):
        while True:
            jobs = (await call(client, "list_jobs"))["jobs"]
            job = next((j for j in jobs if j["run_id"] == run_id), None)
            assert job is not None, f"no job writes {run_id}: {jobs}"
            if not job["running"]:
                return job
            await anyio.sleep(0.2)


def test_stdio_describe_fork_query_inspect(runs):
    """Over stdio: the tools are listed; a run is described; a fork of it runs to the end
    in the background; SQL reads the fork (a non-SELECT is refused, naming why); an agent's
    context is the exact text it was given."""
    folder, run_id = runs

    async def body(errlog: Any) -> None:
        async with stdio(folder, errlog=errlog) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert set(tools) >= TOOLS
            assert all(t.description for t in tools.values())
            assert "sql" in tools["query_run"].input_schema["properties"]

            info = await call(client, "describe_run", run=run_id)
            assert info["status"] == "finished" and info["rounds_done"] == 3
            assert info["agents"] == 60 and "config_yaml" not in info
            assert set(info["beliefs_last_round"]) == set(info["topics"]) == \
                {"carbon_tax", "nuclear_power"}
            last = info["beliefs_last_round"]["carbon_tax"]
            assert last["round"] == 3 and -1 <= last["mean"] <= 1
            assert "no run nope" in await refused(client, "describe_run", run="nope")

            fork = await call(client, "fork_run", run=run_id, round=1, seed=7,
                              name="mcp-fork", run_rounds=True)
            fork_id = fork["run_id"]
            assert fork_id and fork_id != run_id
            job = await wait_job(client, fork_id)
            assert job["returncode"] == 0, job["log_tail"]
            info = await call(client, "describe_run", run=fork_id)
            assert info["status"] == "finished" and info["rounds_done"] == 3
            assert info["parent_run_id"] == run_id and info["fork_round"] == 1
            assert str(folder) not in json.dumps(info)  # (no paths outside the folder)

            rows = await call(client, "query_run", run=fork_id,
                              sql="SELECT max(round) AS last, count(DISTINCT agent) AS n "
                                  "FROM beliefs")
            assert rows["columns"] == ["last", "n"] and rows["rows"] == [[3, 60]]
            message = await refused(client, "query_run", run=fork_id,
                                    sql="DELETE FROM beliefs")
            assert "only SELECT" in message and "DELETE" in message
            acted = await call(client, "query_run", run=fork_id, limit=1,
                               sql="SELECT agent FROM actions WHERE round = 2 ORDER BY agent")
            agent = acted["rows"][0][0]

            ctx = await call(client, "inspect_agent", run=fork_id, agent=agent, round=2)
            assert ctx["contexts"], ctx
            assert all("=== SYSTEM ===" in c["text"] and "=== OBSERVATION ===" in c["text"]
                       for c in ctx["contexts"])

    with_log(body)


def test_stdio_read_only_refuses_fork(runs):
    """`shoal mcp --read-only`: reads work, a fork is refused with the read-only message."""
    folder, run_id = runs

    async def body(errlog: Any) -> None:
        async with stdio(folder, "--read-only", errlog=errlog) as client:
            listed = await call(client, "list_runs")
            assert run_id in [r["run_id"] for r in listed["runs"]]
            message = await refused(client, "fork_run", run=run_id, round=1)
            assert "read-only" in message
            assert (await call(client, "list_jobs"))["jobs"] == []

    with_log(body)


def test_stdio_refuses_a_config_naming_a_path_outside_the_folder(runs, tmp_path):
    """check_config, run_config and fork_run go through the server's own check: a path
    outside the folder is refused naming the field, and nothing is started."""
    folder, run_id = runs
    secret = tmp_path / "profiles.csv"
    secret.write_text("name,bio\nAnn,SECRET BIO\n")
    pasted = f"name: leak\nrounds: 2\ntopics: [a]\npopulation: {{file: {secret}}}\n"

    async def body(errlog: Any) -> None:
        async with stdio(folder, errlog=errlog) as client:
            for tool in ("check_config", "run_config"):
                message = await refused(client, tool, yaml=pasted)
                assert "population.file: names a file or folder outside the served " \
                       "folder" in message and str(tmp_path) not in message, message
            message = await refused(client, "fork_run", run=run_id, round=1,
                                    sets=[f"llm.cache_dir={tmp_path}"])
            assert "--set llm.cache_dir: names a file or folder outside" in message
            assert (await call(client, "list_jobs"))["jobs"] == []

    with_log(body)


def test_stdio_interview_and_analysis(runs):
    """With an LLM (the built-in loopback server): an agent answers a question, and an
    analysis started in the background is read back with its sections and verdicts."""
    folder, run_id = runs

    async def body(errlog: Any) -> None:
        async with stdio(folder, "--base-url", "loopback", "--model", "loopback",
                         errlog=errlog) as client:
            answer = await call(client, "interview_agent", run=run_id, agent=1,
                                question="What do you think of the carbon tax?", round=2)
            assert answer["status"] == "ok" and answer["answer"] and answer["round"] == 2
            assert "no analysis yet" in await refused(client, "read_analysis", run=run_id)

            started = await call(client, "run_analysis", run=run_id,
                                 question="Did beliefs move?")
            assert started["job"]["kind"] == "analyse"
            job = await wait_job(client, run_id)
            assert job["returncode"] == 0, job["log_tail"]
            analysis = await call(client, "read_analysis", run=run_id)
            assert analysis["question"] == "Did beliefs move?" and analysis["sections"]
            assert [a["analysis_id"] for a in analysis["analyses"]] == \
                [analysis["analysis_id"]]
            claims = [c for s in analysis["sections"] for c in s["claims"]]
            assert claims and all(c["verdict"] for c in claims)

            report = await call(client, "render_report", run=run_id, max_chars=2000)
            assert report["text"].startswith("# Shoal run report") and report["truncated"]
            assert len(report["text"]) <= 2001 and str(folder) not in report["text"]

    with_log(body)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def served(runs, tmp_path) -> Iterator[str]:
    """`shoal serve FOLDER --token T` on a free loopback port: its /mcp URL."""
    folder, _ = runs
    port = free_port()
    log = tmp_path / "serve.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "shoal", "serve", str(folder), "--host", "127.0.0.1",
             "--port", str(port), "--token", "T"], stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + WAIT_S
        while True:
            assert proc.poll() is None, log.read_text()
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "shoal serve did not start listening"
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_http_needs_the_token(served, runs):
    """/mcp of `shoal serve --token T` over Streamable HTTP: with the token the tools are
    listed and called; without it the request is refused with 401 (and a request another
    site's page sends, with 403)."""
    _, run_id = runs

    async def body() -> None:
        async with httpx2.AsyncClient(headers={"Authorization": "Bearer T"},
                                      timeout=WAIT_S) as http, \
                Client(streamable_http_client(served, http_client=http),
                       read_timeout_seconds=WAIT_S) as client:
            assert {t.name for t in (await client.list_tools()).tools} >= TOOLS
            listed = await call(client, "list_runs", query=run_id[-6:])
            assert [r["run_id"] for r in listed["runs"]] == [run_id]

        async with httpx2.AsyncClient(timeout=WAIT_S) as http:
            # (the client's task groups wrap the refusal of its handshake)
            with pytest.RaisesGroup(MCPError, flatten_subgroups=True):
                async with Client(streamable_http_client(served, http_client=http),
                                  read_timeout_seconds=WAIT_S) as client:
                    await client.list_tools()
            answer = await http.post(served, json={"jsonrpc": "2.0", "id": 1,
                                                   "method": "tools/list"},
                                     headers={"Accept": "application/json, text/event-stream"})
            assert answer.status_code == 401 and "token" in answer.json()["error"]
            answer = await http.post(served, json={}, headers={"Authorization": "Bearer X"})
            assert answer.status_code == 401
            # with the token, but sent by a page of another site: refused too
            answer = await http.post(served, json={}, headers={
                "Authorization": "Bearer T", "Origin": "http://attacker.example"})
            assert answer.status_code == 403 and "attacker.example" in answer.json()["error"]

    anyio.run(body)


def test_stdio_answers_malformed_lines_as_json_rpc_says_and_goes_on(tmp_path):
    """A line that is not JSON gets -32700 with id null; JSON that is no valid message
    gets -32600 (with its id when that is a valid one); the server then goes on serving
    (the SDK's transport dropped such lines without an answer)."""
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "test", "version": "1"}}}
    sent: list[tuple[bytes, int | None, int | str | None]] = [  # (line, code, id)
        (json.dumps(init).encode(), None, 1),
        (b"not json", -32700, None),
        (b'{"jsonrpc": "2.0", "id": 2, "method": ', -32700, None),
        (b"\xff\xfe\x00", -32700, None),
        (b'{"jsonrpc": "2.0", "id": NaN, "method": "ping"}', -32700, None),
        (b'{"jsonrpc": "2.0", "id": 3}', -32600, 3),
        (b'{"jsonrpc": "1.0", "id": "four", "method": "ping"}', -32600, "four"),
        (b'{"jsonrpc": "2.0", "id": true, "method": "ping"}', -32600, None),
        (b'{"jsonrpc": "2.0", "id": null, "method": "ping"}', -32600, None),
        (b"[1, 2]", -32600, None),
        (b"42", -32600, None),
        (b'{"jsonrpc": "2.0", "id": 5, "method": "ping"}', None, 5),
    ]
    proc = subprocess.Popen([sys.executable, "-m", "shoal", "mcp", str(tmp_path)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)
    assert proc.stdin is not None and proc.stdout is not None
    answers: queue.Queue[bytes] = queue.Queue()
    threading.Thread(target=lambda: [answers.put(a) for a in proc.stdout], daemon=True).start()
    try:
        for line, code, request_id in sent:
            proc.stdin.write(line + b"\n\n")  # (a blank line between is no message)
            proc.stdin.flush()
            try:
                answer = json.loads(answers.get(timeout=WAIT_S))
            except queue.Empty:
                raise AssertionError(f"no answer to {line!r}") from None
            assert answer["jsonrpc"] == "2.0" and answer["id"] == request_id, (line, answer)
            if code is None:
                assert "result" in answer, (line, answer)
            else:
                assert answer["error"]["code"] == code, (line, answer)
        proc.stdin.close()
        assert proc.wait(timeout=WAIT_S) == 0  # (input closed: it ends)
    finally:
        if proc.poll() is None:
            proc.kill()
