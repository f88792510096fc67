"""Forks: start from a checkpointed round, never touch the parent, reproduce it exactly
when nothing changes, diverge only after the fork round when something does."""

from __future__ import annotations

import hashlib
from pathlib import Path

import duckdb
import pandas as pd
import pytest
import yaml

from shoal.cli.main import main
from shoal.runs.fork import fork_run
from shoal.store.tables import TableSpec
from tests.helpers import declared, fork_plan, make_config, run_config

K = 5
ROUNDS = 10


@pytest.fixture(scope="module")
def parent(tmp_path_factory):
    """A finished parent run (quick-start model, smaller)."""
    from tests.conftest import CONFIGS

    data = yaml.safe_load((CONFIGS / "quickstart.yaml").read_text())
    data.update(rounds=ROUNDS, population={"size": 300, "groups": [
        {"name": "activists", "fraction": 0.1}]},
        memory={"context": {"build_for": "all"}, "recent_rounds": 2})
    return run_config(make_config(data, tmp_path_factory.mktemp("parent")))


def _digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _frame(db: Path, sql: str) -> pd.DataFrame:
    con = duckdb.connect(str(db), read_only=True)
    try:
        df = con.sql(sql).df()
    finally:
        con.close()
    for col in df.columns:
        if isinstance(df[col].dtype, pd.CategoricalDtype):
            df[col] = df[col].astype(str)
    return df


def _after(db: Path, table: str | TableSpec, k: int, posts_before: int | None = None
           ) -> pd.DataFrame:
    """A table's rows of rounds after k (posts: ids from `posts_before` on), without its
    volatile columns."""
    spec = table if isinstance(table, TableSpec) else declared(db)[table]
    sql = f"SELECT * FROM {spec.name} WHERE NOT ({spec.upto(k, posts_before)}) ORDER BY ALL"
    df = _frame(db, sql).reset_index(drop=True)
    return df.drop(columns=[c for c in spec.volatile if c in df.columns])


def _fork(parent, tmp_path, **kwargs):
    run = fork_run(parent.dir.root, K, fork_plan(**kwargs), out=tmp_path)
    try:
        run.run()
    finally:
        run.close()
    return run


def test_no_change_fork_reproduces_the_parent(parent, tmp_path):
    """Same seed, no change: every row after K equals the parent's; the parent's files are
    byte-identical before and after; the fork holds no row of rounds <= K."""
    before = _digest(parent.dir.root)
    fork = _fork(parent, tmp_path)
    assert _digest(parent.dir.root) == before
    lineage = fork.dir.read_meta()["lineage"]
    assert (lineage["parent_run_id"], lineage["fork_round"]) == (parent.dir.run_id, K)
    n_posts = lineage["parent_posts"]
    written = 0
    for spec in declared(parent.dir.db).values():  # every table a fork inherits
        if spec.lineage != "inherit":
            continue
        theirs, mine = _after(parent.dir.db, spec, K, n_posts), _after(fork.dir.db, spec, K,
                                                                       n_posts)
        assert theirs.equals(mine), spec.name
        written += len(mine) > 0
    assert written >= 8  # (posts, beliefs, actions, ... : the comparison is not vacuous)
    assert _frame(fork.dir.db, f"SELECT * FROM beliefs WHERE round <= {K}").empty
    assert _frame(fork.dir.db, "SELECT parent_run_id, fork_round FROM run").values.tolist() == [
        [parent.dir.run_id, K]]


def test_fork_with_an_event_differs_only_after_k(parent, tmp_path):
    """An event at K+1: beliefs through K are the parent's (the fork starts from them),
    and from K+1 on the trajectories differ."""
    plan = tmp_path / "what-if.yaml"
    plan.write_text(yaml.safe_dump([{"kind": "event", "round": K + 1, "duration": 3,
                                     "text": "BREAKING: a carbon tax rebate for every home",
                                     "stance": {"carbon_tax": 1.0}}]))
    fork = _fork(parent, tmp_path, intervene=plan)
    first = _frame(fork.dir.db, "SELECT min(round) FROM beliefs").iloc[0, 0]
    assert first == K + 1
    # The fork's starting state is the parent's end of K.
    from shoal.world.persistence import restore_world
    start, _ = restore_world(fork.dir.checkpoints, K)
    end_k = _frame(parent.dir.db, f"SELECT agent, topic, position FROM beliefs "
                                  f"WHERE round = {K} ORDER BY agent, topic")
    assert (start.beliefs.position.ravel() == end_k["position"].to_numpy()).all()
    for r in (K + 1, ROUNDS):
        a = _frame(parent.dir.db, f"SELECT * FROM beliefs WHERE round = {r} ORDER BY ALL")
        b = _frame(fork.dir.db, f"SELECT * FROM beliefs WHERE round = {r} ORDER BY ALL")
        assert not a.equals(b), r
    assert _frame(fork.dir.db, "SELECT kind, round FROM interventions").values.tolist() == [
        ["event", K + 1]]


def test_new_seed_diverges_after_k(parent, tmp_path):
    """--seed changes the draws from K+1 on."""
    fork = _fork(parent, tmp_path, seed=parent.cfg.seed + 1)
    a = _frame(parent.dir.db, f"SELECT * FROM actions WHERE round = {K + 1} ORDER BY ALL")
    b = _frame(fork.dir.db, f"SELECT * FROM actions WHERE round = {K + 1} ORDER BY ALL")
    assert not a.equals(b)


def test_set_changes_a_parameter_for_the_fork(parent, tmp_path):
    """--set policy.post_rate=0.6 makes the fork post much more after K."""
    fork = _fork(parent, tmp_path, sets=["policy.post_rate=0.6"])
    def posts(db):
        return _frame(db, f"SELECT count(*) AS n FROM actions WHERE action = 'post' "
                          f"AND round > {K}").iloc[0, 0]
    assert posts(fork.dir.db) > 2 * posts(parent.dir.db)
    assert fork.cfg.policy.post_rate == 0.6


@pytest.mark.parametrize(("args", "message"), [
    (["--round", "99"], "has no checkpoint of round 99"),
    (["--round", str(K), "--set", "population.size=10"], "cannot be changed in a fork"),
    (["--round", str(K), "--set", "policy.post_rate=3"], "policy.post_rate: must be <= 1"),
])
def test_bad_fork_arguments_exit_2(parent, tmp_path, capsys, args, message):
    """Clear errors, exit 2, nothing written, parent untouched."""
    before = _digest(parent.dir.root)
    out = tmp_path / "forks"
    assert main(["fork", str(parent.dir.root), *args, "--out", str(out), "--quiet"]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists() or not any(out.iterdir())
    assert _digest(parent.dir.root) == before


@pytest.mark.parametrize(("entry", "message"), [
    ({"kind": "remove_agents", "round": K + 1, "target": {"ids": [9999]}}, "no agent 9999"),
    ({"kind": "beliefs", "round": K + 1, "topic": "carbon_tax", "set": 0.5,
      "target": {"groups": ["ghosts"]}}, "unknown groups ['ghosts']"),
    ({"kind": "event", "round": K, "text": "too early"}, "can only schedule rounds after"),
])
def test_bad_fork_interventions_exit_2(parent, tmp_path, capsys, entry, message):
    """An intervention naming a missing agent or group, or scheduled too early."""
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump([entry]))
    out = tmp_path / "forks"
    assert main(["fork", str(parent.dir.root), "--round", str(K), "--intervene", str(plan),
                 "--out", str(out), "--quiet"]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists() or not any(out.iterdir())


def test_unknown_run_exit_2(tmp_path, capsys):
    """Forking something that is not a run."""
    assert main(["fork", str(tmp_path / "nope"), "--round", "1"]) == 2
    assert "no such run directory" in capsys.readouterr().err


def test_fork_from_round_zero_and_a_fork_of_a_fork(parent, tmp_path):
    """Round 0 is always kept; a fork can itself be forked, and both reproduce the
    parent when nothing changes."""
    zero = fork_run(parent.dir.root, 0, out=tmp_path / "a")
    zero.run()
    zero.close()
    second = fork_run(zero.dir.root, 7, out=tmp_path / "b")
    second.run()
    second.close()
    a = _after(parent.dir.db, "beliefs", 7)
    b = _after(second.dir.db, "beliefs", 7)
    assert a.equals(b)
    assert second.dir.read_meta()["lineage"]["root_run_id"] == parent.dir.run_id


def test_forking_a_fork_before_its_branch_points_to_its_parent(parent, tmp_path, capsys):
    """A fork's rounds before its fork round are its parent's (no checkpoint of them in
    the fork): asked for one, the error names the parent to fork instead, not only the
    rounds kept."""
    child = _fork(parent, tmp_path)
    assert main(["fork", str(child.dir.root), "--round", str(K - 1), "--quiet"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert (f"--round {K - 1}: {child.dir.run_id} is a fork from the end of round {K} of "
            f"{parent.dir.run_id}, which holds the rounds before: fork that run at round "
            f"{K - 1}") in err


def test_fork_created_without_running_resumes_with_its_changes(parent, tmp_path):
    """`shoal fork --no-run` then `shoal resume`: the fork keeps its --set (its round-K
    state carries the fork's config), and equals a fork run in one go."""
    args = ["fork", str(parent.dir.root), "--round", str(K), "--set", "policy.post_rate=0.6",
            "--out"]
    assert main([*args, str(tmp_path / "later"), "--no-run", "--quiet"]) == 0
    (later,) = (tmp_path / "later").iterdir()
    assert main(["resume", str(later), "--quiet"]) == 0
    assert main([*args, str(tmp_path / "direct"), "--quiet"]) == 0
    (direct,) = (tmp_path / "direct").iterdir()
    a = _after(later / "trajectory.duckdb", "actions", K)
    b = _after(direct / "trajectory.duckdb", "actions", K)
    assert a.equals(b)
    parent_posts = _after(parent.dir.db, "actions", K).query("action == 'post'")
    assert len(a.query("action == 'post'")) > 2 * len(parent_posts)


def test_checkpoint_of_another_format_is_refused(parent, tmp_path, capsys):
    """A checkpoint written by another version is a clear error, not a KeyError."""
    import json
    import shutil

    copy = tmp_path / "old"
    shutil.copytree(parent.dir.root, copy)
    meta = copy / "checkpoints" / "state" / f"round-{K:06d}" / "meta.json"
    data = json.loads(meta.read_text())
    del data["format"]
    meta.write_text(json.dumps(data))
    assert main(["fork", str(copy), "--round", str(K), "--out", str(tmp_path / "f")]) == 2
    assert "written by another version of Shoal" in capsys.readouterr().err
