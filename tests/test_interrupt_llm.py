"""Ctrl-C during a run whose LLM calls are in flight (docs/forks.md, "Resume"): the first
stops the run after the running round, the second abandons the round at once; either way
the command exits 130 saying what it kept, with no traceback and none of asyncio's
complaints ("Event loop is closed", "Task was destroyed but it is pending!"), and the run
resumes to its end. Ctrl-C is sent to the command's whole process group, as a terminal
does (the loopback server and Ray's processes a run starts get it too).

The LLM server is the loopback server in this process with a gate: every chat request
waits at the gate until the test opens it, so "calls in flight" is a state the test waits
for, not a moment it guesses.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from shoal.core.loop_thread import LoopThread
from tests.conftest import CONFIGS, write_config

WAIT_S = 240.0  # generous: Ray starts in seconds, more on a busy machine
COMPLAINTS = ("Traceback", "Event loop is closed", "Task was destroyed", "never awaited")


class Gate:
    """Holds every chat request until it is opened, counting those that arrived."""

    def __init__(self) -> None:
        self.open = threading.Event()
        self._lock = threading.Lock()
        self.arrived = 0
        self.held = 0  # requests waiting at the gate now

    async def wait(self) -> None:
        """Count the request, and hold it until the gate opens."""
        with self._lock:
            self.arrived += 1
            self.held += 1
        try:
            while not self.open.is_set():
                await asyncio.sleep(0.02)
        finally:
            with self._lock:
                self.held -= 1


@pytest.fixture
def gated_server(monkeypatch) -> Iterator[tuple[str, Gate]]:
    """A loopback server whose chat completions wait at a `Gate`; its URL and the gate."""
    from shoal.llm import server as srv

    gate = Gate()
    complete = srv.LoopbackServer.complete

    async def gated(self, request, body, attempt):
        await gate.wait()
        return await complete(self, request, body, attempt)

    monkeypatch.setattr(srv.LoopbackServer, "complete", gated)
    server = srv.serve_in_thread(seed=0)
    yield server.url, gate
    gate.open.set()
    deadline = time.monotonic() + WAIT_S
    while gate.held and time.monotonic() < deadline:  # (let them go before the server does)
        time.sleep(0.05)
    server.stop()


class Command:
    """`python -m shoal.cli ARGS` in a session of its own (so Ctrl-C can go to its whole
    process group), its stderr read as it comes."""

    def __init__(self, *args: str):
        self.process = subprocess.Popen(
            [sys.executable, "-m", "shoal.cli", *args], stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True, start_new_session=True)
        self._err: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self._err.append(line)

    @property
    def stderr(self) -> str:
        return "".join(self._err)

    def ctrl_c(self) -> None:
        """SIGINT to the command's process group, as a terminal's Ctrl-C."""
        os.killpg(self.process.pid, signal.SIGINT)

    def wait(self) -> int:
        """The exit status, once the command has ended and its stderr is read whole."""
        try:
            self.process.wait(timeout=WAIT_S)
        except BaseException:
            os.killpg(self.process.pid, signal.SIGKILL)
            raise
        self._reader.join(WAIT_S)
        return self.process.returncode


def wait_for(condition: Callable[[], bool], what: str, command: Command) -> None:
    """Wait until `condition()` (failing, with the command's stderr, after `WAIT_S`)."""
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if command.process.poll() is not None:
            pytest.fail(f"the command ended before {what}: {command.stderr}")
        if time.monotonic() > deadline:
            os.killpg(command.process.pid, signal.SIGKILL)
            pytest.fail(f"no {what} within {WAIT_S:g} s: {command.stderr}")
        time.sleep(0.05)


def _config(tmp_path: Path, url: str) -> Path:
    """The LLM quick start, smaller, calling `url`; held calls neither time out nor meet
    the round's deadline while the test holds them. Fewer calls at a time than a round
    makes, as with a slow server: some are sent, the others wait for their turn."""
    data = yaml.safe_load((CONFIGS / "llm_quickstart.yaml").read_text())
    data.update(rounds=3, population={**data["population"], "size": 100})
    data["interventions"][0]["round"] = 2
    provider = data["llm"]["providers"][0]
    provider.update(base_urls=[url], timeout_s=WAIT_S, concurrency=4)
    data["llm"]["round_deadline_s"] = WAIT_S
    return write_config(tmp_path / "slow.yaml", data)


def _clean(stderr: str) -> None:
    for complaint in COMPLAINTS:
        assert complaint not in stderr, stderr


def _resumes_to_the_end(run: Path) -> None:
    """`shoal resume RUN` finishes the run, with nothing to complain about."""
    resumed = Command("resume", str(run), "--quiet")
    assert resumed.wait() == 0, resumed.stderr
    _clean(resumed.stderr)
    meta = json.loads((run / "run.json").read_text())
    assert meta["status"] == "finished" and meta["rounds_done"] == 3, meta


EXECUTORS = [pytest.param([], id="local"),
             pytest.param(["--executor", "ray", "--shards", "2"], id="ray")]


@pytest.mark.slow
@pytest.mark.parametrize("executor", EXECUTORS)
def test_one_ctrl_c_with_calls_in_flight_stops_after_the_round(tmp_path, gated_server,
                                                              executor):
    """The first Ctrl-C lets the round in flight finish (its calls answered), commits it,
    says so and how to continue, and exits 130; the run resumes to its end."""
    url, gate = gated_server
    out = tmp_path / "runs"
    run = Command("run", str(_config(tmp_path, url)), "--out", str(out), *executor)
    wait_for(lambda: gate.arrived > 0, "LLM call in flight", run)
    run.ctrl_c()
    wait_for(lambda: "stopping after this round" in run.stderr, "answer to Ctrl-C", run)
    gate.open.set()
    assert run.wait() == 130, run.stderr
    _clean(run.stderr)
    (folder,) = out.iterdir()
    assert f"stopped after round 1 (committed and checkpointed); continue with: shoal " \
           f"resume {folder}" in " ".join(run.stderr.split())
    _resumes_to_the_end(folder)


@pytest.mark.slow
@pytest.mark.parametrize("executor", EXECUTORS)
def test_two_ctrl_cs_with_calls_in_flight_stop_at_once(tmp_path, gated_server, executor):
    """The second Ctrl-C abandons the round while its calls are still waiting for an
    answer: the calls are cancelled, the connections closed on their event loop, the
    command says which round it kept and exits 130, and the run resumes to its end."""
    url, gate = gated_server
    out = tmp_path / "runs"
    run = Command("run", str(_config(tmp_path, url)), "--out", str(out), *executor)
    wait_for(lambda: gate.arrived > 0, "LLM call in flight", run)
    run.ctrl_c()
    # (two signals before the first is handled would be taken as one)
    wait_for(lambda: "stopping after this round" in run.stderr, "answer to Ctrl-C", run)
    assert gate.held > 0  # (the gate is shut: the round's calls are still unanswered)
    run.ctrl_c()
    assert run.wait() == 130, run.stderr
    _clean(run.stderr)
    (folder,) = out.iterdir()
    assert f"round 0 is the last one kept (committed and checkpointed); continue with: " \
           f"shoal resume {folder}" in " ".join(run.stderr.split())
    gate.open.set()
    _resumes_to_the_end(folder)


def test_sigterm_with_calls_in_flight_stops_at_once(tmp_path, gated_server):
    """SIGTERM (a job scheduler, `kill`) stops the run as a second Ctrl-C does: the round
    abandoned, the command names the round kept and exits 143, the run resumes."""
    url, gate = gated_server
    out = tmp_path / "runs"
    run = Command("run", str(_config(tmp_path, url)), "--out", str(out))
    wait_for(lambda: gate.arrived > 0, "LLM call in flight", run)
    run.process.send_signal(signal.SIGTERM)
    assert run.wait() == 143, run.stderr
    _clean(run.stderr)
    (folder,) = out.iterdir()
    assert f"terminated (SIGTERM): the round in progress was abandoned; round 0 is the " \
           f"last one kept (committed and checkpointed); continue with: shoal resume " \
           f"{folder}" in " ".join(run.stderr.split())
    gate.open.set()
    _resumes_to_the_end(folder)


def test_a_runs_loopback_server_leaves_ctrl_c_to_the_run():
    """A terminal's Ctrl-C does not reach the loopback server a run started (a process
    group of its own: a server still importing would die of it), and the server ignores
    one sent to it: it goes on answering the run's calls in flight, and stops when the
    run stops it."""
    from shoal.llm.server import LoopbackProcess

    server = LoopbackProcess(seed=0)
    try:
        assert os.getpgid(server.process.pid) != os.getpgid(0)
        os.kill(server.process.pid, signal.SIGINT)
        # (the server is asked after the signal: a server that died of it answers nothing)
        assert httpx.get(f"{server.url.removesuffix('/v1')}/_shoal/health",
                         timeout=30).json()["ok"]
        assert server.process.poll() is None
    finally:
        server.stop()
    assert server.process.returncode is not None


def test_an_interrupted_run_cancels_its_task_and_waits_for_it():
    """`LoopThread.run` cut short (here by its timeout; a KeyboardInterrupt takes the same
    path) returns only after the task, and what the task started, have wound down."""
    wound_down = threading.Event()

    async def call() -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            await asyncio.sleep(0)  # (winding down may itself await)
            wound_down.set()

    async def turn() -> None:
        inner = asyncio.ensure_future(call())
        try:
            await inner
        except asyncio.CancelledError:
            await asyncio.gather(inner, return_exceptions=True)
            raise

    loop = LoopThread("test-loop")
    try:
        with pytest.raises(TimeoutError):
            loop.run(turn(), timeout_s=0.05)
        assert wound_down.is_set()
        assert loop.run(asyncio.sleep(0, "next"), timeout_s=30) == "next"  # still usable
    finally:
        loop.close()


def test_closing_a_loop_thread_cancels_what_runs_then_closes_on_the_loop(caplog):
    """`close(last)` cancels and awaits the tasks still on the loop, then awaits `last`
    on the loop, then closes it: nothing is destroyed pending, and a failing `last` is
    raised to the caller."""
    loop = LoopThread("test-loop")
    order: list[str] = []

    async def straggler() -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            order.append("straggler")

    async def last() -> None:
        asyncio.get_running_loop()  # (on the loop)
        order.append("last")

    loop.loop.call_soon_threadsafe(lambda: loop.loop.create_task(straggler()))
    loop.run(asyncio.sleep(0.01), timeout_s=30)
    with caplog.at_level("ERROR", logger="asyncio"):
        loop.close(last)
    assert order == ["straggler", "last"]
    assert loop.loop.is_closed()
    assert "destroyed" not in caplog.text
    loop.close()  # a second close does nothing

    failing = LoopThread("test-loop")

    async def boom() -> None:
        raise RuntimeError("cannot close")

    with pytest.raises(RuntimeError, match="cannot close"):
        failing.close(boom)
    assert failing.loop.is_closed()
