"""The server's reads of `exposures` from the lists the file keeps (`exposures_listed`)
give exactly what the same reads of the view `exposures` give: on a run of both platforms
and on its fork; and a fork whose parent keeps a table of rows (a file written before
feeds were kept as lists) is read from the view, with the same answers."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import duckdb
import pytest

from shoal.cli.main import main
from shoal.store.history_sql import attach_history
from shoal.store.lineage import read_table
from shoal.store.tables import TABLES
from shoal.web.service import Folder
from tests.conftest import CONFIGS

SMALL = ["--set", "population.size=60", "--set", "rounds=6"]
FORK_ROUND = 3


def _made(out: Path, before: set[Path]) -> Path:
    (run,) = [p for p in out.iterdir() if (p / "run.json").is_file() and p not in before]
    return run


def _as_before_lists(run: Path) -> None:
    """Keep the run's exposures as files written before lists did: a table of rows, its
    declaration without `listed` as its comment."""
    declared = TABLES.get("exposures")
    assert declared is not None
    spec = replace(declared, listed=None)
    con = duckdb.connect(str(run / "trajectory.duckdb"))
    try:
        con.execute("CREATE TABLE exposures_rows AS SELECT * FROM exposures "
                    f"ORDER BY {spec.order}")
        con.execute("DROP VIEW exposures")
        con.execute("DROP TABLE exposures_listed")
        con.execute("ALTER TABLE exposures_rows RENAME TO exposures")
        con.execute(f"COMMENT ON TABLE exposures IS '{spec.comment()}'")
    finally:
        con.close()


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """A run on twitter and reddit and its fork (files with lists); the same run kept as
    rows, and its fork (a file with lists, its parent's rows)."""
    root = tmp_path_factory.mktemp("reads")
    made: dict[str, Path] = {}
    for name in ("root", "plain"):
        assert main(["run", str(CONFIGS / "quickstart.yaml"), "--out", str(root), "--quiet",
                     "--name", name, *SMALL]) == 0
        made[name] = _made(root, set(made.values()))
    _as_before_lists(made["plain"])
    for parent, fork in (("root", "fork"), ("plain", "plain_fork")):
        assert main(["fork", str(made[parent]), "--round", str(FORK_ROUND), "--set",
                     "policy.post_rate=0.9", "--out", str(root), "--quiet"]) == 0
        made[fork] = _made(root, set(made.values()))
    return made


def _by_view(folder: Folder) -> Folder:
    """The folder's server reading `exposures` only (the queries it had before lists)."""
    folder._listed = lambda run_id: False  # type: ignore[method-assign]
    return folder


def _hist(run: Path, sql: str) -> list[tuple[Any, ...]]:
    con = duckdb.connect()
    try:
        attach_history(con, run)
        con.execute("USE hist")
        return sorted(con.execute(sql).fetchall(), key=repr)
    finally:
        con.close()


def test_lists_are_read_only_where_every_file_of_the_history_keeps_them(runs):
    folder = Folder(runs["root"].parent)
    with_lists = {name: folder._listed(run.name) for name, run in runs.items()}
    assert with_lists == {"root": True, "fork": True, "plain": False, "plain_fork": False}
    views = "SELECT view_name FROM duckdb_views() WHERE database_name = 'hist'"
    assert ("exposures_listed",) in _hist(runs["fork"], views)
    assert ("exposures_listed",) not in _hist(runs["plain_fork"], views)


@pytest.mark.parametrize("name", ["root", "fork"])
def test_the_historys_lists_unnest_to_its_exposures(runs, name):
    spec = TABLES.get("exposures")
    assert spec is not None
    rows = _hist(runs[name], "SELECT * FROM exposures")
    assert rows == _hist(runs[name], spec.unnested("exposures_listed"))
    assert rows == _hist(runs[f"plain_{name}" if name == "fork" else "plain"],
                         "SELECT * FROM exposures"), "as a history kept as rows reads"
    frame = read_table(runs[name], "exposures")
    assert sorted(map(tuple, frame.itertuples(index=False)), key=repr) == rows
    rounds = {r[0] for r in rows}
    assert min(rounds) <= FORK_ROUND < max(rounds), "the parent's rounds and the fork's"
    assert {r[1] for r in rows} == {"twitter", "reddit"}


def _same(runs: dict[str, Path], name: str, read: Callable[[Folder, str], Any]) -> Any:
    folder = runs[name].parent
    run_id = runs[name].name
    listed = read(Folder(folder), run_id)
    assert listed == read(_by_view(Folder(folder)), run_id)
    return listed


@pytest.mark.parametrize("name", ["root", "fork", "plain_fork"])
def test_the_servers_answers_from_lists_equal_those_from_the_view(runs, name):
    folder, run_id = Folder(runs[name].parent), runs[name].name
    posts = [r["post_id"] for r in folder.rows(run_id, "SELECT post_id FROM posts")]
    agents = folder.rows(run_id, "SELECT count(*) AS n FROM agents")[0]["n"]
    reached = 0
    for round_ in range(7):
        for platform in (None, "twitter", "reddit"):
            page = _same(runs, name, lambda f, r, round_=round_, platform=platform:
                         f.posts(r, round_, 500, 0, platform))
            reached += sum(p["reach"] for p in page["posts"])
        _same(runs, name, lambda f, r, round_=round_: f.posts(r, round_, 3, 2))
        _same(runs, name, lambda f, r, round_=round_: f.network(r, round_))
        _same(runs, name, lambda f, r, round_=round_: f.network(r, round_, 7))
    assert reached > 0, "no post was shown to anyone: nothing compared"
    # every third post (each read opens the run's history: ~0.1 s), both ends included
    for post in {*posts[::3], posts[-1]}:
        one = _same(runs, name, lambda f, r, post=post: f.post(r, post))
        assert one["post"]["reach"] == one["seen_by"]["total"]
    for agent in range(0, agents, 7):
        _same(runs, name, lambda f, r, agent=agent: f.agent(r, agent))
    _same(runs, name, lambda f, r: f.series(r)["echo"])


def test_a_fork_of_a_history_kept_as_rows_answers_as_one_kept_as_lists(runs):
    def answers(run: Path) -> list[Any]:
        folder, run_id = Folder(run.parent), run.name
        return [folder.posts(run_id, 4, 500), folder.post(run_id, 3)["seen_by"],
                folder.network(run_id, 5), folder.series(run_id)["echo"]]

    assert answers(runs["plain_fork"]) == answers(runs["fork"])
