"""The analyst (`shoal analyse`) and batch interviews, end to end over real HTTP: the
loopback server answers the plan, the tool calls and the writing; tools read the real run
(DuckDB files on disk); the verifier checks every sentence against the rows it cites."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from sim import open_run
from sim.analysis.report import write_report
from sim.analyst.citations import numbers, parse_claim, sentences, supports
from sim.analyst.tools import Toolbox
from sim.cli.main import main
from sim.llm.server import Faults, serve_in_thread
from sim.store.analysis import ANALYSIS
from sim.store.history_sql import SQLError, query_history
from tests.conftest import CONFIGS
from tests.helpers import fork_and_run, make_config, query, run_cli, run_config


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
        r = run_cli(["analyse", str(parent), "--base-url", server.url, "--model", "m"])
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
    server = serve_in_thread(faults=Faults(latency_ms=150))
    try:
        proc = subprocess.Popen([sys.executable, "-m", "sim.cli", "analyse", str(parent),
                                 "--base-url", server.url, "--model", "m", "--parallel", "1"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        # plan (1) + overview (3 calls) done: the 5th request is the next section's first
        while len(server.state.requests) < 5 and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        before = open_run(parent).analysis()
        analysis_id = before["analysis_runs"]["analysis_id"].iloc[0]
        done_before = before["analysis_sections"].query("status == 'done'")
        assert list(done_before["section_id"]) == ["overview"]
        assert before["analysis_runs"]["status"].iloc[0] == "interrupted"
        overview_steps = before["analysis_steps"].query("section_id == 'overview'")
        server.state.requests.clear()
        assert main(["analyse", str(parent), "--retry-section", "--analysis", analysis_id,
                     "--base-url", server.url, "--model", "m"]) == 0
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
    from sim.config import load_config

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
