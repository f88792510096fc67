"""Hostile input to `shoal init` and `shoal graph`: a damaged or incomplete scenario graph,
flags out of range or malformed, an LLM endpoint that is not there or fails part of the
time, and a folder given as the brief. Each is an input error naming what is wrong
(exit 2, or 3 where trying later may do), and nothing is written."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import duckdb
import pytest

from shoal.cli.main import main
from tests.conftest import ROOT
from tests.helpers import closed_port, serve_http

TOLL = ROOT / "tests" / "data" / "graph" / "toll.md"
PARAGRAPHS = 4  # of TOLL, the heading included: `shoal init` reads each twice
KEY = "sk-test-" + "0123456789abcdef" * 2  # key-shaped: must never be printed


def _run(capsys, *argv: str) -> tuple[int, str]:
    """`shoal ARGV`'s exit code and everything it printed (stderr and stdout, one line
    per message however wide)."""
    capsys.readouterr()
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, " ".join((captured.err + captured.out).split())


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


@pytest.fixture
def scenario(tmp_path) -> Path:
    out = tmp_path / "scenario"
    assert main(["init", str(TOLL), "--out", str(out), "--agents", "10", "--rounds",
                 "2"]) == 0
    return out


def _count(path: Path) -> int:
    return duckdb.sql("SELECT count(*) FROM read_parquet($p)",
                      params={"p": str(path)}).fetchall()[0][0]


class _Flaky(BaseHTTPRequestHandler):
    """An OpenAI-compatible endpoint answering its first `ok` chat completions with a
    record_facts call (no facts), then `status` to every other one."""

    ok = 1
    status = 400
    lock = threading.Lock()
    served = 0

    def log_message(self, *args) -> None:  # (quiet)
        pass

    def do_POST(self) -> None:  # (the name http.server calls)
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with self.lock:
            type(self).served += 1
            n = self.served
        if n <= self.ok:
            call = {"id": "c1", "type": "function", "function": {
                "name": "record_facts", "arguments": json.dumps({"entities": [],
                                                                 "facts": []})}}
            status, body = 200, {"choices": [{"message": {
                "role": "assistant", "content": None, "tool_calls": [call]}}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5}}
        else:
            status, body = self.status, {"error": {"message": "no such model: x"}}
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def _serve(ok: int, status: int) -> Iterator[str]:
    handler = type("Handler", (_Flaky,), {"ok": ok, "status": status, "served": 0,
                                          "lock": threading.Lock()})
    for root in serve_http(handler):
        yield root + "/v1"


@pytest.fixture
def flaky() -> Iterator[str]:
    """Answers the first call, refuses (400) every later one."""
    yield from _serve(1, 400)


@pytest.fixture
def overloaded() -> Iterator[str]:
    """503 to every call: the client retries, then gives up."""
    yield from _serve(0, 503)


# ----------------------------------------------------------------- a damaged scenario


@pytest.mark.parametrize("damage, message", [
    (b"garbage", "damaged or not a Parquet file (too small to be a Parquet file)"),
    (b"PAR1" + bytes(range(256)) * 8, "damaged or not a Parquet file"),
    ("entities", "not a graph_relations table (no column relation_id"),
    (None, "missing from the scenario's graph"),
])
def test_a_damaged_scenario_graph_is_an_input_error(scenario, tmp_path, capsys, damage,
                                                    message):
    """Every command that reads a scenario's graph names the damaged (or missing, or
    swapped) file and how to repair it (exit 2); `graph add` writes nothing."""
    target = scenario / "graph" / "graph_relations.parquet"
    if damage is None:
        target.unlink()
    elif damage == "entities":  # a Parquet file, of another table
        target.write_bytes((scenario / "graph" / "graph_entities.parquet").read_bytes())
    else:
        target.write_bytes(damage)
    before = _files(scenario)
    for argv in (["graph", "relations", str(scenario)],
                 ["graph", "entities", str(scenario)],
                 ["graph", "search", str(scenario), "toll"],
                 ["graph", "add", str(TOLL), "--into", str(scenario)],
                 ["run", str(scenario / "config.yaml"), "--out", str(tmp_path / "runs"),
                  "--quiet"]):
        code, err = _run(capsys, *argv)
        assert code == 2, (argv, err)
        assert "internal error" not in err
        assert "graph_relations.parquet: " + message in err, (argv, err)
        assert "run `shoal init` again or restore it" in err
    assert _files(scenario) == before


def test_damaged_llm_calls_stop_graph_add_before_it_writes(scenario, capsys):
    """`graph add --llm` keeps earlier calls: a damaged llm_calls.parquet is named, and the
    graph is left as it was."""
    assert main(["graph", "add", str(TOLL), "--into", str(scenario), "--llm",
                 "loopback"]) == 0
    calls = scenario / "graph" / "llm_calls.parquet"
    assert _count(calls) == PARAGRAPHS
    assert main(["graph", "add", str(TOLL), "--into", str(scenario), "--llm",
                 "loopback"]) == 0  # earlier calls kept, these after them
    assert _count(calls) == 2 * PARAGRAPHS
    calls.write_bytes(b"not parquet")
    before = _files(scenario)
    code, err = _run(capsys, "graph", "add", str(TOLL), "--into", str(scenario), "--llm",
                     "loopback")
    assert code == 2 and f"{calls}: damaged or not a Parquet file" in err
    assert _files(scenario) == before


# ----------------------------------------------------------------- flags


@pytest.mark.parametrize("seed, message", [
    ("-1", "--seed -1: must be >= 0"),
    (str(2**63), f"--seed {2**63}: must be < 2**63"),
])
def test_init_refuses_a_seed_out_of_range(tmp_path, capsys, seed, message):
    out = tmp_path / "out"
    code, err = _run(capsys, "init", str(TOLL), "--out", str(out), "--seed", seed)
    assert code == 2 and f"error: {message}" in err
    assert not out.exists()


@pytest.mark.parametrize("flags, message", [
    (["--llm", "notaurl"], "--llm: must be http(s) URLs or 'loopback', got 'notaurl'"),
    (["--llm", "loopback", "--model", KEY], "--model: looks like an API key"),
    (["--llm", "loopback", "--api-key-env", KEY], "--api-key-env: must be the NAME of an "
                                                  "environment variable"),
])
def test_init_names_the_llm_flag_that_is_wrong(tmp_path, capsys, flags, message):
    out = tmp_path / "out"
    code, err = _run(capsys, "init", str(TOLL), "--out", str(out), *flags)
    assert code == 2 and f"error: {message}" in err, err
    assert "ValidationError" not in err and KEY not in err
    assert not out.exists()


def test_a_folder_is_not_a_brief(tmp_path, capsys):
    folder = tmp_path / "notes"
    folder.mkdir()
    code, err = _run(capsys, "init", str(folder), "--out", str(tmp_path / "out"))
    assert code == 2
    assert f"{folder}: a folder, not a document (text, Markdown or PDF)" in err
    code, err = _run(capsys, "graph", "add", str(folder), "--into", str(tmp_path / "new"),
                     "--new")
    assert code == 2 and f"{folder}: a folder, not a document" in err
    assert not (tmp_path / "out").exists() and not (tmp_path / "new").exists()


# ----------------------------------------------------------------- the LLM endpoint


def test_an_llm_endpoint_with_nothing_listening_stops_before_writing(tmp_path, capsys):
    """Nothing listening at --llm: the first call fails (retries included), the command
    stops there (exit 2), says so, and writes nothing."""
    with closed_port() as port:
        url = f"http://127.0.0.1:{port}/v1"
        out = tmp_path / "out"
        code, err = _run(capsys, "init", str(TOLL), "--out", str(out), "--llm", url,
                         "--model", "x")
        assert code == 2, err
        assert f"error: --llm {url}: no answer (" in err and "nothing written" in err
        assert not out.exists()
        code, err = _run(capsys, "graph", "add", str(TOLL), "--into", str(out), "--new",
                         "--llm", url)
    assert code == 2 and f"--llm {url}: no answer" in err and not out.exists()


def test_an_overloaded_llm_endpoint_is_worth_trying_later(tmp_path, capsys, overloaded):
    """503 to every call (after the client's retries): exit 3, nothing written."""
    out = tmp_path / "out"
    code, err = _run(capsys, "init", str(TOLL), "--out", str(out), "--llm", overloaded)
    assert code == 3, err
    assert f"--llm {overloaded}: no usable answer (HTTP 503" in err
    assert "try again later" in err and not out.exists()


def test_llm_calls_that_fail_after_the_first_are_reported(tmp_path, capsys, flaky):
    """The first call answered, the others refused: the scenario is written, a warning
    says how many texts gave no facts and why, and SCENARIO.md says which extractor read
    the facts and what it came to."""
    out = tmp_path / "out"
    code, err = _run(capsys, "init", str(TOLL), "--out", str(out), "--agents", "10",
                     "--llm", flaky, "--model", "x")
    assert code == 0, err
    lost = 2 * PARAGRAPHS - 1
    assert (f"warning: extraction: the LLM extractor (model x at {flaky}): "
            f"{2 * PARAGRAPHS} calls, one per text read; {lost} failed (http_error: "
            "HTTP 400") in err
    assert "those texts gave no facts" in err
    report = (out / "SCENARIO.md").read_text()
    extraction = report.split("## Extraction\n\n", 1)[1].split("\n")[0]
    assert f"{lost} failed (http_error: HTTP 400" in extraction
    assert "no fallback extractor" in extraction
    statuses = duckdb.sql("SELECT status, count(*) FROM read_parquet($p) GROUP BY ALL "
                          "ORDER BY ALL", params={"p": str(out / "graph" /
                                                           "llm_calls.parquet")}).fetchall()
    assert statuses == [("http_error", lost), ("ok", 1)]


def test_the_offline_extractor_reports_nothing(scenario):
    """The default extractor: no warning to give, no Extraction section."""
    assert "## Extraction" not in (scenario / "SCENARIO.md").read_text()
