"""A third-party plug-in, installed as users install one, extends Shoal without an edit of
its source: tests/plugin/ (its own pyproject.toml, entry point `shoal.plugins`) adds a
belief rule, a recommender and a third platform, and a config uses all three."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
import yaml

from tests.conftest import ROOT
from tests.helpers import read_table, tables_differ

CONFIG = {
    "name": "plugged", "seed": 3, "rounds": 6,
    "population": {"size": 150},
    "topics": ["issue"],
    "activity": {"level": 0.8},
    "platforms": {"twitter": {"recommender": {"kind": "echo", "window_rounds": 4}},
                  "reddit": {"enabled": False},
                  "toot": {"feed_size": 5, "members": {"fraction": 0.5}}},
    "beliefs": {"update": {"rule": "drift", "target": 0.5, "rate": 0.2}},
}


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The plug-in installed by pip into a folder of its own (not into the test venv)."""
    tmp = tmp_path_factory.mktemp("plugin")
    src = tmp / "src"
    shutil.copytree(ROOT / "tests" / "plugin", src)
    target = tmp / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                    "--no-build-isolation", "--target", str(target), str(src)], check=True)
    assert list(target.glob("shoal_toy_plugin-*.dist-info/entry_points.txt"))
    return target


def shoal(args: list[str], site: Path | None, env: dict | None = None
          ) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(site) if site else "", **(env or {})}
    return subprocess.run([sys.executable, "-m", "shoal.cli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True)


@pytest.mark.slow
def test_a_config_using_the_plugins_parts_runs(site, tmp_path):
    path = tmp_path / "plugged.yaml"
    path.write_text(yaml.safe_dump(CONFIG))
    result = shoal(["run", str(path), "--out", str(tmp_path / "runs"), "--quiet"], site)
    assert result.returncode == 0, result.stderr
    (run,) = (tmp_path / "runs").iterdir()
    con = duckdb.connect(str(run / "trajectory.duckdb"), read_only=True)
    try:
        platforms = dict(con.execute("SELECT platform::VARCHAR, count(*) FROM posts "
                                     "GROUP BY 1").fetchall())
        members = con.execute("SELECT count(*) FILTER (WHERE on_toot), count(*) "
                              "FROM agents").fetchone()
        actions = {r[0] for r in con.execute("SELECT DISTINCT action::VARCHAR FROM actions "
                                             "WHERE platform = 'toot'").fetchall()}
        means = con.execute("SELECT round, avg(position) FROM beliefs GROUP BY 1 "
                            "ORDER BY 1").fetchall()
    finally:
        con.close()
    assert platforms.get("toot", 0) > 0 and "reddit" not in platforms
    assert 0 < members[0] < members[1]  # half the agents joined the toot platform
    assert actions <= {"post", "like", "follow", "do_nothing"} and "post" in actions
    # drift: every round closes a fifth of the gap to 0.5, exactly
    gaps = [0.5 - m for _, m in means]
    for before, after in itertools.pairwise(gaps):
        assert after == pytest.approx(0.8 * before, abs=1e-9)


@pytest.mark.slow
def test_a_plugin_policy_decides_for_the_agents(site, tmp_path):
    """policy.kind names the plug-in's policy, and it is what runs: every action is its
    post, carrying the author's position at the time."""
    path = tmp_path / "shout.yaml"
    path.write_text(yaml.safe_dump({"name": "shout", "seed": 5, "rounds": 3,
                                    "population": {"size": 60}, "topics": ["issue"],
                                    "activity": {"level": 0.5},
                                    "policy": {"kind": "shout", "text": "loud"}}))
    result = shoal(["run", str(path), "--out", str(tmp_path / "runs"), "--quiet"], site)
    assert result.returncode == 0, result.stderr
    (run,) = (tmp_path / "runs").iterdir()
    con = duckdb.connect(str(run / "trajectory.duckdb"), read_only=True)
    try:
        actions = con.execute("SELECT action::VARCHAR, count(*) FROM actions "
                              "GROUP BY 1").fetchall()
        texts = {r[0] for r in con.execute("SELECT DISTINCT text FROM posts "
                                           "WHERE round > 0").fetchall()}
    finally:
        con.close()
    assert [a for a, _ in actions] == ["post"] and actions[0][1] > 0
    assert texts == {"loud"}


def test_without_the_plugin_its_names_are_errors(tmp_path):
    path = tmp_path / "plugged.yaml"
    path.write_text(yaml.safe_dump(CONFIG))
    result = shoal(["check", str(path)], None)
    assert result.returncode == 2
    assert "toot" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.slow
def test_a_plugin_engines_table_survives_a_kill_after_its_commit(site, tmp_path):
    """The tally platform's engine declares `toy_tally` through the table registry: it is
    created with the file, a kill between round 3's commit and its checkpoint is resumed
    to the uninterrupted run's tables (the tally's own included, its running total
    continuing exactly), and a reader without the plug-in reads the table by the
    declaration the file keeps."""
    data = {**CONFIG, "platforms": {**CONFIG["platforms"], "tally": {}}}
    path = tmp_path / "tally.yaml"
    path.write_text(yaml.safe_dump(data))
    runs = {}
    for name, fault in (("whole", None), ("killed", "after_commit:3")):
        out = tmp_path / name
        env = {"SHOAL_FAULT": fault} if fault else {}
        result = shoal(["run", str(path), "--out", str(out), "--quiet"], site, env)
        assert result.returncode == (-signal.SIGKILL if fault else 0), result.stderr
        (runs[name],) = out.iterdir()
    result = shoal(["resume", str(runs["killed"]), "--quiet"], site)
    assert result.returncode == 0, result.stderr
    dbs = [runs[n] / "trajectory.duckdb" for n in ("whole", "killed")]
    assert tables_differ(*dbs) == []
    tally = read_table(dbs[1], "toy_tally")
    assert tally["round"].tolist() == list(range(7))  # round 0 and six rounds, each once
    assert tally["running_total"].iloc[-1] == pytest.approx(tally["mean_position"].sum())
    reader = subprocess.run(  # no plug-in on the path: the file's declaration is enough
        [sys.executable, "-c", "import sys; from shoal import open_run; "
         "print(len(open_run(sys.argv[1]).table('toy_tally')))", str(runs["killed"])],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": ""}, capture_output=True, text=True)
    assert reader.returncode == 0 and reader.stdout.strip() == "7", reader.stderr


@pytest.mark.slow
def test_the_plugins_parts_pass_the_conformance_kit(site, tmp_path):
    """Every part of the toy plug-in passes the checks Shoal's own parts pass (the echo
    recommender keeps state, so its resume check needs its get_state/set_state)."""
    script = (
        "import sys; from pathlib import Path; import sim.testing as kit\n"
        "out = Path(sys.argv[1])\n"
        "kit.check_belief_rule('drift', out / 'drift')\n"
        "kit.check_recommender('echo', out / 'echo')\n"
        "kit.check_policy('shout', out / 'shout')\n"
        "kit.check_platform('toot', out / 'toot')\n"
        "kit.check_platform('tally', out / 'tally')\n"
        "print('all passed')\n")
    result = subprocess.run([sys.executable, "-c", script, str(tmp_path)], cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(site)},
                            capture_output=True, text=True)
    assert result.returncode == 0 and "all passed" in result.stdout, result.stderr[-3000:]


@pytest.mark.slow
def test_the_docs_policy_and_intervention_pass_the_kit(tmp_path):
    """docs/plugins.md's policy and intervention, copied from the page as a reader would,
    register on import and pass the conformance kit as the page says to call it."""
    page = (ROOT / "docs" / "plugins.md").read_text()
    section = page.split("## A policy and an intervention", 1)[1]
    (tmp_path / "shoal_extra.py").write_text(section.split("```python\n", 1)[1].split("```")[0])
    script = ("import sys; from pathlib import Path; import shoal_extra\n"
              "from shoal.testing import check_intervention, check_policy\n"
              "out = Path(sys.argv[1])\n"
              "check_policy('quiet', out / 'policy')\n"
              "check_intervention('sway', out / 'sway', topic='carbon_tax', by=0.2)\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "kit")], cwd=tmp_path,
                          env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]


# A platform with its own engine, as a plug-in author may write one: its running total
# advances where its rows are made (`tables`), and each hook can be made to raise.
POLL_MODULE = '''
import os
import numpy as np
import pyarrow as pa
from pydantic import Field
from shoal.agents.actions import ActionBatch
from shoal.config.base import Strict
from shoal.config.selector import Selector
from shoal.core.state import State
from shoal.core.vocabulary import ActionType as A
from shoal.platforms.spec import PlatformSpec, register
from shoal.store.tables import TABLES, TableSpec
from shoal.world.platform_engine import PlatformEngine

TABLES.declare(TableSpec("poll_log", "round INTEGER, running_total DOUBLE", owner="poll"))


def hook(name, r=2):
    if os.environ.get("POLL_RAISES") == name and r >= 2:  # (from round 2 on)
        raise RuntimeError(f"{name} broke")


class PollConfig(Strict):
    enabled: bool = True
    members: Selector = Field(default_factory=Selector)
    participation: float = 1.0
    max_actions_per_round: int = 1


class PollEngine(PlatformEngine):
    def __init__(self, cfg, world):
        hook("init")
        self.cfg, self.code, self.total, self.r = cfg, 8, 0.0, 0
        self.members = np.ones(world.n_agents, bool)

    def decide(self, world, r, agents, llm_agents):
        hook("decide", r)
        return ActionBatch.empty(len(world.topics))

    def apply(self, world, r, actions):
        return np.zeros(len(actions), np.int8)

    def tables(self, world, r):
        hook("tables", r)
        self.r = r
        self.total += float(world.beliefs.position[:, 0].mean())
        return {"poll_log": pa.table({"round": pa.array([r], pa.int32()),
                                      "running_total": [self.total]})}

    def get_state(self):
        hook("get_state", self.r)
        return State(meta={"total": self.total})

    def set_state(self, state):
        self.total = state.meta["total"]


register(PlatformSpec(name="poll", code=8, label="Poll", actions=(A.DO_NOTHING,),
                      engagements=(), feed_kinds=(), action_help=("do_nothing",),
                      social=False, engine="poll_plugin:PollEngine"), PollConfig)
'''


def _poll_env(tmp_path: Path, **env: str) -> dict:
    (tmp_path / "poll_plugin.py").write_text(POLL_MODULE)
    return {**os.environ, "PYTHONPATH": str(tmp_path), **env}


@pytest.mark.slow
def test_an_engine_whose_rows_change_its_state_resumes_exactly(tmp_path):
    """An engine that advances its state while making its rows (`tables`) keeps that in
    the round's checkpoint, as at round 0: the kit's resume and fork checks pass."""
    script = ("import sys; from pathlib import Path; import poll_plugin\n"
              "from shoal.testing import check_platform\n"
              "check_platform('poll', Path(sys.argv[1]))\n")
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "kit")], cwd=ROOT,
                          env=_poll_env(tmp_path), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.parametrize("hook", ["init", "decide", "tables", "get_state"])
def test_an_engine_that_raises_is_named(tmp_path, hook):
    """An error in a plug-in engine's hook is exit 2 naming the engine, its module and the
    round (no traceback), and the rounds already saved stay."""
    config = {"name": "polled", "seed": 1, "rounds": 4, "population": {"size": 30},
              "topics": ["issue"], "platforms": {"reddit": {"enabled": False}, "poll": {}}}
    path = tmp_path / "poll.yaml"
    path.write_text(yaml.safe_dump(config))
    script = ("import sys; import poll_plugin; from shoal.cli.main import main\n"
              "sys.exit(main(sys.argv[1:]))\n")
    env = _poll_env(tmp_path, POLL_RAISES=hook)
    done = subprocess.run([sys.executable, "-c", script, "run", str(path), "--out",
                           str(tmp_path / "runs"), "--quiet"], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    assert "engine of platform 'poll' (from poll_plugin) raised RuntimeError" in done.stderr
    assert f"{hook} broke" in done.stderr
    if hook != "init":  # (which stops the run before its directory exists)
        assert "round 2: " in done.stderr and "Nothing of round 2 was kept" in done.stderr
        (run,) = (tmp_path / "runs").iterdir()
        assert json.loads((run / "run.json").read_text())["rounds_done"] == 1
        assert read_table(run / "trajectory.duckdb", "poll_log")["round"].tolist() == [0, 1]


def test_a_platform_config_without_a_selector_for_members_is_refused_when_it_registers():
    """docs/plugins.md asks an engine's config model for `enabled`, `members`,
    `participation` and `max_actions_per_round`; one whose `members` is not an agent
    selector is refused when the platform registers, naming it (it used to pass and
    make `shoal check` an internal error)."""
    from pydantic import Field

    from shoal.config.base import Strict
    from shoal.core.registry import PLATFORMS, PluginError
    from shoal.core.vocabulary import ActionType
    from shoal.platforms.spec import PlatformSpec, register

    class Loose(Strict):
        enabled: bool = True
        members: dict | None = None
        participation: float = Field(default=1.0)
        max_actions_per_round: int = 1

    spec = PlatformSpec(name="loose", code=9, label="Loose", actions=(ActionType.DO_NOTHING,),
                        engagements=(), feed_kinds=(), action_help=("do_nothing",),
                        social=False, engine="x:Y")
    with pytest.raises(PluginError, match=r"platform 'loose' \(from tests.test_plugins\): "
                       r"its config model Loose needs the fields members: Selector"):
        register(spec, Loose)
    assert "loose" not in [p.name for p in PLATFORMS.registered()]
