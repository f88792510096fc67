"""The conformance kit: checks every plug-in part must pass, the same ones Shoal's own
parts pass (tests/test_conformance.py runs them over every registered part).

    from shoal.testing import check_belief_rule, check_recommender, check_policy
    from shoal.testing import check_platform, check_intervention

    def test_my_rule(tmp_path):
        check_belief_rule("my_rule", tmp_path, rate=0.2)

Each check runs a small simulation (40 agents, 4 rounds, both social platforms) that uses
the part, in a folder of the caller's, and fails with an AssertionError saying what broke:

- **determinism across shard counts**: the same tables with 1 and 3 shards;
- **resume equality**: a run stopped after round 2 and resumed has the uninterrupted
  run's tables (the part's state survives a checkpoint: `get_state`/`set_state`);
- **fork equality**: a fork at round 2 that changes nothing has the parent's rows after
  round 2;
- **finite outputs**: positions in [-1, 1], confidences in [0, 1], nothing NaN;
- and per family: feeds of well-formed posts (recommenders), actions the platform allows
  (policies), the part's interface (its base class), an intervention firing once.

A part whose config section has required fields passes them as keyword arguments (or
registers an `example` with its part: `REGISTRY.register(name, config=..., example={...})`).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd

from shoal.core.registry import BELIEF_RULES, INTERVENTIONS, PLATFORMS, POLICIES, RECOMMENDERS
from shoal.store.tables import TableSpec, file_tables

ROUNDS = 4
STOP = 2  # the round a run is stopped (and resumed) at, and forked at
BASE: dict[str, Any] = {
    "name": "conformance", "seed": 11, "rounds": ROUNDS,
    "population": {"size": 40, "groups": [{"name": "activists", "fraction": 0.2}]},
    "topics": [{"name": "carbon_tax", "keywords": ["carbon tax"]},
               {"name": "nuclear_power", "keywords": ["nuclear power"]}],
    "activity": {"level": 0.7, "min_active": 5},
    "platforms": {"twitter": {"feed_size": 6}, "reddit": {"feed_size": 5}},
    "output": {"log_idle_actions": True},
}


def small_config(**sections: Any) -> dict[str, Any]:
    """The kit's base config with `sections` replaced or added (top-level keys)."""
    data = copy.deepcopy(BASE)
    data.update(copy.deepcopy(sections))
    return data


# ---------------------------------------------------------------- the checks


def check_belief_rule(name: str, folder: Path, **settings: Any) -> None:
    """A registered belief rule (`beliefs.update.rule: name`, with `settings`)."""
    from shoal.beliefs.rules.base import UpdateRule

    _is_a(BELIEF_RULES, name, UpdateRule)
    update = {"rule": name, **_example(BELIEF_RULES, name), **settings}
    check_run(small_config(beliefs={"update": update}), folder)


def check_recommender(name: str, folder: Path, **settings: Any) -> None:
    """A registered recommender, feeding both social platforms; its feeds (the
    `exposures` table) are well formed."""
    from shoal.engine.recommenders import Recommender

    _is_a(RECOMMENDERS, name, Recommender)
    rec = {"kind": name, **_example(RECOMMENDERS, name), **settings}
    platforms = {p: {**v, "recommender": rec} for p, v in BASE["platforms"].items()}
    run = check_run(small_config(platforms=platforms), folder)
    _check_feeds(run)


def check_policy(name: str, folder: Path, **settings: Any) -> None:
    """A registered policy deciding for every agent; its actions are the platforms'."""
    from shoal.agents.policy import Policy

    _is_a(POLICIES, name, Policy)
    policy = {"kind": name, **_example(POLICIES, name), **settings}
    run = check_run(small_config(policy=policy), folder)
    _check_actions(run)


def check_platform(name: str, folder: Path, **settings: Any) -> None:
    """A registered platform (social, or with its own engine) beside the microblog."""
    from shoal.world.platform_engine import PlatformEngine

    spec = PLATFORMS.get(name).impl
    if spec.engine:
        engine = spec.engine_class()
        assert isinstance(engine, type) and issubclass(engine, PlatformEngine), (
            f"platform {name!r}: its engine {spec.engine} must subclass "
            "shoal.world.platform_engine.PlatformEngine")
    section = {**_example(PLATFORMS, name), **settings}
    platforms = {"twitter": BASE["platforms"]["twitter"], name: section}
    run = check_run(small_config(platforms=platforms), folder)
    if spec.social:
        _check_feeds(run)
    _check_actions(run)


def check_intervention(kind: str, folder: Path, **entry: Any) -> None:
    """A registered intervention kind, due at round 3 (after the stop at round 2, so a
    resume fires it) in one run and at round 2 (before the stop) in another: it fires
    exactly once in each, and the runs are deterministic, resumable and forkable."""
    spec = {**_example(INTERVENTIONS, kind), **entry, "kind": kind}
    for due, whole in ((STOP + 1, True), (STOP, False)):
        run = check_run(small_config(interventions=[{**spec, "round": due}]),
                        folder / f"due{due}", every_check=whole)
        fired = _frame(run, "SELECT round, idx FROM interventions")
        assert fired.values.tolist() == [[due, 0]], (
            f"intervention {kind!r} due at round {due}: fired {fired.values.tolist()}, "
            "expected exactly once, at its round")


def check_run(config: dict[str, Any], folder: Path, every_check: bool = True) -> Path:
    """The checks every part passes, on a run of `config` (see the module docstring;
    `every_check=False`: the resume only); returns the uninterrupted run's directory."""
    from shoal.config import parse_config
    from shoal.runs.simulation import Simulation

    def make(name: str, shards: int = 1) -> Any:
        data = {**copy.deepcopy(config), "executor": {"kind": "local", "shards": shards}}
        data["output"] = {**data.get("output", {}), "dir": str(folder / name)}
        return Simulation.create(parse_config(data))

    with make("whole") as sim:
        sim.run()
    whole = sim.dir.root
    if every_check:
        with make("sharded", shards=3) as sim:
            sim.run()
        _same(whole, sim.dir.root, "the same config with 3 shards instead of 1")
    with make("stopped") as sim:
        sim.run(STOP)
    with Simulation.resume(sim.dir.root) as resumed:
        resumed.run()
    assert resumed.dir is not None  # a resumed simulation is a run directory
    _same(whole, resumed.dir.root, f"a run stopped after round {STOP} and resumed")
    if every_check:
        with _fork(whole, folder / "fork") as fork:
            fork.run()
        _same_after(whole, fork.dir.root, STOP)
    _check_finite(whole)
    return whole


# ---------------------------------------------------------------- comparing runs


def differing_tables(db_a: Path, db_b: Path, asked: bool = False) -> list[str]:
    """The tables whose rows differ between two trajectory files (volatile columns left
    out, rows in a canonical order): every table of the trajectory either file has, read
    from the files; a table only one has counts as differing. `asked`: also the tables of
    what was asked of the runs afterwards (analyses, interviews)."""
    cons = [duckdb.connect(str(db), read_only=True) for db in (db_a, db_b)]
    try:
        a, b = ({t: s for t, s in file_tables(con).items() if asked or s.lineage != "none"}
                for con in cons)
        return sorted(t for t in a.keys() | b.keys()
                      if t not in a or t not in b
                      or not canonical(cons[0], a[t]).equals(canonical(cons[1], b[t])))
    finally:
        for con in cons:
            con.close()


def canonical(con: duckdb.DuckDBPyConnection, spec: TableSpec, where: str | None = None
              ) -> pd.DataFrame:
    """A table's rows (matching `where`) sorted by every column, without the columns its
    declaration calls volatile; enums and lists as comparable values."""
    df = con.sql(f"SELECT * FROM {spec.name}" + (f" WHERE {where}" if where else "")).df()
    df = df.drop(columns=[c for c in spec.volatile if c in df.columns])
    for col in df.columns:
        if isinstance(df[col].dtype, pd.CategoricalDtype):
            df[col] = df[col].astype(str)
        elif df[col].dtype == object:
            df[col] = df[col].map(lambda v: repr(list(v)) if hasattr(v, "__len__")
                                  and not isinstance(v, str) else v)
    return df.sort_values(list(df.columns)).reset_index(drop=True)


def _same(a: Path, b: Path, what: str) -> None:
    differ = differing_tables(a / "trajectory.duckdb", b / "trajectory.duckdb")
    differ = [t for t in differ if t != "run"]  # (its name and ids are the run's own)
    assert not differ, f"{what} gives different tables: {', '.join(differ)}"


def _same_after(parent: Path, fork: Path, k: int) -> None:
    """The fork's own rows (rounds after k) equal the parent's rows after k."""
    cons = [duckdb.connect(str(p / "trajectory.duckdb"), read_only=True)
            for p in (parent, fork)]
    try:
        row = cons[0].execute(f"SELECT count(*) FROM posts WHERE round <= {k}").fetchone()
        assert row is not None  # count(*) always returns one row
        n_posts = int(row[0])
        differ = []
        for name, spec in file_tables(cons[0]).items():
            if spec.lineage != "inherit" or not spec.cut:
                continue
            after = f"NOT ({spec.upto(k, n_posts)})"
            if not canonical(cons[0], spec, after).equals(canonical(cons[1], spec, after)):
                differ.append(name)
    finally:
        for con in cons:
            con.close()
    assert not differ, (f"a fork at round {k} that changes nothing differs from its parent "
                        f"after round {k} in: {', '.join(differ)}")


def _fork(run: Path, out: Path) -> Any:
    from shoal.runs.fork import fork_run

    return fork_run(run, STOP, out=out, name="conformance-fork")


# ---------------------------------------------------------------- per family


def _check_finite(run: Path) -> None:
    bad = _frame(run, "SELECT count(*) AS n FROM beliefs WHERE NOT (isfinite(position) AND "
                      "isfinite(confidence) AND position BETWEEN -1 AND 1 AND confidence "
                      "BETWEEN 0 AND 1)")["n"].iloc[0]
    assert bad == 0, f"{bad} belief rows are not finite or out of range"


def _check_feeds(run: Path) -> None:
    """Every feed item: a post made before the round, on that platform, of a kind its
    feeds show (events are pinned to feeds), once per feed, each at its own rank (a rank
    may be missing: -1 is an empty slot anywhere in a feed, as the engine accepts)."""
    from shoal.platforms.spec import spec

    shown = _frame(run, """
        SELECT e.round, e.platform::VARCHAR AS platform, e.agent, e.post_id, e.rank,
               p.round AS made, p.platform::VARCHAR AS on_platform, p.kind::VARCHAR AS kind
        FROM exposures e LEFT JOIN posts p USING (post_id)""")
    assert len(shown), "no feed item was shown in the whole run"
    assert shown["made"].notna().all(), "a feed shows a post that does not exist"
    assert (shown["made"] < shown["round"]).all(), "a feed shows a post of its own round"
    assert (shown["platform"] == shown["on_platform"]).all(), "a feed shows another platform"
    kinds = {p: {k.name.lower() for k in spec(p).feed_kinds} | {"event"}
             for p in shown["platform"].unique()}
    wrong = shown[[k not in kinds[p] for p, k in zip(shown["platform"], shown["kind"],
                                                       strict=True)]]
    assert wrong.empty, f"feeds show posts of kinds they do not carry: {set(wrong['kind'])}"
    per_feed = shown.groupby(["round", "platform", "agent"])
    assert (per_feed["post_id"].nunique() == per_feed.size()).all(), "a post twice in a feed"
    assert (shown["rank"] >= 0).all() and (per_feed["rank"].nunique() == per_feed.size()).all(
    ), "two items at one rank of a feed"


def _check_actions(run: Path) -> None:
    """Every decision is an action its platform offers."""
    from shoal.core.vocabulary import ACTION_NAMES
    from shoal.platforms.spec import spec

    done = _frame(run, "SELECT DISTINCT platform::VARCHAR AS platform, action::VARCHAR AS "
                       "action FROM actions")
    for platform, action in done.itertuples(index=False):
        allowed = {ACTION_NAMES[a] for a in spec(platform).actions}
        assert action in allowed, f"{action!r} on {platform}, which offers {sorted(allowed)}"


# ---------------------------------------------------------------- plumbing


def _is_a(registry: Any, name: str, base: type) -> None:
    impl = registry.get(name).impl
    assert isinstance(impl, type) and issubclass(impl, base), (
        f"{registry.family} {name!r}: {impl!r} must subclass {base.__module__}.{base.__name__}")


def _example(registry: Any, name: str) -> dict[str, Any]:
    """The config a part registered as its example (its defaults otherwise)."""
    return copy.deepcopy(registry.get(name).meta.get("example", {}))


def _frame(run: Path, sql: str) -> pd.DataFrame:
    con = duckdb.connect(str(run / "trajectory.duckdb"), read_only=True)
    try:
        return con.sql(sql).df()
    finally:
        con.close()

