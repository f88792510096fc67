"""Lineage: a fork's full history is its ancestors' rows before each fork round plus its
own; read through the chain it equals the parent exactly when nothing changed, and differs
only after the fork round when something did. A run held by a writer is read from its
live mirror, or is a clear error."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import duckdb
import pandas as pd
import pytest
import yaml

from shoal.cli.main import main
from shoal.core.errors import InputError
from shoal.store.lineage import fork_rounds, lineage, read_table, run_tree
from shoal.store.tables import TableSpec
from tests.conftest import CONFIGS
from tests.helpers import declared, fork_and_run, make_config, run_config

K = 4
ROUNDS = 8


def small_dict(**overrides) -> dict:
    """The quick start, smaller and shorter."""
    data = yaml.safe_load((CONFIGS / "quickstart.yaml").read_text())
    data.update({"rounds": ROUNDS, "population": {"size": 250, "groups": [
        {"name": "activists", "fraction": 0.1}]}, **overrides})
    return data



@pytest.fixture(scope="module")
def family(tmp_path_factory) -> SimpleNamespace:
    """A root run; a no-change fork at K; a fork of that fork at K+2; a fork at K with a
    higher post rate. All in one output folder."""
    out = tmp_path_factory.mktemp("family")
    root = run_config(make_config(small_dict(), out)).dir.root
    same = fork_and_run(root, K)
    chain = fork_and_run(same, K + 2)
    changed = fork_and_run(root, K, sets=["policy.post_rate=0.5"])
    return SimpleNamespace(out=out, root=root, same=same, chain=chain, changed=changed)


def inherited(run: Path) -> list[TableSpec]:
    """The tables a fork of `run` reads through its lineage (from the run's file)."""
    return [s for s in declared(run / "trajectory.duckdb").values() if s.lineage == "inherit"]


def history(run: Path, table: str, where: str | None = None) -> pd.DataFrame:
    """read_table without the columns that differ between identical runs (timings)."""
    df = read_table(run, table, where)
    volatile = declared(run / "trajectory.duckdb")[table].volatile
    return df.drop(columns=[c for c in volatile if c in df.columns])


def raw(db: Path, sql: str) -> pd.DataFrame:
    """A query on one trajectory file, as it is stored."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.sql(sql).df()
    finally:
        con.close()


def meta(run: Path) -> dict:
    return json.loads((run / "run.json").read_text())["lineage"]


def test_lineage_of_a_chain(family):
    """Root first with its cut (fork round, post count), the middle fork, the run itself."""
    segs = lineage(family.chain)
    assert [s.dir.root for s in segs] == [family.root, family.same, family.chain]
    assert [s.last_round for s in segs] == [K, K + 2, None]
    assert [s.n_posts for s in segs] == [meta(family.same)["parent_posts"],
                                         meta(family.chain)["parent_posts"], None]
    assert fork_rounds(family.chain) == [K, K + 2]
    assert [s.dir.root for s in lineage(family.root)] == [family.root]


@pytest.mark.slow
def test_no_change_fork_reads_as_its_parent(family):
    """Every history table of the fork (parent prefix + own rows) equals the parent's,
    rows, order and dtypes; the fork's own file holds only rounds after K."""
    for spec in inherited(family.root):
        mine, theirs = history(family.same, spec.name), history(family.root, spec.name)
        pd.testing.assert_frame_equal(mine, theirs, obj=spec.name)
    assert len(history(family.same, "beliefs")) > 0
    assert raw(family.same / "trajectory.duckdb",
               "SELECT min(round) AS r FROM beliefs")["r"][0] == K + 1
    rounds = history(family.same, "beliefs")["round"]
    assert sorted(rounds.unique()) == list(range(ROUNDS + 1))


@pytest.mark.slow
def test_fork_of_a_fork_reads_root_then_middle_then_own(family):
    """The chain's history is the root's rows <= K, the middle fork's rows K+1..K+2 and
    its own rows after K+2: each round once, none missing, and equal to the root."""
    cuts = [(family.root, K, meta(family.same)["parent_posts"]),
            (family.same, K + 2, meta(family.chain)["parent_posts"]),
            (family.chain, ROUNDS, None)]
    for spec in inherited(family.root):
        parts = []
        for run, last, n_posts in cuts:
            where = spec.upto(last, n_posts) or "true"
            parts.append(raw(run / "trajectory.duckdb", f"SELECT * FROM {spec.name} WHERE "
                                                        f"{where} ORDER BY {spec.order}"))
        expected = pd.concat([p for p in parts if len(p)] or parts[:1], ignore_index=True)
        pd.testing.assert_frame_equal(read_table(family.chain, spec.name), expected,
                                      obj=spec.name)
    rounds = read_table(family.chain, "rounds")["round"].tolist()
    assert rounds == list(range(1, ROUNDS + 1))
    for spec in inherited(family.root):
        pd.testing.assert_frame_equal(history(family.chain, spec.name),
                                      history(family.root, spec.name), obj=spec.name)


@pytest.mark.slow
def test_changed_fork_differs_only_after_k(family):
    """post_rate 0.5 from K+1: every row of rounds <= K (and every post before the fork)
    equals the parent's; the actions of every round after K differ."""
    n_posts = meta(family.changed)["parent_posts"]
    for spec in inherited(family.root):
        upto = spec.upto(K, n_posts)
        pd.testing.assert_frame_equal(history(family.changed, spec.name, upto),
                                      history(family.root, spec.name, upto), obj=spec.name)
    for r in range(K + 1, ROUNDS + 1):
        mine = history(family.changed, "actions", f"round = {r}")
        theirs = history(family.root, "actions", f"round = {r}")
        assert not mine.equals(theirs), r
    posts = [len(history(run, "posts", f"round > {K}")) for run in (family.changed,
                                                                    family.root)]
    assert posts[0] > posts[1]


def test_own_tables_and_errors(family, tmp_path):
    """run, topics and agents are the fork's own; unknown tables and runs are input errors."""
    run_row = read_table(family.chain, "run")
    assert run_row["run_id"].tolist() == [family.chain.name]
    assert run_row["fork_round"].tolist() == [K + 2]
    assert len(read_table(family.chain, "agents")) == 250
    with pytest.raises(InputError, match="unknown table"):
        read_table(family.root, "nope")
    with pytest.raises(InputError, match="no such run directory"):
        read_table(tmp_path / "missing", "beliefs")


def test_moved_parent_is_found_in_the_forks_folder(family, tmp_path):
    """If parent_path no longer exists, the parent is looked up next to the fork; if it is
    not there either, the error names both places."""
    for run in (family.root, family.same):
        shutil.copytree(run, tmp_path / run.name)
    moved = tmp_path / family.same.name
    data = json.loads((moved / "run.json").read_text())
    data["lineage"]["parent_path"] = str(tmp_path / "gone" / family.root.name)
    (moved / "run.json").write_text(json.dumps(data))
    assert [s.dir.root for s in lineage(moved)] == [tmp_path / family.root.name, moved]
    pd.testing.assert_frame_equal(read_table(moved, "beliefs"),
                                  read_table(family.root, "beliefs"))
    shutil.rmtree(tmp_path / family.root.name)
    with pytest.raises(InputError, match=r"its parent run .* is not at"):
        lineage(moved)


def test_run_tree_and_shoal_runs(family, capsys):
    """Roots first, forks indented under their parents with the fork round."""
    entries = run_tree(family.out)
    assert [(e.dir.root, e.depth, e.fork_round) for e in entries] == [
        (family.root, 0, None), (family.same, 1, K), (family.chain, 2, K + 2),
        (family.changed, 1, K)]
    assert main(["runs", str(family.out)]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if "quickstart-" in ln]
    assert lines[0].lstrip().startswith(family.root.name)
    assert f"└ {family.same.name}" in lines[1] and f"at round {K}" in lines[1]
    assert f"  └ {family.chain.name}" in lines[2] and f"at round {K + 2}" in lines[2]
    assert f"└ {family.changed.name}" in lines[3]
    assert all("finished" in ln and f"{ROUNDS}/{ROUNDS}" in ln for ln in lines)


def test_shoal_runs_of_a_missing_folder_exits_2(tmp_path, capsys):
    assert main(["runs", str(tmp_path / "nope")]) == 2
    assert "no such folder" in capsys.readouterr().err


HOLD = ("import sys, time, duckdb; con = duckdb.connect(sys.argv[1]); "
        "print('held', flush=True); time.sleep(120)")


@contextmanager
def held(db: Path) -> Iterator[None]:
    """Another process holds `db` open for writing, as a running driver does."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(db)], stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        yield
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()


def test_a_run_being_written_without_a_mirror_is_a_clear_error(family):
    """The run itself, or any ancestor of a fork, held by a writer: InputError naming it."""
    with held(family.root / "trajectory.duckdb"):
        for run in (family.root, family.chain):
            with pytest.raises(InputError) as err:
                read_table(run, "beliefs")
            assert str(err.value) == (
                f"run {family.root.name} is being written; set output.live_parquet: true "
                "to read it while it runs, or wait for it to finish")


@pytest.mark.slow
def test_a_run_being_written_is_read_from_its_live_mirror(tmp_path):
    """With output.live_parquet the same rows (and dtypes) come from the Parquet mirror
    while another process holds the DuckDB file."""
    data = small_dict(rounds=5, output={"live_parquet": True})
    data["population"]["size"] = 200
    run = run_config(make_config(data, tmp_path)).dir.root
    tables = [s.name for s in declared(run / "trajectory.duckdb").values()
              if s.lineage != "none"]  # every table of the run's history, the mirror's too
    before = {t: read_table(run, t) for t in tables}
    with held(run / "trajectory.duckdb"):
        with pytest.raises(duckdb.IOException, match="lock"):
            duckdb.connect(str(run / "trajectory.duckdb"), read_only=True)
        for table in tables:
            pd.testing.assert_frame_equal(read_table(run, table), before[table], obj=table)
        live = read_table(run, "beliefs", "topic = 'carbon_tax' AND round = 5")
        assert len(live) == 200


def test_runs_whose_lineage_loops_are_listed_not_lost(family, tmp_path, capsys):
    """issue 26 item 14: a run whose run.json names itself as its parent (or two runs that
    name each other) still appears in `shoal runs`, at the top level, with a warning naming
    the file; other runs are listed as before."""
    for run in (family.root, family.same, family.changed):
        shutil.copytree(run, tmp_path / run.name)
    selfish, a, b = (tmp_path / r.name for r in (family.root, family.same, family.changed))
    for run, parent in ((selfish, selfish), (a, b), (b, a)):
        data = json.loads((run / "run.json").read_text())
        data["lineage"] = {**(data.get("lineage") or {}), "parent_run_id": parent.name,
                           "fork_round": 2, "parent_posts": 0}
        (run / "run.json").write_text(json.dumps(data))
    assert {e.dir.root for e in run_tree(tmp_path)} == {selfish, a, b}
    capsys.readouterr()
    assert main(["runs", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    lines = [ln for ln in captured.out.splitlines() if "quickstart-" in ln]
    assert len(lines) == 3
    (mine,) = [ln for ln in lines if selfish.name in ln]
    assert "from itself at round 2" in mine
    err = " ".join(captured.err.split())
    assert f"{selfish / 'run.json'}: lineage loops: its parent is itself" in err
    assert f"{a / 'run.json'}: lineage loops: its parent {b.name} leads back to" in err


def test_inspect_a_round_of_a_fork_before_its_fork_round(family, capsys):
    """issue 26 item 18: `shoal inspect` of a fork at a round its history takes from an
    ancestor says whose round it is and shows the context that ancestor built (its own
    rounds are inspected as before)."""
    def inspect(run: Path, round_: int) -> tuple[str, str]:
        assert main(["inspect", str(run), "--agent", "3", "--round", str(round_)]) == 0
        captured = capsys.readouterr()
        return captured.out, " ".join(captured.err.split())

    capsys.readouterr()
    for round_, owner in ((3, family.root), (K + 1, family.same)):
        out, err = inspect(family.chain, round_)
        assert (f"round {round_} of {family.chain.name}'s history belongs to {owner.name}, "
                f"the run it was forked from") in err
        assert out == inspect(owner, round_)[0]
    out, err = inspect(family.chain, K + 3)
    assert "belongs to" not in err and "=== SYSTEM ===" in out
