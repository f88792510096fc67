"""The analyst (`shoal analyse`) and batch interviews, end to end over real HTTP: the
loopback server answers the plan, the tool calls and the writing; tools read the real run
(DuckDB files on disk); the verifier checks every sentence against the rows it cites."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from shoal import open_run
from shoal.analysis.report import write_report
from shoal.analyst.citations import numbers, parse_claim, sentences, supports, verify
from shoal.analyst.tools import Toolbox
from shoal.cli.main import main
from shoal.llm.metadata import LOOPBACK_MODEL as MODEL  # (Shoal sends it the `shoal` field)
from shoal.llm.server import RunningServer, serve_in_thread
from shoal.store.history_sql import SQLError, query_history
from shoal.store.traces import ANALYSIS
from tests.conftest import CONFIGS
from tests.helpers import (
    fork_and_run,
    make_config,
    query,
    run_cli,
    run_config,
    tables_differ,
)
from tests.helpers import (
    small_disk as mounted,
)


@pytest.fixture(scope="module")
def herd(tmp_path_factory) -> tuple[Path, Path]:
    """The herd-effect example shortened to 6 rounds, with a priced loopback provider (no
    LLM agents: the provider answers interviews), and a fork of it at round 3."""
    data = yaml.safe_load((CONFIGS / "herd_effect.yaml").read_text())
    data["llm"] = {"providers": [{"name": "default", "base_urls": ["loopback"],
                                  "model": "shoal-loopback", "price_prompt_per_mtok": 0.15,
                                  "price_completion_per_mtok": 0.6}], "agents": {"ids": []}}
    out = tmp_path_factory.mktemp("analyst") / "runs"
    parent = run_config(make_config(data, out, rounds=6)).dir.root
    return parent, fork_and_run(parent, 3)


def _steps(run: Path, analysis_id: str):
    return open_run(run).analysis(analysis_id)


class _Hold:
    """From its `n`-th chat request on, an in-process loopback server answers none (until
    `release`): a test stops its client at exactly that point, however slow the machine,
    where a latency to race would be a wall-clock bet. `reached` is set when the `n`-th
    request arrives; held ones stay unanswered until the server stops."""

    def __init__(self, server: RunningServer, n: int):
        self.reached, self.holding, self.count = threading.Event(), True, 0
        handler = server._handler  # (in this process: the test may wrap its handler)
        complete = handler.complete

        async def held(*args: Any) -> Any:
            self.count += 1
            if self.holding and self.count >= n:
                self.reached.set()
                await asyncio.get_running_loop().create_future()  # cancelled at stop()
            return await complete(*args)

        handler.complete = held

    def release(self) -> None:
        """Answer the requests that come from now on."""
        self.holding = False


def _wait_while_it_computes(pid: int, cpu_s: float = 1.0) -> None:
    """Return once process `pid` has spent `cpu_s` more seconds of CPU: a long query is
    surely running then, whatever the machine's load (a fixed sleep can end before it
    starts). Without /proc (not Linux), a one-second wait instead."""
    stat = Path(f"/proc/{pid}/stat")
    if not stat.exists():
        time.sleep(1.0)
        return

    def used() -> float:  # utime + stime: fields 14 and 15, after the ")" of the name
        fields = stat.read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    start, deadline = used(), time.monotonic() + 120  # (a hang guard, not a speed check)
    while used() - start < cpu_s:
        assert time.monotonic() < deadline, f"process {pid} did not compute"
        time.sleep(0.05)


@pytest.mark.slow
def test_analyse_the_herd_run_every_citation_resolves_and_traces_are_whole(herd, tmp_path):
    parent, fork = herd
    md = tmp_path / "analysis.md"
    r = run_cli(["analyse", str(parent), "--compare", str(fork), "--question",
                 "Did the debate polarise?", "--out", str(md)])
    assert r.returncode == 0, r.stderr + r.stdout
    run = open_run(parent)
    info = run.analyses.iloc[-1]
    frames = run.analysis()
    assert info["status"] == "done" and int(info["unverified"]) == 0
    sections = frames["analysis_sections"]
    assert set(sections["section_id"]) >= {"overview", "opinion", "engagement", "forks",
                                           "question"}
    assert (sections["status"] == "done").all()
    claims = frames["analysis_claims"]
    assert len(claims) >= 6 and set(claims["verdict"]) == {"verified"}
    assert int(info["claims"]) == len(claims)
    # every tool result is stored whole: the same text a fresh call of the tool gives
    toolbox = Toolbox(open_run(parent), {"B": open_run(fork)})
    assert "graph_search" not in toolbox.tools  # the run has no graph memory
    steps = frames["analysis_steps"]
    tools = steps[steps["kind"] == "tool"]
    assert len(tools) >= 6
    for s in tools.itertuples():
        if s.name == "interview":  # answers are kept in the interviews table instead
            continue
        fresh = json.dumps({"step": int(s.call), **toolbox.call(s.name, json.loads(
            s.arguments))}, ensure_ascii=False)
        assert len(s.result) == s.result_chars == len(fresh)
        assert s.result == fresh
    # the interview the analyst made is in the interviews table, with its context hashes
    asked = run.interviews
    assert len(asked) == 3 and asked["context_hash"].str.len().eq(16).all()
    assert "verified" in md.read_text() and "[^1]" in md.read_text()
    html = write_report(parent, tmp_path / "report.html").read_text()
    assert '<section id="analysis">' in html and "0 unverified" in html


def _script(posts: int) -> dict:
    text = (f"The run has {posts + 111} posts [step 1]. Post 987654 drew the most votes "
            f"[post 987654]. There were {posts} posts in all [step 1]. The debate was "
            "lively. About 40 posts were angry.")
    return {"plan": [{"tool_calls": [{"name": "plan_sections", "arguments": {"sections": [
        {"id": "overview", "title": "What happened", "brief": "numbers"}]}}]}],
        "overview": [{"tool_calls": [{"name": "sql", "arguments": {
            "query": "SELECT count(*) AS posts FROM posts"}}]},
            {"tool_calls": [{"name": "write_section", "arguments": {"text": text}}]}]}


def test_a_wrong_number_and_a_missing_post_are_flagged_in_the_report(herd, tmp_path):
    parent, _ = herd
    posts = query(parent / "trajectory.duckdb", "SELECT count(*) FROM posts")[0][0]
    server = serve_in_thread(script=_script(posts))
    try:
        r = run_cli(["analyse", str(parent), "--base-url", server.url, "--model", MODEL])
    finally:
        server.stop()
    assert r.returncode == 0, r.stderr
    claims = open_run(parent).analysis()["analysis_claims"].set_index("claim")
    assert list(claims["verdict"]) == ["unsupported", "unresolved", "verified",
                                       "interpretation", "uncited"]
    assert str(posts + 111) in claims.loc[0, "detail"]
    assert "no post 987654" in claims.loc[1, "detail"]
    assert "3 unverified" in r.stdout
    html = write_report(parent, tmp_path / "report.html").read_text()
    assert html.count('class="claim v-unsupported"') == 1
    assert html.count('class="claim v-unresolved"') == 1
    assert "3 unverified</span>" in html


def test_killed_analysis_retries_only_unfinished_sections_and_delete_leaves_nothing(
        herd, tmp_path):
    parent, _ = herd
    server = serve_in_thread()
    # plan (1) + overview (3 calls) answered: the 5th request, the next section's first,
    # is held, so the kill lands there however slow the machine (no race with a latency)
    hold = _Hold(server, 5)
    try:
        proc = subprocess.Popen([sys.executable, "-m", "shoal.cli", "analyse", str(parent),
                                 "--base-url", server.url, "--model", MODEL, "--parallel", "1"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        assert hold.reached.wait(120), "no 5th request"  # (a hang guard, not a speed check)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        before = open_run(parent).analysis()
        analysis_id = before["analysis_runs"]["analysis_id"].iloc[0]
        done_before = before["analysis_sections"].query("status == 'done'")
        assert list(done_before["section_id"]) == ["overview"]
        assert before["analysis_runs"]["status"].iloc[0] == "interrupted"
        overview_steps = before["analysis_steps"].query("section_id == 'overview'")
        hold.release()
        server.state.requests.clear()
        assert main(["analyse", str(parent), "--retry-section", "--analysis", analysis_id,
                     "--base-url", server.url, "--model", MODEL]) == 0
        asked = [m["content"] for e in server.state.requests
                 for m in e["request"]["messages"] if m["role"] == "user"]
    finally:
        server.stop()
    assert asked and not any("Section id: overview" in a for a in asked)
    assert not any("plan_sections" in json.dumps(e) for e in asked)
    after = open_run(parent).analysis(analysis_id)
    assert after["analysis_runs"]["status"].iloc[0] == "done"
    again = after["analysis_steps"].query("section_id == 'overview'")
    assert again.reset_index(drop=True).equals(overview_steps.reset_index(drop=True))
    latest = after["analysis_sections"].sort_values("attempt").groupby("section_id").tail(1)
    assert (latest["status"] == "done").all()
    assert int(latest.set_index("section_id").loc["overview", "attempt"]) == 1

    assert main(["analyse", str(parent), "--delete", analysis_id]) == 0
    db = parent / "trajectory.duckdb"
    for spec in ANALYSIS:
        if "analysis_id" in spec.column_names:
            assert query(db, f"SELECT count(*) FROM {spec.name} WHERE analysis_id = "
                             f"'{analysis_id}'") == [(0,)]
    orphans = query(db, "SELECT count(*) FROM analysis_results WHERE result_hash NOT IN "
                        "(SELECT result_hash FROM analysis_steps WHERE result_hash IS NOT NULL)")
    assert orphans == [(0,)]
    assert not (parent / f"{analysis_id}.md").exists()
    assert main(["analyse", str(parent), "--delete", analysis_id]) == 2


def test_batch_interview_of_200_agents_keeps_every_answer_with_its_context(herd):
    parent, _ = herd
    r = run_cli(["interview", str(parent), "--agents", "0-199", "--round", "5",
                 "What do you think of the carbon tax?"])
    assert r.returncode == 0, r.stderr + r.stdout
    run = open_run(parent)
    kept = run.interviews
    batch = kept[kept["batch_id"] == kept["batch_id"].iloc[-1]]
    assert len(batch) == 200 and sorted(batch["agent"]) == list(range(200))
    assert (batch["status"] == "ok").all() and (batch["round"] == 5).all()
    assert batch["context_hash"].nunique() == 200
    assert (batch["prompt_tokens"] > 0).all() and (batch["cost_usd"] > 0).all()
    # each answers in the first person from its own beliefs: its name, its stances
    names = run.agents.set_index("agent_id")["name"]
    assert all(f"I am {names[a]}" in ans for a, ans in zip(batch["agent"], batch["answer"],
                                                            strict=True))
    assert batch["answer"].nunique() == 200
    assert "200/200 answered" in r.stdout


def test_bad_interview_selectors_name_the_problem(herd, capsys):
    for selector, problem in [("group:nobody", "--agents.groups: unknown groups"),
                              ("0-99999", "--agents.ids: no agent"),
                              ("{fraction: 3}", "less than or equal to 1")]:
        assert main(["interview", str(herd[0]), "--agents", selector, "hello?"]) == 2
        assert problem in capsys.readouterr().err
    assert main(["interview", str(herd[0]), "hello?"]) == 2
    assert "give --agent ID" in capsys.readouterr().err


def test_analyse_refuses_bad_input(herd, tmp_path, capsys):
    parent, _ = herd
    cases = [(["--retry-section", "nope", "--base-url", "loopback", "--model", "m"],
              "no such section"),
             (["--analysis", "an-missing", "--retry-section"], "no analysis 'an-missing'"),
             (["--tool-calls", "0"], "--tool-calls 0"),
             (["--out", str(tmp_path / "a.txt")], "give a .md file name"),
             (["--delete", "an-missing"], "no analysis 'an-missing'")]
    for flags, problem in cases:
        assert main(["analyse", str(parent), *flags]) == 2, flags
        assert problem in capsys.readouterr().err, flags
    assert main(["analyse", str(tmp_path / "nope")]) == 2


# ---------------------------------------------------------------------- the pieces


def test_sentences_citations_and_numbers():
    text = ("Support rose to 0.43 [step 1]. It fell. [step 2]\n\n"
            "12 agents left [agent 3 round 4] [post 7, 9].")
    said = [s for s in sentences(text) if s != "\n"]
    assert said == ["Support rose to 0.43 [step 1].", "It fell. [step 2]",
                    "12 agents left [agent 3 round 4] [post 7, 9]."]
    claim = parse_claim(said[2] + " [step x] [agent 5]")
    assert [c.label() for c in claim.citations] == ["agent 3 round 4", "post 7", "post 9"]
    assert claim.bad_tags == ["[step x]", "[agent 5]"]
    assert [n[3] for n in numbers("COVID-19 hit 3,000 people, -0.5 and 45% on day 2nd")] == [
        "3,000", "-0.5", "45%"]
    assert supports(0.43, 2, False, [0.4312]) and not supports(0.43, 2, False, [0.4361])
    assert supports(45, 0, True, [0.452]) and supports(0.12, 2, False, [-0.1204])
    assert not supports(999, 0, False, [897, 3000])


def test_history_sql_is_read_only_and_sees_the_lineage(herd):
    parent, fork = herd
    rounds = query_history(fork, "SELECT DISTINCT round FROM beliefs ORDER BY round")
    assert [r[0] for r in rounds.rows] == list(range(7))
    assert query_history(parent, "SELECT * FROM posts", limit=5).truncated
    for bad in ("DELETE FROM posts", "SELECT 1; SELECT 2", "ATTACH 'x.db' AS x",
                "SELECT * FROM read_csv('/etc/passwd')", "COPY posts TO '/tmp/x.csv'"):
        with pytest.raises(SQLError):
            query_history(parent, bad)


def test_a_run_with_graph_memory_gives_the_analyst_graph_search(tmp_path, monkeypatch):
    from shoal.config import load_config

    scenario = CONFIGS.parent / "examples" / "carbon_levy"
    monkeypatch.chdir(scenario)  # the scenario's paths are relative to its folder
    cfg = load_config("config.yaml", [f"output.dir={tmp_path}", "rounds=2"])
    run = run_config(cfg).dir.root
    toolbox = Toolbox(open_run(run))
    assert "graph_search" in toolbox.tools
    hits = toolbox.call("graph_search", {"query": "carbon levy rebate", "limit": 3})
    assert hits["rows"] and "fact" in hits["columns"]
    facts = [dict(zip(hits["columns"], r, strict=True))["fact"] for r in hits["rows"]]
    assert any("levy" in f.lower() for f in facts)


# ------------------------------------------------------------ issue 26: bounds and stops

RUNAWAY = ("WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) "
           "SELECT count(*) AS n FROM r")
CROSS_JOIN = "SELECT count(*) AS n FROM range(1000000) a, range(1000000) b"


def _plan(*ids: str) -> list[dict]:
    """A scripted plan of these sections."""
    return [{"tool_calls": [{"name": "plan_sections", "arguments": {"sections": [
        {"id": i, "title": i.title(), "brief": "scripted"} for i in ids]}}]}]


def _calls(*queries: str, text: str = "The section read the run [step 1].") -> list[dict]:
    """A scripted section: one sql call per query, then its text."""
    return [*({"tool_calls": [{"name": "sql", "arguments": {"query": q}}]} for q in queries),
            {"tool_calls": [{"name": "write_section", "arguments": {"text": text}}]}]


def _analyse(parent: Path, script: dict, *flags: str, env: dict | None = None
             ) -> tuple[subprocess.CompletedProcess, list[dict]]:
    """`shoal analyse` in its own process against a scripted loopback server; its result
    and the requests the server got."""
    server = serve_in_thread(script=script)
    try:
        r = run_cli(["analyse", str(parent), "--base-url", server.url, "--model", MODEL,
                     *flags], env=env)
        return r, list(server.state.requests)
    finally:
        server.stop()


def _tool_steps(run: Path):
    steps = open_run(run).analysis()["analysis_steps"]
    return steps[steps["kind"] == "tool"].sort_values(["section_id", "call"])


def test_a_runaway_query_is_interrupted_at_the_query_timeout(herd):
    """issue 26 item 3: a recursive CTE that never ends is stopped at --query-timeout;
    the model is told why, and the section goes on and finishes."""
    parent, _ = herd
    r, _ = _analyse(parent, {"plan": _plan("slow"), "slow": _calls(RUNAWAY)},
                    "--query-timeout", "0.5")
    assert r.returncode == 0, r.stderr + r.stdout
    (step,) = _tool_steps(parent).itertuples()
    assert step.status == "error"
    assert "stopped after 0.5 s, the limit for one query" in step.result
    sections = open_run(parent).analysis()["analysis_sections"]
    assert list(sections["status"]) == ["done"]


@pytest.mark.slow
def test_a_section_deadline_stops_its_query_and_spares_the_parallel_section(herd):
    """issue 26 item 3: --deadline really cancels: the section's cross join is
    interrupted when its deadline passes (the command ends although the query alone
    would run for hours), and the section beside it finishes."""
    parent, _ = herd
    script = {"plan": _plan("slow", "fast"), "slow": _calls(CROSS_JOIN),
              "fast": _calls("SELECT count(*) AS posts FROM posts")}
    r, _ = _analyse(parent, script, "--deadline", "6", "--query-timeout", "600",
                    "--parallel", "2")
    assert r.returncode == 4, r.stderr + r.stdout  # partial: one section timed out
    sections = open_run(parent).analysis()["analysis_sections"].set_index("section_id")
    assert sections.loc["fast", "status"] == "done"
    assert sections.loc["slow", "status"] == "timeout"
    assert "its tool call in flight was stopped" in sections.loc["slow", "error"]


def test_a_large_result_reaches_the_model_cut_with_a_note_and_is_stored_bounded(herd):
    """issue 26 item 3: a 60 MB value and a 300 kB table come back cut (a note says so);
    the trace stores exactly what the model was given, within the byte cap."""
    parent, _ = herd
    big = "SELECT repeat('x', 60000000) AS big"
    wide = "SELECT repeat('y', 1500) AS a, repeat('z', 1500) AS b FROM range(100)"
    r, requests = _analyse(parent, {"plan": _plan("big"), "big": _calls(big, wide)})
    assert r.returncode == 0, r.stderr + r.stdout
    steps = _tool_steps(parent)
    first, second = (json.loads(s) for s in steps["result"])
    assert first["rows"][0][0] == "x" * 2000 + "…" and "cut" in first["note"]
    assert 0 < len(second["rows"]) < 100 and second["truncated"]
    assert "the result is cut to fit 32,000 bytes" in second["note"]
    assert (steps["result_chars"] <= 32_000).all()
    told = [m["content"] for e in requests for m in e["request"]["messages"]
            if m["role"] == "tool"]
    assert set(steps["result"]) <= set(told)  # what was stored is what the model read


def test_the_analyst_sees_the_run_not_where_it_lives(herd):
    """issue 26 item 14: catalog functions that show file paths are refused, PIVOT is
    allowed, and nothing stored of the analysis names the run's directory."""
    parent, _ = herd
    queries = ["SELECT * FROM duckdb_databases()", "SELECT name, value FROM "
               "duckdb_settings()", "SELECT current_setting('temp_directory') AS t",
               "PIVOT (SELECT round, topic, position FROM beliefs) ON topic USING "
               "avg(position) ORDER BY round"]
    r, requests = _analyse(parent, {"plan": _plan("where"), "where": _calls(*queries)})
    assert r.returncode == 0, r.stderr + r.stdout
    results = [json.loads(s) for s in _tool_steps(parent)["result"]]
    assert all("is not available" in x["error"] for x in results[:3])
    assert len(results[3]["rows"]) == 7 and results[3]["columns"][0] == "round"
    sent = json.dumps([e["request"] for e in requests])
    for place in (str(parent), str(parent.parent)):
        assert place not in sent and not any(place in json.dumps(x) for x in results)


@pytest.mark.slow
def test_ctrl_c_stops_at_once_keeps_finished_sections_and_the_same_command_continues(
        herd):
    """issue 26 item 3: the first Ctrl-C interrupts the running query: the command ends
    (exit 130), the finished section is kept, the analysis is listed as interrupted, and
    the same `shoal analyse` command continues it to the end."""
    parent, _ = herd
    script = {"plan": _plan("first", "second"),
              "first": _calls("SELECT count(*) AS posts FROM posts"),
              "second": _calls(CROSS_JOIN)}
    server = serve_in_thread(script=script)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "shoal.cli", "analyse", str(parent), "--base-url",
             server.url, "--model", MODEL, "--parallel", "1", "--query-timeout", "600"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        deadline = time.monotonic() + 120
        # plan, then 2 turns of `first`, then `second` asks for its cross join
        while len(server.state.requests) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        _wait_while_it_computes(proc.pid)  # the query is under way
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=300)  # (a hang guard, not a speed check)
    finally:
        server.stop()
    assert proc.returncode == 130, out + err
    assert "1 finished sections kept" in err and "same `shoal analyse` command" in err
    listed = open_run(parent).analyses.iloc[-1]
    assert listed["status"] == "interrupted"
    before = open_run(parent).analysis()
    sections = before["analysis_sections"].set_index("section_id")["status"].to_dict()
    assert sections == {"first": "done", "second": "interrupted"}
    first_steps = before["analysis_steps"].query("section_id == 'first'")

    again, _ = _analyse(parent, {"second": _calls("SELECT 1 AS one")}, "--parallel", "1")
    assert again.returncode == 0, again.stderr + again.stdout
    after = open_run(parent).analysis(listed["analysis_id"])
    assert after["analysis_runs"]["status"].iloc[0] == "done"
    latest = after["analysis_sections"].set_index("section_id")
    assert list(latest["status"]) == ["done", "done"] and (latest["attempt"] == 1).all()
    kept = after["analysis_steps"].query("section_id == 'first'")
    assert kept.reset_index(drop=True).equals(first_steps.reset_index(drop=True))


def test_interview_selector_beyond_the_population_is_refused_before_expanding(herd,
                                                                               capsys):
    """issue 26 item 4: `--agents 0-1000000000000` exits 2 naming --agents and the
    population's size, without building the list of ids (the old code tried, and
    failed with a MemoryError; tests/data/bad_inputs_analyst.yaml has the issue's
    0-100000000)."""
    parent, _ = herd
    n = len(open_run(parent).agents)
    assert main(["interview", str(parent), "--agents", "0-1000000000000", "Why?"]) == 2
    err = capsys.readouterr().err
    assert "--agents.ids: no agent 1000000000000" in err
    assert f"the population has {n} agents" in err


@pytest.fixture
def small_disk(tmp_path):
    """A 16 MB tmpfs (needs root; skipped otherwise), unmounted afterwards."""
    with mounted(tmp_path, "16m") as mount:
        yield mount


@pytest.mark.slow
def test_analyse_on_a_full_disk_exits_2_keeping_what_was_stored(herd, small_disk, capsys):
    """issue 26 item 12: on a full disk `shoal analyse` exits 2 saying so (no internal
    error); the run's tables and the analysis stored before are intact, and with space
    again the same command works."""
    parent, _ = herd
    run = Path(shutil.copytree(parent, small_disk / parent.name))
    for f in run.glob("an-*.md"):
        f.unlink()
    before = open_run(run).analyses
    assert main(["analyse", str(run), "--base-url", "loopback", "--model", "m"]) == 0
    kept = open_run(run).analyses
    filler = small_disk / "filler"
    with open(filler, "wb") as f, contextlib.suppress(OSError):
        while True:  # fill the disk to the last byte
            f.write(b"\0" * 65536)
            f.flush()
    capsys.readouterr()
    assert main(["analyse", str(run), "--base-url", "loopback", "--model", "m"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"no space left on the device of {run}" in err, err
    assert "internal error" not in err and "Traceback" not in err
    filler.unlink()
    assert tables_differ(parent / "trajectory.duckdb", run / "trajectory.duckdb") == []
    now = open_run(run).analyses
    assert list(now["analysis_id"])[:len(kept)] == list(kept["analysis_id"])
    assert len(kept) == len(before) + 1
    assert main(["analyse", str(run), "--base-url", "loopback", "--model", "m"]) == 0


def test_list_shows_an_analysis_without_a_question_without_nan(herd, capsys):
    """issue 26 item 18: `analyse --list` shows a missing question as "(no question)"."""
    parent, _ = herd
    assert main(["analyse", str(parent), "--base-url", "loopback", "--model", "m"]) == 0
    capsys.readouterr()
    assert main(["analyse", str(parent), "--list"]) == 0
    listed = capsys.readouterr().out
    assert "(no question)" in listed and "nan" not in listed.split()


def test_a_quoted_answer_with_its_citation_is_one_claim():
    """issue 26 item 20: a quotation's inner full stops end no sentence, and the numbers
    of a quotation found word for word in the cited answer are supported by it; a
    misquoted number is still caught."""
    answer = ('Speaking for myself: I am Sara Schmidt; on Reddit, round 5, I commented: '
              '"I support nuclear power. It matters for my family."; on Twitter, round 4, '
              'I liked a post: "Honestly, I am undecided. I read about it all week."')
    text = (f"Agent 0 answered at round 5: “{answer}” [step 1]. Most agents agreed "
            "[step 1].")
    said = [s for s in sentences(text) if s != "\n"]
    assert len(said) == 2 and said[0].endswith("” [step 1].")
    evidence = {"round": 5, "columns": ["batch_id", "agent", "answer"],
                "rows": [["an-1-abc", 0, answer]]}
    claim = verify(parse_claim(said[0]), lambda c: (evidence, ""))
    assert claim.verdict == "verified", claim.detail
    shortened = ("Agent 0 said: “I am Sara Schmidt … on Twitter, round 4, I liked a post” "
                 "[step 1].")
    assert verify(parse_claim(shortened), lambda c: (evidence, "")).verdict == "verified"
    misquoted = "Agent 0 answered at round 5: “on Twitter, round 7, I liked a post” [step 1]."
    wrong = verify(parse_claim(misquoted), lambda c: (evidence, ""))
    assert wrong.verdict == "unsupported" and "7" in wrong.detail


def test_numbers_the_rows_do_not_hold_are_not_verified():
    """A number is checked as written: a minus sign needs a negative value, a whole number
    is not a fraction rounded ("1" for 0.57), "0.32%" is not 0.32, ".9" and "5e-3" are
    numbers, and "3x" states 3."""
    assert numbers("The spread was .9 and fell by 5e-3, 3x and −0.12.") == [
        (0.9, 1, False, ".9"), (0.005, 3, False, "5e-3"), (3.0, 0, False, "3"),
        (-0.12, 2, False, "−0.12")]
    assert supports(0.12, 2, False, [-0.12])  # "fell by 0.12": sign aside
    assert supports(-0.12, 2, False, [-0.1204]) and not supports(-0.32, 2, False, [0.3186])
    assert not supports(1, 0, False, [0.573]) and not supports(0, 0, False, [0.3])
    assert supports(0, 0, False, [0.0]) and supports(2, 0, False, [1.6])
    assert supports(45, 0, True, [0.452]) and supports(45, 0, True, [45.2])
    assert not supports(0.32, 2, True, [0.3186]) and not supports(0, 0, True, [0.3])
    assert parse_claim("The spread was .9 [step 1].").text == "The spread was .9."


def _crafted_script() -> dict:
    """A section whose sentences cite real rows that do not say what they say."""
    sd = ("SELECT stddev_pop(position) AS sd FROM beliefs WHERE round = 6 AND "
          "topic = 'carbon_tax'")
    lies = [
        "The spread of positions was 1 [step 1].",                    # 0.57 is not 1
        "Agent 3 held -0.32 on the carbon tax [agent 3 round 5].",    # it held +0.32
        "Agent 3 held 0.32% support [agent 3 round 5].",              # 0.32 is 32%
        "Fully 45% of agents changed sides [post 45].",               # the post's id
        "It fell to 5% [agent 3 round 5].",                           # the round cited
        "Polarization stood at “0.99” [step 2].",                     # the model's query
        "Agent 0 said “polarization 0.87” [step 3].",                 # its own question
        "The spread stood at “6” [step 1].",                          # "round = 6"
        "The spread was .9 [step 1].",
    ]
    return {"plan": _plan("lies"), "lies": [
        {"tool_calls": [{"name": "sql", "arguments": {"query": sd}}]},
        {"tool_calls": [{"name": "sql", "arguments": {"query": "SELECT count(*) AS n FROM "
                                                      "beliefs WHERE position > 0.99"}}]},
        {"tool_calls": [{"name": "interview", "arguments": {
            "agents": [0], "round": 6, "question": "Is polarization 0.87 now?"}}]},
        {"tool_calls": [{"name": "write_section", "arguments": {"text": "\n\n".join(
            [*lies, "Post 45 is cited by its id [post 45].",
             "Agent 3 at round 5 is cited [agent 3 round 5]."])}}]}]}


def test_claims_citing_rows_that_say_otherwise_are_not_verified(herd):
    """Each sentence cites rows that exist but do not hold its number (a sign, a
    rounding, a percentage, an id, a quotation of the model's own query or question):
    each is unsupported; an id written as such ("post 45") is still its own evidence."""
    parent, _ = herd
    r, _ = _analyse(parent, _crafted_script())
    assert r.returncode == 0, r.stderr + r.stdout
    claims = open_run(parent).analysis()["analysis_claims"].sort_values("claim")
    verdicts = dict(zip(claims["sentence"], claims["verdict"], strict=True))
    assert list(verdicts.values()) == ["unsupported"] * 9 + ["verified"] * 2, verdicts


def test_a_failed_section_beside_a_done_one_prints_no_nan_and_top_posts_keeps_its_bounds(
        herd):
    parent, _ = herd
    r, _ = _analyse(parent, {"plan": _plan("good", "bad"), "bad": [{"content": ""}],
                             "good": _calls("SELECT count(*) AS n FROM posts")})
    assert r.returncode == 4, r.stderr + r.stdout
    assert "neither text nor a tool call" in r.stdout and "nan" not in r.stdout
    rows = Toolbox(open_run(parent)).call("top_posts", {"limit": -5})["rows"]
    assert len(rows) == 1



def test_a_section_that_is_only_a_refusal_is_failed_not_done(herd):
    """A model that declines ("I'm sorry, but I can't help with that."), as its answer or
    as write_section's text, has not written the section: it is failed, the error quotes
    the refusal, the model step keeps the message, and --retry-section writes it again."""
    parent, _ = herd
    script = {"plan": _plan("plain", "tool", "good"),
              "plain": [{"content": "I’m sorry, but I can’t help with that."}],
              "tool": _calls(text="I cannot help with that."),
              "good": _calls("SELECT count(*) AS n FROM posts")}
    r, _ = _analyse(parent, script)
    assert r.returncode == 4, r.stderr + r.stdout  # partial, as with an empty answer
    analysis = open_run(parent).analysis()
    sections = analysis["analysis_sections"].set_index("section_id")
    assert dict(sections["status"]) == {"plain": "failed", "tool": "failed", "good": "done"}
    assert sections.loc["plain", "error"] == ("the model refused to write the section: "
                                              "'I’m sorry, but I can’t help with "
                                              "that.'")
    assert "'I cannot help with that.'" in sections.loc["tool", "error"]
    assert analysis["analysis_runs"]["status"].iloc[-1] == "partial"
    steps = analysis["analysis_steps"]
    plain = steps[(steps["section_id"] == "plain") & (steps["kind"] == "model")]
    assert "can’t help with that" in json.loads(plain["content"].iloc[0])["content"]
    server = serve_in_thread()  # unscripted: the loopback analyst writes the sections
    try:
        again = run_cli(["analyse", str(parent), "--retry-section", "--base-url",
                         server.url, "--model", MODEL])
    finally:
        server.stop()
    assert again.returncode == 0, again.stderr + again.stdout
    latest = open_run(parent).analysis()["analysis_sections"]
    retried = latest[latest["attempt"] == 2].set_index("section_id")["status"]
    assert dict(retried) == {"plain": "done", "tool": "done"}


def test_only_a_refusal_is_taken_for_one():
    from shoal.analyst.analyst import refusal

    for text in ("I cannot help with that.", "Sorry, I can't assist with that request.",
                 "I'm unable to help with this.", "As an AI, I cannot write reports."):
        assert refusal(text), text
    for text in ("I cannot find a post about the toll [step 1].", "",
                 "Sorry, the tools returned nothing.", "I can't help noticing it rose.",
                 "The tools returned nothing to report for this section.",
                 "I cannot help with that. " + "Positions moved apart. " * 20):
        assert not refusal(text), text


def test_a_message_with_more_tool_calls_than_the_budget_is_answered_within_it(herd):
    """A model asking for 40 tool calls in one message: the calls the budget allows are
    run, one more is refused, the rest are not run or recorded as steps (the model's
    message, recorded whole, still shows them); the section finishes."""
    parent, _ = herd
    many = [{"name": "sql", "arguments": {"query": f"SELECT {i} AS n"}} for i in range(40)]
    r, _ = _analyse(parent, {"plan": _plan("greedy"), "greedy": [
        {"tool_calls": many},
        {"tool_calls": [{"name": "write_section", "arguments": {"text": "Done [step 1]."}}]}]},
        "--tool-calls", "5")
    assert r.returncode == 0, r.stderr + r.stdout
    steps = _tool_steps(parent)
    assert list(steps["status"]) == ["ok"] * 5 + ["refused"]
    sections = open_run(parent).analysis()["analysis_sections"]
    assert list(sections["status"]) == ["done"] and int(sections["tool_calls"].iloc[0]) == 6


def test_a_plan_that_never_comes_is_given_up_at_the_deadline(herd):
    """A server that takes the request and never answers: the plan call is bounded by
    --deadline like a section's work (it waited for every HTTP retry's timeout), the
    default plan is used and the trace says why."""
    import socket

    parent, _ = herd
    with socket.socket() as silent:  # listens, never accepts: requests wait for ever
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/v1"
        r = run_cli(["analyse", str(parent), "--base-url", url, "--model", MODEL,
                     "--deadline", "1"])
    assert r.returncode in (1, 4), r.stderr + r.stdout  # (every section timed out too)
    steps = open_run(parent).analysis()["analysis_steps"]
    (plan,) = steps[steps["kind"] == "plan"].itertuples()
    assert plan.status == "fallback"
    assert "no answer within the deadline (1 s); the default plan is used" in plan.arguments


def test_tool_arguments_that_are_no_json_object_are_answered_as_such(herd):
    """A call whose arguments are not a JSON object is told so (it was told 'sql: the
    query is empty'), and the section goes on."""
    parent, _ = herd
    r, _ = _analyse(parent, {"plan": _plan("odd"), "odd": [
        {"tool_calls": [{"name": "sql", "arguments": "SELECT 1 {"}]},
        *_calls("SELECT count(*) AS n FROM posts")]})
    assert r.returncode == 0, r.stderr + r.stdout
    first = _tool_steps(parent).iloc[0]
    assert first.status == "error"
    assert "sql: the arguments are not a JSON object: SELECT 1 {" in first.result
