"""LLM agents end to end, over real HTTP against the loopback server Shoal ships.

What the provider receives (every context section), faults survived and recorded, the
same trajectory on both executors and across a stop-and-resume, the API key kept out of
everything written, interviews from a run directory, and estimates before a run.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import pandas as pd
import pytest
import yaml

from shoal.agents.llm_tools import tools
from shoal.beliefs.render import stance_lines
from shoal.core.errors import ProviderDown
from shoal.llm.server import serve_in_thread
from shoal.memory.tokens import count
from shoal.runs.simulation import Simulation
from tests.conftest import CONFIGS, ROOT
from tests.helpers import make_config, query, read_table, run_config, tables_differ

EVENT = "BREAKING: the government announces a carbon tax rebate for every household"


def llm_dict(url: str, size: int = 120, rounds: int = 5, fraction: float = 0.5) -> dict:
    """The LLM quick start, smaller, pointed at `url`, with the event at round 2."""
    data = yaml.safe_load((CONFIGS / "llm_quickstart.yaml").read_text())
    data.update(rounds=rounds)
    data["population"]["size"] = size
    provider = data["llm"]["providers"][0]
    provider.update(base_urls=[url], max_retries=1, timeout_s=10)
    data["llm"]["agents"]["fraction"] = fraction
    data["interventions"][0]["round"] = 2
    return data



def cli(*args: str, env: dict | None = None, timeout: float = 300
        ) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "shoal.cli", *args], capture_output=True,
                          text=True, cwd=ROOT, env={**os.environ, **(env or {})},
                          timeout=timeout)


@pytest.fixture
def server():
    s = serve_in_thread(seed=0)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def reference(module_server, tmp_path_factory):
    """A small LLM run on the local executor, and its config mapping."""
    data = llm_dict(module_server.url)
    run = run_config(make_config(data, tmp_path_factory.mktemp("ref")))
    return run.dir, data


# ------------------------------------------------------------------ what the model receives


def _section(text: str, title: str) -> str:
    """The body of the `## title` section of a prompt."""
    m = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert m, f"no section {title!r}"
    return m.group(1)


def test_requests_carry_every_context_section(server, tmp_path):
    run = run_config(make_config(llm_dict(server.url), tmp_path))
    db = run.dir.db
    received = httpx.get(server.url.replace("/v1", "/_shoal/requests")).json()["requests"]
    calls = query(db, "SELECT count(*) FROM llm_calls")[0][0]
    assert len(received) == calls > 100  # one request per logged call (no faults here)
    users = dict(query(db, "SELECT username, agent_id FROM agents"))
    beliefs = {(r, a, t): (x, c) for r, a, t, x, c in query(
        db, "SELECT round, agent, topic, position, confidence FROM beliefs")}
    labels = [t["label"] for t in llm_dict("x")["topics"]]
    topics = [t["name"] for t in llm_dict("x")["topics"]]
    seen = {"event": 0, "memory": 0, "digest": 0, "notifications": 0, "comments": 0}
    for entry in received:
        req = entry["request"]
        system, user = req["messages"][0]["content"], req["messages"][1]["content"]
        assert {t["function"]["name"] for t in req["tools"]} >= {"post", "do_nothing"}
        round_ = int(re.search(r"feed \(round (\d+)", user).group(1))
        agent = users[re.search(r"\(@([\w.]+)\)", system).group(1)]
        # Beliefs: the agent's state at the end of the previous round, in words.
        x, c = zip(*(beliefs[(round_ - 1, agent, t)] for t in topics), strict=True)
        assert _section(system, "What you think").startswith(
            "\n".join(stance_lines(labels, np.array(x), np.array(c))))
        events = _section(system, "Breaking news")
        if round_ in (2, 3):  # the event runs for two rounds
            assert EVENT in events
            seen["event"] += 1
        else:
            assert "None right now." in events
        memory = _section(system, "What has happened so far")
        if round_ > 1:  # the last round's details have their own section, after the news
            last = _section(system, "Last round")
            assert "Nothing yet" not in memory and last.strip().startswith("Last round: ")
            assert round_ == 2 or len(memory.strip().splitlines()) > 1
            seen["memory"] += 1
        digest = _section(system, "Your recent activity on other platforms")
        other = "Twitter" if "Reddit feed" in user else "Reddit"
        seen["digest"] += f"On {other}, round" in digest
        seen["notifications"] += "your post" in _section(user, "Since your last turn here")
        seen["comments"] += "top comment by @" in user
    assert all(seen.values()), seen
    # Each call's tokens per section are logged with it.
    sections = json.loads(query(db, "SELECT section_tokens FROM llm_calls LIMIT 1")[0][0])
    assert {"beliefs", "memory", "digest", "events", "feed", "notifications"} <= set(sections)


# ------------------------------------------------------------------ faults


@pytest.mark.slow
def test_a_thousand_agents_survive_injected_faults(tmp_path):
    """10% errors, 5% timeouts, 5% malformed tool calls, 2% empty replies, bursts of 429:
    the run completes, every failure is logged with its reason, no turn or round is lost,
    and every HTTP request the server received is a row of llm_calls."""
    data = llm_dict("loopback", size=1000, rounds=3, fraction=1.0)
    provider = data["llm"]["providers"][0]
    provider.update(max_retries=3, timeout_s=1.0, concurrency=96, loopback={
        "error_rate": 0.10, "timeout_rate": 0.05, "timeout_sleep_s": 3.0,
        "malformed_rate": 0.05, "empty_rate": 0.02, "burst_every_s": 2.0,
        "burst_length_s": 0.2, "retry_after_s": 0.1, "latency_ms": 5})
    data["platforms"]["twitter"]["feed_size"] = 5
    run = Simulation.create(make_config(data, tmp_path))
    try:
        run.run()
        url = run.engine.endpoints.urls(run.cfg.llm.providers[0])[0]
        log = httpx.get(url.replace("/v1", "/_shoal/requests"), timeout=30).json()["requests"]
        served = httpx.get(url.replace("/v1", "/_shoal/health"), timeout=30).json()["served"]
    finally:
        run.close()
    db = run.dir.db
    assert [r for (r,) in query(db, "SELECT round FROM rounds ORDER BY round")] == [1, 2, 3]
    assert json.loads(run.dir.meta.read_text())["status"] == "finished"
    assert {e["fault"] for e in log} >= {"429", "500", "timeout", "malformed", "empty"}
    # One row per request; every failed request and every invalid reply says why; every
    # fallback says why (on each row of the turn).
    sent = query(db, "SELECT count(*) FROM llm_calls WHERE status <> 'not_sent'")[0][0]
    # A request the client gave up on before the (busy) server read it is sent but never
    # served; nothing the server served may be missing.
    gave_up = query(db, "SELECT count(*) FROM llm_calls WHERE status IN ('timeout', "
                        "'cancelled', 'unreachable')")[0][0]
    assert served <= sent <= served + gave_up
    assert query(db, "SELECT count(*) FROM llm_calls WHERE status <> 'ok' AND error = ''"
                 )[0][0] == 0
    assert query(db, "SELECT count(*) FROM llm_calls WHERE status <> 'ok' AND outcome <> "
                     "'retried' AND fallback_reason = ''")[0][0] == 0
    assert query(db, "SELECT count(*) FROM llm_calls WHERE outcome = 'invalid' AND "
                     "error = ''")[0][0] == 0
    statuses = dict(query(db, "SELECT status, count(*) FROM llm_calls GROUP BY ALL"))
    assert statuses["ok"] > 1000 and query(db, "SELECT sum(retries) FROM llm_calls")[0][0] > 50
    assert query(db, "SELECT count(*) FROM llm_calls WHERE outcome = 'invalid'")[0][0] > 0
    # No turn lost: each LLM turn is exactly one action, its source matching its outcome.
    turns = query(db, """
        WITH turns AS (SELECT round, agent, platform, max(fallback_reason) AS reason
                       FROM llm_calls GROUP BY ALL),
             acts AS (SELECT round, agent, platform::VARCHAR AS platform,
                             count(*) AS n, any_value(source::VARCHAR) AS source
                      FROM actions WHERE source <> 'rule' GROUP BY ALL)
        SELECT t.reason, a.n, a.source FROM turns t
        LEFT JOIN acts a USING (round, agent, platform)""")
    assert len(turns) > 1000
    assert all(n == 1 for _, n, _ in turns)
    assert all((reason == "") == (source == "llm") for reason, _, source in turns)
    assert any(source == "fallback_rule" for _, _, source in turns)


def test_a_server_without_tools_gets_json_in_text(tmp_path):
    """vLLM without a tool parser, Ollama models without tools: a 400 that names tools
    switches the provider to JSON-in-text for the rest of the run; the turn goes on."""
    data = llm_dict("loopback", size=120, rounds=3)
    data["llm"]["providers"][0]["loopback"] = {"reject_tools": True}
    run = run_config(make_config(data, tmp_path))
    db = run.dir.db
    refused, first_round = query(db, "SELECT count(*), min(round) FROM llm_calls "
                                     "WHERE outcome = 'tools_refused'")[0]
    first_turns = query(db, "SELECT count(*) FROM llm_calls WHERE round = 1 AND call = 1")[0][0]
    assert 1 <= refused <= first_turns and first_round == 1  # at most the turns under way
    assert query(db, "SELECT count(*) FROM llm_calls WHERE round > 1 AND "
                     "outcome = 'tools_refused'")[0][0] == 0
    llm_actions = query(db, "SELECT count(*) FROM actions WHERE source = 'llm'")[0][0]
    turns = query(db, "SELECT count(DISTINCT (round, agent, platform)) FROM llm_calls")[0][0]
    assert llm_actions > 0.9 * turns  # answered in JSON (a few invalid ones fall back)


# ------------------------------------------------------------------ determinism


@pytest.mark.slow
def test_same_trajectory_on_ray(reference, module_server, tmp_path, ray_session):
    ref_dir, data = reference
    run = run_config(make_config({**data, "executor": {"kind": "ray", "shards": 2}}, tmp_path))
    assert tables_differ(ref_dir.db, run.dir.db) == []


def test_provider_down_stops_at_a_boundary_and_resumes_identically(reference, tmp_path):
    """The server goes away after round 2: the run stops cleanly (status stopped, rounds
    1-2 kept, the failed calls of round 3 logged); with the server back on the same port,
    resume gives the reference run, plus those calls."""
    ref_dir, data = reference
    first = serve_in_thread(seed=0)
    port = first.port
    cfg = make_config({**data, "llm": {**data["llm"], "providers": [
        {**data["llm"]["providers"][0], "base_urls": [first.url]}]}}, tmp_path)
    run = Simulation.create(cfg)
    try:
        with pytest.raises(ProviderDown, match="shoal resume"):
            run.run(on_round=lambda s: first.stop() if s.round == 2 else None)
    finally:
        run.close()
    meta = json.loads(run.dir.meta.read_text())
    assert meta["status"] == "stopped" and meta["rounds_done"] == 2
    assert query(run.dir.db, "SELECT max(round) FROM rounds")[0][0] == 2
    second = serve_in_thread(port=port, seed=0)
    try:
        again = Simulation.resume(run.dir.root)
        try:
            again.run()
        finally:
            again.close()
    finally:
        second.stop()
    assert tables_differ(ref_dir.db, run.dir.db) in ([], ["llm_calls"])
    stopped = query(run.dir.db, "SELECT count(*), min(round), max(round), min(status) FROM "
                                "llm_calls WHERE outcome = 'round_stopped'")[0]
    assert stopped[0] > 0 and stopped[1:] == (3, 3, "unreachable")
    calls = read_table(run.dir.db, "llm_calls")
    kept = calls[calls["outcome"] != "round_stopped"].reset_index(drop=True)
    pd.testing.assert_frame_equal(kept, read_table(ref_dir.db, "llm_calls"),
                                  check_dtype=False)  # (NULLs made some columns float)


def test_unreachable_provider_exits_3_and_says_so(tmp_path):
    data = llm_dict("http://127.0.0.1:9/v1", rounds=2)  # the discard port: nothing listens
    data["output"] = {"dir": str(tmp_path)}
    path = tmp_path / "down.yaml"
    path.write_text(yaml.safe_dump(data))
    proc = cli("run", str(path), "--quiet")
    assert proc.returncode == 3, proc.stderr
    assert "none of" in proc.stderr and "shoal resume" in proc.stderr
    # calls counted as calls, each with its retries as requests
    said = re.search(r"none of (\d+) LLM calls \((\d+) requests\)", " ".join(proc.stderr.split()))
    assert said and int(said.group(2)) > int(said.group(1)) > 0, proc.stderr
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert json.loads((run_dir / "run.json").read_text())["status"] == "stopped"
    # no connection was ever made: no prompt went out, none is counted or priced
    sent = query(run_dir / "trajectory.duckdb", "SELECT count(*), sum(prompt_tokens), "
                 "sum(cost_usd), min(counted_prompt_tokens) FROM llm_calls")[0]
    assert sent[0] > 0 and sent[1:3] == (0, 0) and sent[3] > 0, sent


# ------------------------------------------------------------------ secrets


@pytest.mark.slow
def test_api_key_never_written(tmp_path):
    """The key goes in the Authorization header (the server refuses requests without
    it) and nowhere else: not the run directory, DuckDB, stdout/stderr or errors."""
    key, wrong = (f"sk-shoal-test-{secrets.token_hex(16)}" for _ in range(2))
    server = serve_in_thread(seed=0, key=key)
    try:
        data = llm_dict(server.url, size=80, rounds=2)
        data["llm"]["providers"][0]["api_key_env"] = "SHOAL_TEST_API_KEY"
        path = tmp_path / "keyed.yaml"
        path.write_text(yaml.safe_dump(data))
        good = cli("run", str(path), "--out", str(tmp_path / "runs"), "--quiet",
                   env={"SHOAL_TEST_API_KEY": key})
        bad = cli("run", str(path), "--out", str(tmp_path / "runs"), "--quiet",
                  env={"SHOAL_TEST_API_KEY": wrong})
    finally:
        server.stop()
    assert good.returncode == 0, good.stderr
    assert bad.returncode == 3 and "401" in bad.stderr  # refused: the run stops, says why
    ok_run = next(p for p in (tmp_path / "runs").iterdir()
                  if json.loads((p / "run.json").read_text())["status"] == "finished")
    assert query(ok_run / "trajectory.duckdb",
                 "SELECT count(*) FROM llm_calls WHERE status = 'ok'")[0][0] > 0
    texts = [good.stdout, good.stderr, bad.stdout, bad.stderr]
    for f in (tmp_path / "runs").rglob("*"):
        if f.is_file():
            texts.append(f.read_bytes().decode("latin-1"))
            if f.name == "trajectory.duckdb":
                texts += [str(row) for row in _all_text(f)]
    for secret in (key, wrong):
        assert not any(secret in t or secret[-12:] in t for t in texts)


def test_a_missing_key_variable_stops_before_anything_is_written(tmp_path):
    data = llm_dict("http://127.0.0.1:9/v1", rounds=2)
    data["llm"]["providers"][0]["api_key_env"] = "SHOAL_TEST_UNSET_KEY"
    path = tmp_path / "nokey.yaml"
    path.write_text(yaml.safe_dump(data))
    env = {k: v for k, v in os.environ.items() if k != "SHOAL_TEST_UNSET_KEY"}
    proc = subprocess.run([sys.executable, "-m", "shoal.cli", "run", str(path), "--out",
                           str(tmp_path / "runs")], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=120)
    assert proc.returncode == 2
    assert "llm.providers.0.api_key_env: the environment variable SHOAL_TEST_UNSET_KEY is " \
           "not set" in " ".join(proc.stderr.split())
    assert not (tmp_path / "runs").exists()
    data["llm"]["providers"][0]["api_key_env"] = "sk-proj-abc123-pasted-by-mistake"
    path.write_text(yaml.safe_dump(data))
    proc = cli("check", str(path))  # a key pasted in place of a name: refused, not echoed
    assert proc.returncode == 2 and "NAME of an environment variable" in proc.stderr
    assert "abc123" not in proc.stderr + proc.stdout


FAKE_KEYS = {  # obviously fake, key-shaped: a prefix, or a long random-looking run
    "base_urls": "https://models.example/v1/sk-proj-FAKEFAKEFAKEFAKE2601",
    "model": "sk-FAKEFAKEFAKEFAKE2602",
    "extra_body": "FAKEfake2603FAKEfake2603FAKEfake",
    "endpoints": "https://models.example/gsk_FAKEFAKEFAKEFAKE2604/v1",
}


@pytest.mark.parametrize("field, change, path", [
    ("base_urls", {"base_urls": ["http://127.0.0.1:9/v1", FAKE_KEYS["base_urls"]]},
     "llm.providers.0.base_urls.1"),
    ("model", {"model": FAKE_KEYS["model"]}, "llm.providers.0.model"),
    ("extra_body", {"extra_body": {"top_p": 0.9, "user": FAKE_KEYS["extra_body"]}},
     "llm.providers.0.extra_body.user"),
    ("endpoints", {"endpoints": [{"url": FAKE_KEYS["endpoints"], "rpm": 60}]},
     "llm.providers.0.endpoints.0.url"),
])
def test_key_shaped_provider_values_are_refused_without_echo(tmp_path, field, change, path):
    """Issue 26 item 9: a key in a base URL's path, in an endpoint's URL, as the model, or
    as a value of extra_body (under an innocent name) is refused when the config is read,
    naming the field's path and never showing the value; nothing is written."""
    data = llm_dict("loopback", size=50, rounds=2)
    provider = data["llm"]["providers"][0]
    if field == "endpoints":
        del provider["base_urls"]
    provider.update(change)
    config = tmp_path / "keyed.yaml"
    config.write_text(yaml.safe_dump(data))
    proc = cli("run", str(config), "--out", str(tmp_path / "runs"), "--quiet")
    said = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode == 2, said
    assert f"{path}: looks like an API key" in said and "the value is not shown" in said
    assert "FAKE" not in said and "Traceback" not in said
    assert not (tmp_path / "runs").exists()


def test_key_shaped_set_values_are_hidden_and_real_names_pass(tmp_path, quickstart_dict):
    """Issue 26 item 9: `--set llm.providers.0.model=<key>` is refused with the value
    hidden in the argument it names; model names and endpoint ids that are not keys
    (Meta-Llama-3.1-8B-Instruct, a Cloudflare account id in the path) are accepted."""
    config = tmp_path / "c.yaml"
    config.write_text((CONFIGS / "llm_quickstart.yaml").read_text())
    proc = cli("check", str(config), "--set", f"llm.providers.0.model={FAKE_KEYS['model']}")
    said = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode == 2 and "FAKE" not in said, said
    assert "--set llm.providers.0.model=(value hidden): llm.providers.0.model: looks like " \
           "an API key" in said
    data = llm_dict("https://api.cloudflare.com/client/v4/accounts/"
                    "023e105f4ecef8ad9ca31a8372d0c353/ai/v1")
    data["llm"]["providers"][0].update(model="meta-llama/Meta-Llama-3.1-8B-Instruct",
                                       extra_body={"user": "agent-run-42"})
    make_config(data, tmp_path)  # accepted


def test_a_plugin_providers_own_fields_are_scanned_for_keys():
    """Issue 26 item 9: a chat-model plug-in's provider config inherits the scan: a
    key-shaped value in a field it adds is refused by path, without the value."""
    from pydantic import Field, ValidationError

    from shoal.config.llm import ProviderConfig

    class Regional(ProviderConfig):
        region: str = "eu"
        routes: dict[str, str] = Field(default_factory=dict)

    Regional(base_urls=["loopback"], model="m", routes={"a": "eu-west-1"})  # fine
    with pytest.raises(ValidationError) as caught:
        Regional(base_urls=["loopback"], model="m", routes={"a": FAKE_KEYS["model"]})
    said = str(caught.value)
    assert "routes.a: looks like an API key" in said and "FAKE" not in said


@pytest.mark.slow
def test_loopback_servers_die_with_a_killed_run(tmp_path):
    """Issue 26 item 14: `shoal run` with `base_urls: [loopback]` killed by SIGKILL (no
    cleanup runs) leaves no loopback server behind: each notices its parent is gone and
    stops. The servers are found by a marker in their environment, inherited from the
    run."""
    if not Path("/proc/self/environ").exists():
        pytest.skip("needs /proc to find the run's processes")
    data = llm_dict("loopback", size=60, rounds=3)
    data["llm"]["providers"].append({**data["llm"]["providers"][0], "name": "second"})
    data["llm"]["agents"]["by_group"] = {"journalists": "second"}  # two servers
    config = tmp_path / "loop.yaml"
    config.write_text(yaml.safe_dump(data))
    mark = f"SHOAL_TEST_RUN_MARK={secrets.token_hex(8)}".encode()

    def servers_left() -> list[int]:
        found = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                environ = Path(f"/proc/{pid}/environ").read_bytes()
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:  # gone, or not ours to read
                continue
            if mark in environ.split(b"\0") and b"shoal.llm.server" in cmdline:
                found.append(int(pid))
        return found

    killed = cli("run", str(config), "--out", str(tmp_path / "runs"), "--quiet",
                 env={"SHOAL_FAULT": "mid_round:2", mark.decode().split("=")[0]:
                      mark.decode().split("=")[1]})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    deadline = time.monotonic() + 120  # generous: only a server that never stops fails
    while servers_left() and time.monotonic() < deadline:
        time.sleep(0.2)
    left = servers_left()
    for pid in left:  # (do not leave them to the next test either)
        os.kill(pid, signal.SIGKILL)
    assert left == []


def test_a_loopback_server_whose_run_was_killed_removes_its_ready_file(tmp_path):
    """A run killed before it read the server's ready file leaves it to the server, which
    removes it (and its shoal-loopback-* folder) when it stops for want of a parent."""
    ready = tmp_path / "shoal-loopback-test" / "url"
    ready.parent.mkdir()
    parent = subprocess.Popen([sys.executable, "-c", (
        "import os, subprocess, sys, time\n"
        "subprocess.Popen([sys.executable, '-m', 'shoal.llm.server', '--port', '0', "
        "'--ready-file', sys.argv[1], '--parent-pid', str(os.getpid())])\n"
        "time.sleep(600)\n"), str(ready)])
    try:
        deadline = time.monotonic() + 120
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert ready.exists(), "the server never became ready"
    finally:
        parent.kill()
        parent.wait()
    deadline = time.monotonic() + 120  # generous: only a server that never stops fails
    while ready.parent.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not ready.parent.exists()


def _all_text(db: Path) -> list[tuple]:
    """Every VARCHAR/JSON value of every table (DuckDB may compress strings on disk)."""
    rows = []
    for table, column in query(db, "SELECT table_name, column_name FROM "
                                   "information_schema.columns WHERE data_type IN "
                                   "('VARCHAR', 'JSON') AND table_name NOT LIKE 'post_stats'"):
        rows += query(db, f'SELECT "{column}" FROM "{table}"')
    return rows


# ------------------------------------------------------------------ interview and estimate


def test_interview_from_the_run_directory(reference, module_server):
    """A separate process, the run directory and an endpoint: the answer comes from the
    agent's state at the end of the asked round (the loopback restates its beliefs in the
    first person)."""
    ref_dir, data = reference
    agent = query(ref_dir.db, "SELECT agent FROM llm_calls LIMIT 1")[0][0]
    proc = cli("interview", str(ref_dir.root), "--agent", str(agent), "--round", "3",
               "What do you make of the carbon tax rebate?", "--show-context")
    assert proc.returncode == 0, proc.stderr
    x, c = query(ref_dir.db, f"SELECT position, confidence FROM beliefs WHERE round = 3 "
                             f"AND agent = {agent} ORDER BY topic")[0]
    first = stance_lines([data["topics"][0]["label"]], np.array([x]), np.array([c]))[0]
    answer = proc.stdout.split("=== ANSWER ===")[1]
    label, view = first.removeprefix("On ").split(": ", 1)
    said = f"on {label}, " + view.rstrip(".").replace("you are", "I am").replace("you ", "I ")
    assert answer.strip().startswith("Speaking for myself: ")
    assert said in " ".join(answer.split()), (said, answer)
    assert EVENT in " ".join(proc.stdout.split())  # breaking news is pinned in its memory
    for bad, why in ((["--agent", "99999"], "no such agent"),
                     (["--agent", "0", "--round", "99"], "kept rounds")):
        proc = cli("interview", str(ref_dir.root), *bad, "Hello?")
        assert proc.returncode == 2 and why in proc.stderr


def test_interview_refuses_a_key_given_as_model(reference):
    """Issue 26 item 9: `shoal interview --model <key>` (the run's provider, another
    model) is validated as the config is: exit 2 naming --model, the value never shown,
    nothing asked or stored."""
    ref_dir, _ = reference

    def interviews() -> int:  # (the table is made by the first interview stored)
        made = query(ref_dir.db, "SELECT count(*) FROM duckdb_tables() WHERE table_name = "
                                 "'interviews'")[0][0]
        return query(ref_dir.db, "SELECT count(*) FROM interviews")[0][0] if made else 0

    before = interviews()
    for extra in ([], ["--base-url", "loopback"]):
        proc = cli("interview", str(ref_dir.root), "--agent", "0", "--model",
                   FAKE_KEYS["model"], *extra, "Hello?")
        said = " ".join((proc.stdout + proc.stderr).split())
        assert proc.returncode == 2, said
        assert "--model: looks like an API key" in said and "FAKE" not in said
    assert interviews() == before


@pytest.mark.slow
def test_interview_of_a_rule_run_needs_an_endpoint(tmp_path, quickstart_dict):
    quickstart_dict.update(rounds=2, population={"size": 100})
    run = run_config(make_config(quickstart_dict, tmp_path))
    proc = cli("interview", str(run.dir.root), "--agent", "3", "Hi?")
    assert proc.returncode == 2 and "--base-url" in proc.stderr
    proc = cli("interview", str(run.dir.root), "--agent", "3", "Hi?", "--base-url",
               "loopback", "--model", "shoal-loopback")
    assert proc.returncode == 0 and "Speaking for myself" in proc.stdout
    proc = cli("interview", str(run.dir.root), "--agent", "3", "Hi?", "--base-url",
               "ftp://example.org", "--model", "m")
    assert proc.returncode == 2 and "--base-url: must be http(s) URLs" in proc.stderr


def test_estimate_predicts_the_calls(reference, tmp_path):
    """Who acts does not depend on what they decide, so the dry run's call count is the
    real run's; prompt tokens are close (the feeds differ)."""
    ref_dir, data = reference
    path = tmp_path / "est.yaml"
    path.write_text(yaml.safe_dump(data))
    proc = cli("estimate", str(path))
    assert proc.returncode == 0, proc.stderr
    out = " ".join(proc.stdout.split())
    calls = int(re.search(r"([\d,]+) calls", out).group(1).replace(",", ""))
    prompt = int(re.search(r"prompt tokens ([\d,]+)", out).group(1).replace(",", ""))
    real = query(ref_dir.db, "SELECT count(*) FROM llm_calls WHERE call = 1")[0][0]
    contexts = query(ref_dir.db, "SELECT sum(tokens) FROM context WHERE section = 'total'")[0][0]
    topics = [t["name"] for t in data["topics"]]
    overhead = [count(json.dumps(tools(p, topics))) for p in ("twitter", "reddit")]
    assert calls == real
    # The dry run's contexts differ from the real ones only in what the feeds hold.
    assert 0.8 * (contexts + calls * min(overhead)) < prompt
    assert prompt < 1.2 * (contexts + calls * max(overhead))
    assert not list(tmp_path.glob("*/trajectory.duckdb"))  # nothing was left behind


def test_runs_inside_a_running_event_loop(reference, tmp_path):
    """A Jupyter kernel runs an asyncio loop: a run started from inside one (LLM agents
    included) works and gives the same trajectory."""
    import asyncio

    ref_dir, data = reference

    async def in_loop():
        return run_config(make_config(data, tmp_path))

    run = asyncio.run(in_loop())
    assert tables_differ(ref_dir.db, run.dir.db) == []
