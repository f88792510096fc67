"""`shoal serve`'s REST API over real HTTP on 127.0.0.1: every endpoint against the
notebook API's own numbers, and the safety rules (paths, token, host, origin, read-only),
each refused with a clear status and message and nothing read or written outside."""

from __future__ import annotations

import json
import os
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import uvicorn
import yaml

from shoal.analysis.metrics import esteban_ray, like_minded_share
from shoal.analysis.notebook import open_run
from shoal.runs.inspect import inspect_agent
from shoal.web.app import create_app
from shoal.web.service import Folder, WebError
from tests.conftest import CONFIGS, ROOT
from tests.helpers import run_cli, tables_differ

SMALL = ["--set", "population.size=60", "--set", "rounds=3"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """The app on a real uvicorn server on 127.0.0.1, in a thread of this process."""

    def __init__(self, folder: Folder, token: str | None = None):
        self.port = _free_port()
        self.app = create_app(folder, token, mcp=False)
        self.server = uvicorn.Server(uvicorn.Config(self.app, host="127.0.0.1",
                                                    port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.02)
        self.url = f"http://127.0.0.1:{self.port}"

    def client(self, **kw) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=180, **kw)

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(30)


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """A folder with a finished run, a fork of it at round 1 and a config."""
    root = tmp_path_factory.mktemp("served")
    (root / "configs").mkdir()
    shutil.copy(CONFIGS / "quickstart.yaml", root / "configs" / "q.yaml")
    done = run_cli(["run", str(CONFIGS / "quickstart.yaml"), "--out", str(root), "--quiet",
                    *SMALL])
    assert done.returncode == 0, done.stderr
    (run,) = [p for p in root.iterdir() if (p / "run.json").is_file()]
    forked = run_cli(["fork", str(run), "--round", "1", "--set", "policy.post_rate=0.9",
                      "--quiet"])
    assert forked.returncode == 0, forked.stderr
    return root


def _runs(root: Path) -> dict[str, Path]:
    """Run id -> directory, roots first (by creation)."""
    found = [p for p in root.iterdir() if (p / "run.json").is_file()]
    found.sort(key=lambda p: json.loads((p / "run.json").read_text())["created_at"])
    return {p.name: p for p in found}


@pytest.fixture(scope="module")
def server(folder) -> Iterator[Server]:
    s = Server(Folder(folder, base_url="loopback", model="m"))
    yield s
    s.close()


@pytest.fixture(scope="module")
def api(server) -> Iterator[httpx.Client]:
    with server.client() as c:
        yield c


@pytest.fixture(scope="module")
def ids(folder) -> tuple[str, str]:
    root, fork = list(_runs(folder))
    return root, fork


def _listing(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under a folder with its size and modification time."""
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*")) if p.is_file()}


# ---------------------------------------------------------------- reading


def test_info_and_the_openapi_document_cover_every_endpoint(api):
    info = api.get("/api/info").json()
    assert info["read_only"] is False and info["token"] is False
    doc = api.get("/api/openapi.json").json()
    paths = set(doc["paths"])
    for path in ("/api/runs", "/api/runs/{run}", "/api/runs/{run}/series",
                 "/api/runs/{run}/posts", "/api/runs/{run}/posts/{post_id}",
                 "/api/runs/{run}/network", "/api/runs/{run}/knowledge",
                 "/api/runs/{run}/agents", "/api/runs/{run}/agents/{agent}",
                 "/api/runs/{run}/agents/{agent}/context",
                 "/api/runs/{run}/agents/{agent}/interview", "/api/runs/{run}/events",
                 "/api/runs/{run}/stop", "/api/runs/{run}/resume", "/api/runs/{run}/schedule",
                 "/api/runs/{run}/fork", "/api/compare", "/api/runs/{run}/analyses",
                 "/api/runs/{run}/analyses/{analysis_id}", "/api/runs/{run}/report",
                 "/api/runs/{run}/sql", "/api/configs", "/api/check", "/api/start",
                 "/api/jobs"):
        assert path in paths, path
    assert "ForkBody" in doc["components"]["schemas"]


def test_runs_are_listed_as_a_lineage_tree_and_filtered(api, ids):
    root, fork = ids
    runs = api.get("/api/runs").json()["runs"]
    assert [r["run_id"] for r in runs] == [root, fork]
    assert runs[0]["depth"] == 0 and runs[1]["depth"] == 1
    assert runs[1]["parent_run_id"] == root and runs[1]["fork_round"] == 1
    assert runs[0]["status"] == "finished" and runs[0]["rounds_done"] == 3
    assert runs[0]["agents"] == 60 and runs[0]["llm_calls"] == 0
    assert [r["run_id"] for r in api.get("/api/runs", params={"q": fork[-6:]}).json()[
        "runs"]] == [fork]
    assert api.get("/api/runs", params={"status": "running"}).json()["runs"] == []


def test_series_equal_the_notebook_measures(api, folder, ids):
    root, _ = ids
    s = api.get(f"/api/runs/{root}/series").json()
    run = open_run(folder / root)
    beliefs = run.beliefs
    assert s["rounds"] == sorted(beliefs["round"].unique().tolist())
    for topic, q in s["beliefs"].items():
        for i, r in enumerate(s["rounds"]):
            x = beliefs[(beliefs["round"] == r) & (beliefs["topic"] == topic)]["position"]
            assert q["mean"][i] == pytest.approx(x.mean())
            assert q["q50"][i] == pytest.approx(np.quantile(x, 0.5))
            assert q["q05"][i] <= q["q25"][i] <= q["q50"][i] <= q["q75"][i] <= q["q95"][i]
            assert s["polarization"][topic][i] == pytest.approx(esteban_ray(x))
    share = like_minded_share(run.exposures, run.posts, beliefs)
    for row in share.itertuples():
        assert s["echo"][row.topic][s["rounds"].index(row.round)] == pytest.approx(row.share)
    rounds = run.rounds.set_index("round")
    for i, r in enumerate(s["rounds"]):
        if r in rounds.index:
            assert s["activity"]["n_actions"][i] == rounds.loc[r, "n_actions"]
    ok = run.actions[run.actions["status"] == "ok"]
    for action, values in s["actions"].items():
        assert sum(values) == int((ok["action"] == action).sum())
    assert set(s["llm"]) == {"calls", "failed", "prompt_tokens", "completion_tokens",
                             "cost_usd"}


def test_a_fork_marks_its_fork_round_and_reads_its_parents_history(api, ids):
    root, fork = ids
    info = api.get(f"/api/runs/{fork}").json()
    assert info["parent_run_id"] == root and info["fork_round"] == 1
    assert [x["run_id"] for x in info["lineage"]] == [root, fork]
    s = api.get(f"/api/runs/{fork}/series").json()
    assert {"round": 1, "kind": "fork", "label": f"forked from {root}"} in s["marks"]
    parent = api.get(f"/api/runs/{root}/series").json()
    topic = next(iter(s["beliefs"]))
    upto = s["rounds"].index(1)
    assert s["beliefs"][topic]["mean"][:upto + 1] == parent["beliefs"][topic]["mean"][:upto + 1]
    cmp = api.get("/api/compare", params={"runs": f"{root},{fork}"}).json()
    assert cmp["base"] == root and set(cmp["series"]) == {root, fork}
    firsts = [d["first_round"] for d in cmp["divergence"] if d["first_round"] is not None]
    assert firsts and min(firsts) > 1  # identical up to the fork round, then not
    assert api.get("/api/compare", params={"runs": root}).status_code == 400
    # more than MAX_COMPARED runs are refused up front (a run named twice is read once)
    many = api.get("/api/compare", params={"runs": ",".join(f"r{i}" for i in range(21))})
    assert many.status_code == 400 and "at most 20 runs" in many.json()["error"]


def test_posts_are_ranked_by_reach_and_paged(api, folder, ids):
    root, _ = ids
    page = api.get(f"/api/runs/{root}/posts", params={"round": 2, "limit": 5}).json()
    run = open_run(folder / root)
    posts = run.posts
    assert page["total"] == int((posts["round"] == 2).sum())
    reach = run.exposures.groupby("post_id")["agent"].nunique()
    got = [p["reach"] for p in page["posts"]]
    assert got == sorted(got, reverse=True)
    for p in page["posts"]:
        assert p["reach"] == reach.get(p["post_id"], 0)
        assert p["author"] >= 0 and p["round"] == 2
    nxt = api.get(f"/api/runs/{root}/posts", params={"round": 2, "limit": 5,
                                                     "offset": 5}).json()
    assert not {p["post_id"] for p in nxt["posts"]} & {p["post_id"] for p in page["posts"]}
    one = api.get(f"/api/runs/{root}/posts/{page['posts'][0]['post_id']}").json()
    assert one["seen_by"]["total"] == page["posts"][0]["reach"]
    missing = api.get(f"/api/runs/{root}/posts/999999999")
    assert missing.status_code == 404 and "no post" in missing.json()["error"]
    assert api.get(f"/api/runs/{root}/posts", params={"limit": 0}).status_code == 400


def test_the_network_is_sampled_by_a_stated_rule(api, ids):
    root, _ = ids
    whole = api.get(f"/api/runs/{root}/network", params={"round": 3}).json()
    assert not whole["sampled"] and len(whole["nodes"]) == whole["total_nodes"] == 60
    assert len(whole["edges"]) == whole["total_edges"] > 0
    part = api.get(f"/api/runs/{root}/network", params={"round": 3, "max_nodes": 10}).json()
    assert part["sampled"] and len(part["nodes"]) == 10 and "sample" in part["rule"]
    shown = {n["id"] for n in part["nodes"]}
    assert all(a in shown and b in shown for a, b in part["edges"])
    again = api.get(f"/api/runs/{root}/network", params={"round": 3, "max_nodes": 10}).json()
    assert again["nodes"] == part["nodes"]  # the same sample every time
    for params, words in (({"topic": "taxes"}, "topic 'taxes': not in this run"),
                          ({"platform": "mastodon"}, "platform 'mastodon': not in this run"),
                          ({"round": "three"}, "round")):
        r = api.get(f"/api/runs/{root}/network", params=params)
        assert r.status_code in (400, 422) and words in r.json()["error"], r.text


def test_agents_pages_and_one_agents_trajectories(api, folder, ids):
    root, _ = ids
    page = api.get(f"/api/runs/{root}/agents", params={"limit": 7}).json()
    assert page["total"] == 60 and len(page["agents"]) == 7
    one = api.get(f"/api/runs/{root}/agents/4").json()
    b = open_run(folder / root).beliefs
    mine = b[b["agent"] == 4]
    for topic, t in one["beliefs"].items():
        assert t["position"] == pytest.approx(
            mine[mine["topic"] == topic].sort_values("round")["position"].tolist())
    assert api.get(f"/api/runs/{root}/agents/999").status_code == 404


def test_the_context_is_what_shoal_inspect_shows(api, folder, ids):
    root, _ = ids
    got = api.get(f"/api/runs/{root}/agents/4/context", params={"round": 2}).json()
    want = inspect_agent(str(folder / root), 4, 2)
    assert [c["platform"] for c in got["contexts"]] == [i.platform for i in want]
    for c, i in zip(got["contexts"], want, strict=True):
        assert c["system"] == i.assembled.system
        assert c["observation"] == i.assembled.observation
    bad = api.get(f"/api/runs/{root}/agents/4/context", params={"round": 99})
    assert bad.status_code == 400 and "99" in bad.json()["error"]


def test_sql_goes_through_the_analysts_guard(api, ids):
    root, _ = ids
    ok = api.post(f"/api/runs/{root}/sql", json={"sql": "SELECT count(*) AS n FROM agents"})
    assert ok.json()["rows"] == [[60]]
    cut = api.post(f"/api/runs/{root}/sql", json={"sql": "SELECT * FROM beliefs",
                                                  "limit": 3}).json()
    assert len(cut["rows"]) == 3 and cut["truncated"]
    for sql, words in (("DROP TABLE agents", "only SELECT"),
                       ("SELECT * FROM read_csv('/etc/passwd')", "read_csv"),
                       ("SELECT * FROM duckdb_databases()", "duckdb_databases"),
                       ("SELECT 1; SELECT 2", "one statement")):
        r = api.post(f"/api/runs/{root}/sql", json={"sql": sql})
        assert r.status_code == 400 and words in r.json()["error"], (sql, r.text)


def test_every_answer_says_what_its_page_may_load(api, ids, server):
    """A content security policy on every answer (refusals too): the app may run only
    its own scripts; a run's report none at all, sandboxed."""
    from shoal.web.app import APP_POLICY, REPORT_POLICY

    root, _ = ids
    with server.client(headers={"host": "example.org"}) as stranger:
        refused = stranger.get("/api/runs")
    answers = {"/": api.get("/"), "/static/app.js": api.get("/static/app.js"),
               "/api/runs": api.get("/api/runs"), "refused": refused,
               "report": api.get(f"/api/runs/{root}/report")}
    assert refused.status_code == 403
    for name, r in answers.items():
        assert r.headers["x-content-type-options"] == "nosniff", name
        assert r.headers["referrer-policy"] == "no-referrer", name
        assert r.headers["content-security-policy"] == (
            REPORT_POLICY if name == "report" else APP_POLICY), name
    assert "script-src 'self'" in APP_POLICY and "sandbox" in REPORT_POLICY
    assert "script" not in REPORT_POLICY  # (default-src 'none' covers scripts)
    assert "<script" not in answers["report"].text  # (so the policy takes nothing away)


def test_report_schedule_configs_and_check(api, ids):
    root, _ = ids
    report = api.get(f"/api/runs/{root}/report")
    assert report.status_code == 200 and report.text.startswith("<!DOCTYPE html>")
    assert api.get(f"/api/runs/{root}/schedule", params={"round": 1}).json()["pending"] == []
    assert {"path": "configs/q.yaml"} in api.get("/api/configs").json()["configs"]
    good = api.post("/api/check", json={"path": "configs/q.yaml"}).json()
    assert good["ok"] and "population" in good["resolved_yaml"]
    bad = api.post("/api/check", json={"yaml": "name: x\nseed: 1\nrounds: -2\n"}).json()
    assert not bad["ok"] and "pasted.yaml:3: rounds" in bad["error"]
    set_bad = api.post("/api/check", json={"path": "configs/q.yaml",
                                           "sets": ["rounds=zero"]}).json()
    assert not set_bad["ok"] and "rounds" in set_bad["error"]


def test_an_interview_is_answered_and_kept(api, ids):
    root, _ = ids
    r = api.post(f"/api/runs/{root}/agents/5/interview",
                 json={"question": "What do you think of the carbon tax?"}).json()
    assert r["status"] == "ok" and r["answer"] and r["stored"]
    kept = api.get(f"/api/runs/{root}/agents/5").json()["interviews"]
    assert [k["answer"] for k in kept] == [r["answer"]]
    empty = api.post(f"/api/runs/{root}/agents/5/interview", json={"question": "  "})
    assert empty.status_code == 400 and "empty" in empty.json()["error"]


def test_an_analysis_is_started_and_read_claim_by_claim(api, ids):
    root, _ = ids
    assert api.get(f"/api/runs/{root}/analyses").json()["analyses"] == []
    started = api.post(f"/api/runs/{root}/analyses", json={"question": "Did beliefs move?"})
    assert started.status_code == 200 and started.json()["job"]["kind"] == "analyse"
    job = _wait_job(api, started.json()["job"]["id"])
    assert job["returncode"] == 0, job["log_tail"]
    (listed,) = api.get(f"/api/runs/{root}/analyses").json()["analyses"]
    assert listed["question"] == "Did beliefs move?" and listed["status"] == "done"
    read = api.get(f"/api/runs/{root}/analyses/{listed['analysis_id']}").json()
    claims = [c for section in read["sections"] for c in section["claims"]]
    assert read["sections"] and claims
    assert all(c["verdict"] and c["sentence"] for c in claims)
    missing = api.get(f"/api/runs/{root}/analyses/an-unknown-id")
    assert missing.status_code == 404 and "no analysis 'an-unknown-id'" in missing.json()["error"]


def test_asking_a_rule_run_without_an_endpoint_says_how_to_start_the_server(folder, ids):
    """A server started without --base-url cannot interview or analyse a rule run: the
    answer says how to start it, not which flag to pass a command, and starts no job."""
    root, _ = ids
    plain = Folder(folder)
    asks = (lambda: plain.interview(root, 5, "What do you think?"),
            lambda: plain.start_analysis(root, "Did beliefs move?"))
    for ask in asks:
        with pytest.raises(WebError) as refused:
            ask()
        assert refused.value.status == 400
        assert "start it again with `shoal serve DIR --base-url URL" in str(refused.value)
    assert plain.jobs.all() == []


# ---------------------------------------------------------------- changing


def test_a_fork_from_the_api_equals_shoal_fork(api, folder, ids, tmp_path):
    root, _ = ids
    plan = {"round": 2, "sets": ["policy.engage_rate=0.3"], "seed": 7,
            "add": [{"round": 3, "kind": "event", "text": "A levy is announced",
                     "stance": {"carbon_tax": 0.8}}]}
    made = api.post(f"/api/runs/{root}/fork", json=plan)
    assert made.status_code == 200, made.text
    fork_id = made.json()["run_id"]
    _wait_job(api, made.json()["job"]["id"])
    (tmp_path / "add.yaml").write_text(yaml.safe_dump(plan["add"]))
    cli = run_cli(["fork", str(folder / root), "--round", "2", "--set",
                   "policy.engage_rate=0.3", "--seed", "7", "--intervene",
                   str(tmp_path / "add.yaml"), "--out", str(tmp_path), "--quiet"])
    assert cli.returncode == 0, cli.stderr
    (other,) = [p for p in tmp_path.iterdir() if (p / "run.json").is_file()]
    assert tables_differ(folder / fork_id / "trajectory.duckdb",
                         other / "trajectory.duckdb") == []
    bad = api.post(f"/api/runs/{root}/fork", json={"round": 2, "add": [{"round": 1,
                                                                        "kind": "event"}]})
    assert bad.status_code == 400 and "add: entry 0" in bad.json()["error"]
    assert api.post(f"/api/runs/{root}/fork", json={"round": 2, "sets": ["nope=1"]}
                    ).json()["error"] == "--set nope: unknown field 'nope'"
    assert "no checkpoint of round 9" in api.post(f"/api/runs/{root}/fork",
                                                  json={"round": 9}).json()["error"]


def _wait_job(api: httpx.Client, job_id: int, timeout: float = 300) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        job = next(j for j in api.get("/api/jobs").json()["jobs"] if j["id"] == job_id)
        if not job["running"]:
            return job
        assert time.monotonic() < deadline, job
        time.sleep(0.2)


@pytest.mark.slow
def test_a_started_run_streams_its_rounds_stops_and_resumes(api, folder):
    before = set(_runs(folder))
    started = api.post("/api/start", json={"path": "configs/q.yaml",
                                           "sets": ["population.size=200", "rounds=400"]})
    assert started.status_code == 200, started.text
    run_id = started.json()["run_id"]
    assert set(_runs(folder)) - before == {run_id}
    seen: list[int] = []
    with api.stream("GET", f"/api/runs/{run_id}/events") as events:
        for line in events.iter_lines():
            if line.startswith("data:"):
                seen.append(json.loads(line[5:])["rounds_done"])
                if len({s for s in seen if s}) >= 3:
                    break
    assert seen == sorted(seen) and len(set(seen)) >= 3  # rounds arrive as they commit
    live = api.get(f"/api/runs/{run_id}/series").json()
    assert live["rounds"] and max(live["rounds"]) >= 1  # read from the live mirror
    assert api.post(f"/api/runs/{run_id}/stop", json={}).json()["ok"]
    job = _wait_job(api, started.json()["job"]["id"])
    assert job["returncode"] == 130, job["log_tail"]
    info = api.get(f"/api/runs/{run_id}").json()
    assert info["status"] == "interrupted" and info["rounds_done"] < 400  # (shoal runs: a
    # run stopped before its last round is `interrupted`; `shoal resume` continues it)
    assert api.post(f"/api/runs/{run_id}/stop", json={}).status_code == 409
    resumed = api.post(f"/api/runs/{run_id}/resume", json={}).json()
    assert resumed["job"]["kind"] == "resume"
    api.post(f"/api/runs/{run_id}/stop", json={})
    _wait_job(api, resumed["job"]["id"])


def test_a_bad_config_starts_nothing(api, folder):
    before = _listing(folder)
    r = api.post("/api/start", json={"yaml": "name: x\nrounds: 0\n"})
    assert r.status_code == 400 and "pasted.yaml:2: rounds" in r.json()["error"]
    r = api.post("/api/start", json={"path": "configs/none.yaml"})
    error = r.json()["error"]
    assert r.status_code == 400 and "not found" in error
    # (named as the folder's reader knows it: answers never say where the folder lies)
    assert "configs/none.yaml" in error and str(folder.resolve()) not in error, error
    assert _listing(folder) == before


# ---------------------------------------------------------------- safety


@pytest.fixture(scope="module")
def outside(tmp_path_factory, folder) -> Path:
    """A run and a config outside the served folder, with symbolic links to them inside."""
    out = tmp_path_factory.mktemp("outside")
    run = next(iter(_runs(folder).values()))
    shutil.copytree(run, out / "secret-run")
    (out / "secret.yaml").write_text((folder / "configs" / "q.yaml").read_text())
    os.symlink(out / "secret-run", folder / "linked-run")
    os.symlink(out / "secret.yaml", folder / "configs" / "linked.yaml")
    yield out
    (folder / "linked-run").unlink()
    (folder / "configs" / "linked.yaml").unlink()


def test_the_listing_opens_no_pipe_and_follows_no_file_link_out(folder, tmp_path):
    """A run folder whose trajectory.duckdb is a pipe (opening it blocks: the listing's
    thread, then every thread of the server's pool, hung), whose config.yaml and
    trajectory link outside the served folder, or whose run.json does: the listing
    answers, reads nothing behind the links, and says what is wrong."""
    import threading

    served = tmp_path / "served"
    served.mkdir()
    run = next(iter(_runs(folder).values()))
    shutil.copytree(run, served / run.name)
    secret = tmp_path / "secret"
    shutil.copytree(run, secret)
    for name in ("piped", "linked", "meta"):
        (served / name).mkdir()
    shutil.copy(run / "run.json", served / "piped" / "run.json")
    os.mkfifo(served / "piped" / "trajectory.duckdb")
    shutil.copy(run / "run.json", served / "linked" / "run.json")
    os.symlink(secret / "config.yaml", served / "linked" / "config.yaml")
    os.symlink(secret / "trajectory.duckdb", served / "linked" / "trajectory.duckdb")
    os.symlink(secret / "run.json", served / "meta" / "run.json")
    listed: list = []
    worker = threading.Thread(target=lambda: listed.append(Folder(served).runs()),
                              daemon=True)
    worker.start()
    worker.join(60)
    assert listed, "the listing blocked"
    rows = {r["run_id"]: r for r in listed[0]["runs"]}
    assert "meta" not in rows  # (its run.json is read from outside: not listed)
    assert rows["piped"]["llm_calls"] is None and rows["piped"]["status"] == "damaged"
    assert rows["linked"]["agents"] is None and rows["linked"]["llm_calls"] is None
    assert "symbolic link that leads outside" in rows["linked"]["problem"]
    assert rows[run.name]["llm_calls"] == 0 and rows[run.name]["problem"] is None


def test_answers_name_files_inside_the_folder_not_where_it_lies(folder, tmp_path):
    """A damaged run's errors, on its own pages and in the listing, name its files as
    the folder's reader knows them (`RUN/trajectory.duckdb`), not by absolute path."""
    served = tmp_path / "served"
    served.mkdir()
    run = next(iter(_runs(folder).values()))
    shutil.copytree(run, served / "damaged")
    (served / "damaged" / "trajectory.duckdb").write_bytes(b"not a database" * 100)
    server = Server(Folder(served))
    try:
        with server.client() as api:
            answers = [api.get("/api/runs/damaged"), api.get("/api/runs/damaged/series"),
                       api.get("/api/runs")]
    finally:
        server.close()
    errors = [r.json()["error"] for r in answers[:2]]
    errors += [r["problem"] for r in answers[2].json()["runs"] if r["run_id"] == "damaged"]
    assert len(errors) == 3
    for error in errors:
        assert error.startswith("damaged/trajectory.duckdb: damaged"), error
        assert str(served) not in error and str(tmp_path) not in error, error


def test_no_path_leads_outside_the_folder(api, outside):
    before = _listing(outside)
    for run in ("..", "...", "%2e%2e", "..%2F..%2Fetc", "linked-run", "%2Fetc",
                "a%00b", "-rf"):
        r = api.get(f"/api/runs/{run}/series")
        assert r.status_code in (403, 404), (run, r.status_code, r.text)
        assert "error" in r.json()
    assert api.get("/api/runs/linked-run").status_code == 403
    for path in ("../outside/secret.yaml", "/etc/passwd", str(outside / "secret.yaml"),
                 "configs/linked.yaml", "configs/../../x.yaml"):
        r = api.post("/api/check", json={"path": path})
        assert r.status_code == 403 and "served folder" in r.json()["error"], (path, r.text)
        assert api.post("/api/start", json={"path": path}).status_code == 403
    assert "linked-run" not in {r["run_id"] for r in api.get("/api/runs").json()["runs"]}
    assert _listing(outside) == before


@pytest.fixture
def elsewhere(tmp_path_factory, folder) -> Iterator[Path]:
    """A profile file outside the folder; inside it, data/ with a copy of the profiles
    and a symbolic link to the outside file."""
    out = tmp_path_factory.mktemp("elsewhere")
    text = (ROOT / "tests" / "data" / "profiles" / "shoal_profiles.csv").read_text()
    (out / "profiles.csv").write_text(text.replace("Climate scientist.", "SECRET BIO"))
    (folder / "data").mkdir()
    (folder / "data" / "profiles.csv").write_text(text)
    os.symlink(out / "profiles.csv", folder / "data" / "linked.csv")
    yield out
    shutil.rmtree(folder / "data")


PROFILES = "name: leak\nrounds: 2\ntopics: [climate, housing]\npopulation: {file: %s}\n"


def test_a_config_naming_a_file_outside_the_folder_is_refused(api, folder, ids, elsewhere):
    """A pasted config, or one with --set fields, that names a path outside the folder is
    refused by check and start alike, naming the field, before the path is opened: the
    answer for an outside file that exists equals the one for a file that does not."""
    escape = "../" * 40 + str(elsewhere / "profiles.csv").lstrip("/")
    before, outside_before = _listing(folder), _listing(elsewhere)
    answers = set()
    for given in (str(elsewhere / "profiles.csv"), str(elsewhere / "none.csv"), escape,
                  "../data/linked.csv", "/etc/passwd"):
        for endpoint in ("/api/check", "/api/start"):
            r = api.post(endpoint, json={"yaml": PROFILES % given})
            assert r.status_code == 400, (endpoint, given, r.text)
            error = r.json()["error"]
            assert "pasted.yaml:4: population.file: names a file or folder outside the " \
                   "served folder" in error, error
            assert str(elsewhere) not in error and "SECRET" not in error
            answers.add(error)
    assert len(answers) == 1  # (nothing tells an existing outside file from a missing one)
    hidden = api.post("/api/start", json={"yaml": PROFILES % "!!binary L2V0Yy9wYXNzd2Q="})
    assert hidden.status_code == 400 and "the YAML tag !!binary is not supported" in \
        hidden.json()["error"]  # (a path in base64 is no path: the tag is refused)
    for sets in (["population={file: /etc/passwd}"],
                 [f"initial_stances.file={elsewhere / 'profiles.csv'}"]):
        for endpoint in ("/api/check", "/api/start"):
            r = api.post(endpoint, json={"path": "configs/q.yaml", "sets": sets})
            assert r.status_code == 400 and "--set" in r.json()["error"], r.text
    fields = {
        "graph: {kind: edgelist, file: /etc/passwd}": "graph.file",
        "memory: {graph: {documents: [a.md, /etc/passwd]}}": "memory.graph.documents.1",
        "memory: {graph: {scenario: ../..}}": "memory.graph.scenario",
        "llm: {providers: [{base_urls: [loopback], model: m, tokenizer: /etc/t.json}]}":
            "llm.providers.0.tokenizer",
        "llm: {providers: [{base_urls: [loopback], model: m}], cache_dir: ~/cache}":
            "llm.cache_dir",
        "output: {dir: ../elsewhere}": "output.dir",
        "interventions: [{round: 1, kind: set, values: {llm.cache_dir: /tmp}}]":
            "interventions.0.values.llm.cache_dir",
        "experiment: {arms: {a: {}, b: {overrides: {population.file: /etc/passwd}}}}":
            "experiment.arms.b.overrides.population.file"}
    for extra, field in fields.items():
        r = api.post("/api/check", json={"yaml": "name: x\nrounds: 2\ntopics: [a]\n"
                                                  f"population: {{size: 5}}\n{extra}\n"})
        assert r.status_code == 400 and f"pasted.yaml:5: {field}: names a file or " \
            "folder outside" in r.json()["error"], (extra, r.text)
    assert _listing(folder) == before and _listing(elsewhere) == outside_before


def test_a_config_naming_a_file_inside_the_folder_runs(api, folder, ids, elsewhere):
    """Relative paths in pasted YAML resolve against configs/, where it is kept."""
    yaml_text = PROFILES % "../data/profiles.csv"
    checked = api.post("/api/check", json={"yaml": yaml_text}).json()
    assert checked["ok"], checked
    assert f"file: {folder.resolve() / 'data' / 'profiles.csv'}" in checked["resolved_yaml"]
    started = api.post("/api/start", json={"yaml": yaml_text})
    assert started.status_code == 200, started.text
    job = _wait_job(api, started.json()["job"]["id"])
    assert job["returncode"] == 0, job["log_tail"]
    agent = api.get(f"/api/runs/{started.json()['run_id']}/agents/0").json()["agent"]
    assert agent["name"] == "Maya Chen" and agent["bio"] == "Climate scientist."


def test_a_fork_naming_a_path_outside_the_folder_is_refused(api, folder, ids):
    root, _ = ids
    before = _listing(folder)
    for plan, said in (
            ({"sets": ["llm.cache_dir=/tmp/shared-cache"]}, "--set llm.cache_dir: names"),
            ({"sets": ["memory.graph.documents=[../../x.md]"]},
             "--set memory.graph.documents: memory.graph.documents.0: names"),
            ({"add": [{"round": 3, "kind": "set", "values": {"llm.cache_dir": "/tmp/c"}}]},
             "add: entry 0: values.llm.cache_dir: names")):
        r = api.post(f"/api/runs/{root}/fork", json={"round": 2, **plan})
        assert r.status_code == 400 and said in r.json()["error"], (plan, r.text)
    assert _listing(folder) == before


def test_malformed_requests_are_refused_naming_the_field(api, folder, ids):
    """Numbers out of range and malformed bodies: 400 or 422 naming the field, never a
    500 and never a quietly different answer."""
    root, _ = ids
    last = api.get(f"/api/runs/{root}").json()["rounds_done"]
    for path, params, field in (
            ("network", {"round": 1, "max_nodes": -1}, "max_nodes"),
            ("network", {"round": last + 1}, "round"),
            ("network", {"round": -1}, "round"),
            ("posts", {"round": -1}, "round"),
            ("posts", {"round": last + 1}, "round"),
            ("posts", {"offset": -1}, "offset"),
            ("posts", {"offset": 10**22}, "offset"),
            ("posts", {"limit": 0}, "limit"),
            ("agents", {"limit": -5}, "limit"),
            ("knowledge", {"round": last + 1}, "round"),
            ("schedule", {"round": -1}, "round")):
        r = api.get(f"/api/runs/{root}/{path}", params=params)
        assert r.status_code == 400 and r.json()["error"].startswith(f"{field}: must be"), \
            (path, params, r.text)
    assert api.get(f"/api/runs/{root}/network", params={"round": 0, "max_nodes": 10}
                   ).json()["sampled"]
    r = api.post(f"/api/runs/{root}/sql", json={"sql": "SELECT 1", "limit": -5})
    assert r.status_code == 400 and r.json()["error"].startswith("limit: must be")
    before = _listing(folder)
    for body, field in (({"round": 2, "move": [{"ref": "x", "round": "y"}]}, "move.0.round"),
                        ({"round": 2, "move": [{"ref": "x"}]}, "move.0.round"),
                        ({"round": 2, "move": [{"round": 3}]}, "move.0.ref"),
                        ({"round": 2, "sets": [3]}, "sets.0"),
                        ({"round": "two"}, "round")):
        r = api.post(f"/api/runs/{root}/fork", json=body)
        assert r.status_code == 422 and f"body.{field}:" in r.json()["error"], (body, r.text)
    # (the MCP tools call the same service: it refuses what the REST bodies' types would)
    served = Folder(folder)
    with pytest.raises(WebError, match=r"^move\.0\.round: must be a whole number"):
        served.fork(root, 2, move=[{"ref": "x", "round": "y"}])
    with pytest.raises(WebError, match=r"^round: must be >= 0"):
        served.fork(root, -1)
    with pytest.raises(WebError, match=r"^name: must be text on one line, got 'a\\nb'"):
        served.fork(root, 2, name="a\nb")
    with pytest.raises(WebError, match=r"^drop\.0: must be an intervention's name or index"):
        served.fork(root, 2, drop=["x" * 100_000])
    assert _listing(folder) == before


def test_a_config_value_yaml_cannot_read_is_an_error_not_a_crash(api, folder):
    """A date that does not exist, an integer too long to read, a tag that does not fit:
    check says what is wrong (ok: false, with the line), start refuses (400)."""
    before = _listing(folder)
    for line in ("start_time: 2026-02-30", f"seed: {'9' * 5000}", "seed: !!int abc"):
        text = f"name: x\nrounds: 2\ntopics: [a]\npopulation: {{size: 5}}\n{line}\n"
        r = api.post("/api/check", json={"yaml": text})
        assert r.status_code == 200 and not r.json()["ok"], (line, r.text)
        assert r.json()["error"].startswith("pasted.yaml:5: "), (line, r.text)
        r = api.post("/api/start", json={"yaml": text})
        assert r.status_code == 400 and r.json()["error"].startswith("pasted.yaml:5: ")
    assert _listing(folder) == before


def test_a_page_elsewhere_can_neither_reach_nor_forge(api, ids):
    root, _ = ids
    r = api.get("/api/runs", headers={"host": "attacker.example:8765"})
    assert r.status_code == 403 and "127.0.0.1" in r.json()["error"]
    r = api.get("/api/runs", headers={"host": "localhost:1@attacker.example"})
    assert r.status_code == 403  # (the port must be digits)
    r = api.post(f"/api/runs/{root}/sql", json={"sql": "SELECT 1"},
                 headers={"origin": "http://attacker.example"})
    assert r.status_code == 403 and "attacker.example" in r.json()["error"]
    r = api.post(f"/api/runs/{root}/stop", content="x=1",
                 headers={"content-type": "application/x-www-form-urlencoded"})
    assert r.status_code == 415 and "JSON" in r.json()["error"]
    r = api.post("/api/check", json={"yaml": "x" * (5 * 2**20)})
    assert r.status_code == 413 and "larger than 4 MiB" in r.json()["error"]


def test_a_chunked_body_above_the_limit_is_refused(tmp_path):
    """A body sent without a Content-Length (chunked) is held to the same 4 MiB as one
    with it: refused (413) before it is parsed, not read whole into memory; a small
    chunked body is read as usual."""
    def chunks(text: str, size: int = 2**16) -> Iterator[bytes]:
        data = text.encode()
        for start in range(0, len(data), size):
            yield data[start:start + size]

    s = Server(Folder(tmp_path))
    try:
        with s.client() as c:
            big = json.dumps({"yaml": "x" * (5 * 2**20)})
            r = c.post("/api/check", content=chunks(big),
                       headers={"content-type": "application/json"})
            assert r.status_code == 413 and "larger than 4 MiB" in r.json()["error"], r.text
            small = json.dumps({"yaml": "name: x\nrounds: 2\ntopics: [a]\n"
                                        "population: {size: 5}\n"})
            r = c.post("/api/check", content=chunks(small, 7),
                       headers={"content-type": "application/json"})
            assert r.status_code == 200 and r.json()["ok"], r.text
    finally:
        s.close()
    assert list(tmp_path.iterdir()) == []


def test_a_link_out_inside_a_run_and_a_loop_of_links_are_refused(tmp_path):
    """A run whose config (or any file under it) is a symbolic link out of the folder is
    refused (403) before anything of it is read, not shown; a loop of links among the
    runs is left out of the list (it failed with a 500) and refused by name."""
    folder = tmp_path / "runs"
    secret = tmp_path / "secret.yaml"
    secret.write_text("SECRET_VALUE: 1\n")
    for name, link in (("config-out", "config.yaml"), ("deep-out", "checkpoints/log/x")):
        run = folder / name
        (run / "checkpoints" / "log").mkdir(parents=True)
        (run / "run.json").write_text(json.dumps({"run_id": name, "status": "finished",
                                                  "rounds_done": 1, "rounds": 1}))
        os.symlink(secret, run / link)
    os.symlink("loop-b", folder / "loop-a")
    os.symlink("loop-a", folder / "loop-b")
    s = Server(Folder(folder))
    try:
        with s.client() as c:
            r = c.get("/api/runs")
            assert r.status_code == 200, r.text
            assert {e["run_id"] for e in r.json()["runs"]} == {"config-out", "deep-out"}
            for path in ("/api/runs/config-out", "/api/runs/config-out/report",
                         "/api/runs/deep-out/series", "/api/runs/loop-a",
                         "/api/runs/loop-b/events"):
                r = c.get(path)
                assert r.status_code == 403 and "SECRET" not in r.text, (path, r.text)
            assert "config.yaml is a symbolic link" in c.get("/api/runs/config-out").text
    finally:
        s.close()


def test_a_token_is_checked_on_every_request(folder, ids):
    root, _ = ids
    s = Server(Folder(folder), token="s3cret-for-tests")
    try:
        with s.client() as c:
            for path in ("/api/info", "/api/runs", f"/api/runs/{root}/series",
                         f"/api/runs/{root}/events", "/mcp"):
                r = c.get(path)
                assert r.status_code == 401 and "token" in r.json()["error"], path
            assert c.get("/api/runs", headers={"authorization": "Bearer wrong"}
                         ).status_code == 401
            assert c.get("/api/runs", params={"token": "s3cret-for-tests"}).status_code == 401
            ok = c.get("/api/runs", headers={"authorization": "Bearer s3cret-for-tests"})
            assert ok.status_code == 200
            with c.stream("GET", f"/api/runs/{root}/events",
                          params={"token": "s3cret-for-tests"}) as events:
                assert events.status_code == 200
                assert any(line.startswith("event: hello") for line in
                           _first_lines(events, 4))
            assert c.get("/").status_code == 200  # the page itself holds no data
    finally:
        s.close()


def _first_lines(response: httpx.Response, n: int) -> list[str]:
    lines = []
    for line in response.iter_lines():
        lines.append(line)
        if len(lines) >= n:
            break
    return lines


def test_read_only_refuses_every_change_and_writes_nothing(folder, ids):
    root, _ = ids
    s = Server(Folder(folder, read_only=True, base_url="loopback", model="m"))
    before = _listing(folder)
    try:
        with s.client() as c:
            assert c.get("/api/info").json()["read_only"] is True
            for path, body in ((f"/api/runs/{root}/fork", {"round": 1}),
                               (f"/api/runs/{root}/stop", {}),
                               (f"/api/runs/{root}/resume", {}),
                               (f"/api/runs/{root}/agents/1/interview", {"question": "hi"}),
                               (f"/api/runs/{root}/analyses", {"question": "why?"}),
                               ("/api/start", {"path": "configs/q.yaml"})):
                r = c.post(path, json=body)
                assert r.status_code == 403 and "read-only" in r.json()["error"], path
            assert c.get(f"/api/runs/{root}/series").status_code == 200
            assert c.post(f"/api/runs/{root}/sql", json={"sql": "SELECT 1"}
                          ).status_code == 200
    finally:
        s.close()
    assert _listing(folder) == before


# ---------------------------------------------------------------- runs no process writes


def _first_event(client: httpx.Client, run_id: str) -> dict:
    with client.stream("GET", f"/api/runs/{run_id}/events") as events:
        for line in events.iter_lines():
            if line.startswith("data:"):
                return json.loads(line[5:])
    raise AssertionError("the event stream ended without an event")


def test_the_event_stream_says_a_stopped_run_is_not_running(tmp_path):
    """run.json says `running` until its process ends the run; a run stopped or killed
    midway keeps that line. The event stream says what GET /api/runs/ID says (it was
    `running`, so a page showed a stopped run running, with its Stop button)."""
    made = run_cli(["run", str(CONFIGS / "quickstart.yaml"), "--out", str(tmp_path),
                    "--quiet", *SMALL])
    assert made.returncode == 0, made.stderr
    (run,) = [p for p in tmp_path.iterdir() if (p / "run.json").is_file()]
    meta = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**meta, "status": "running"}))  # (as killed)
    server = Server(Folder(tmp_path))
    try:
        with server.client() as c:
            said = c.get(f"/api/runs/{run.name}").json()["status"]
            assert said != "running"
            assert _first_event(c, run.name)["status"] == said
    finally:
        server.close()


def test_no_second_writer_while_a_job_of_the_server_writes_the_run(folder, ids):
    """While a job this server started holds a run (here a stand-in that never ends), an
    analysis or an interview of it is refused with 409 (an analysis started then failed
    on the file's lock with an internal error; an interview was a bare HTTP 500)."""
    root, _ = ids
    served = Folder(folder, base_url="loopback", model="m")
    server = Server(served)
    job = served.jobs.start("analyse", ["serve", str(folder), "--port", str(_free_port())],
                            wait_s=0)
    job.run_id = root
    try:
        with server.client() as c:
            started = c.post(f"/api/runs/{root}/analyses", json={"question": "why?"})
            assert started.status_code == 409, started.text
            assert "being written" in started.json()["error"]
            asked = c.post(f"/api/runs/{root}/agents/1/interview", json={"question": "hi"})
            assert asked.status_code == 409, asked.text
            assert "being written" in asked.json()["error"]
    finally:
        job.proc.kill()
        job.proc.wait()
        server.close()


def test_a_folder_renamed_away_while_a_run_is_checked_for_links_is_passed_over(
        tmp_path, monkeypatch):
    """A checkpoint is written into a temporary folder and renamed: one that vanishes
    while the server looks for symbolic links under the run is no error (it was a 500
    on GET /api/runs/ID while the run ran)."""
    import shoal.web.service as service

    run = tmp_path / "r1"
    (run / "checkpoints" / "state" / ".round-000043.tmp").mkdir(parents=True)
    (run / "run.json").write_text("{}")
    real = os.scandir

    def racing(path):
        if str(path).endswith(".tmp"):
            (Path(path)).rmdir()  # (renamed by the writer just now)
        return real(path)

    monkeypatch.setattr(service.os, "scandir", racing)
    assert Folder(tmp_path)._link_out(run) is None


def test_a_run_whose_population_has_no_size_shows_its_agent_count(folder, ids, tmp_path):
    """A population read from a file of profiles has no `size` in the config: the runs
    list and the run's page count its agents from the newest checkpoint."""
    from shoal.store.run_dir import RunDir
    from shoal.web.service import _agents

    root, _ = ids
    copy = tmp_path / root
    shutil.copytree(folder / root, copy)
    config = yaml.safe_load((copy / "config.yaml").read_text())
    size = config["population"].pop("size")
    (copy / "config.yaml").write_text(yaml.safe_dump(config))
    assert _agents(RunDir(copy)) == size == 60
    shutil.rmtree(copy / "checkpoints")
    assert _agents(RunDir(copy)) is None  # (nothing to count from: shown as unknown)


def test_a_run_folder_named_outside_the_ids_is_listed_with_why_it_cannot_open(folder, ids,
                                                                             api):
    """A run copied under a name the pages refuse (spaces, accents) is listed saying so."""
    root, _ = ids
    odd = folder / "café run"
    shutil.copytree(folder / root, odd)
    try:
        rows = {r["run_id"]: r for r in api.get("/api/runs").json()["runs"]}
        refused = api.get("/api/runs/café run")
    finally:
        shutil.rmtree(odd)
    assert refused.status_code == 403
    assert "rename the folder to open it here" in rows["café run"]["problem"]
    assert not rows[root]["problem"]


def test_a_server_runs_a_bounded_number_of_commands_at_once(tmp_path, monkeypatch):
    """Past MAX_RUNNING commands running, the next start is refused (429) and starts no
    process; once one has finished, a start goes through again."""
    import shoal.web.jobs as jobs_module
    from shoal.web.jobs import Jobs, TooManyJobs

    monkeypatch.setattr(jobs_module, "MAX_RUNNING", 2)
    jobs = Jobs(tmp_path)
    serving = ["llm-serve", "--host", "127.0.0.1", "--port", "0"]  # (runs until stopped)
    started = [jobs.start("serve", serving, wait_s=0.1) for _ in range(2)]
    try:
        with pytest.raises(TooManyJobs, match="at most 2 at once") as refused:
            jobs.start("serve", serving, wait_s=0.1)
        assert refused.value.status == 429 and len(jobs.all()) == 2
        started[0].proc.kill()
        started[0].proc.wait(30)
        started.append(jobs.start("serve", serving, wait_s=0.1))
        assert len([j for j in jobs.all() if j.running]) == 2
    finally:
        for job in started:
            job.proc.kill()
            job.proc.wait(30)
