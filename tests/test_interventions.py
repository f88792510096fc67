"""Interventions: each kind does what it says, fires exactly once (also across a resume
right after its round), and bad entries are clear errors before anything is written."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

from shoal.cli.main import main
from shoal.core.errors import InputError
from tests.conftest import write_config
from tests.helpers import make_config, query, run_config, tables_differ

ROUNDS = 9


def _schedule() -> list[dict]:
    return [
        {"kind": "posts", "round": 0, "items": [
            {"platform": "reddit", "text": "Seed up: I support the carbon tax.",
             "stance": {"carbon_tax": 0.7}, "votes": {"up": 1}},
            {"platform": "reddit", "text": "Seed down: I oppose the carbon tax.",
             "stance": {"carbon_tax": -0.7}, "votes": {"down": 1}}]},
        {"kind": "event", "round": 3, "text": "BREAKING: the carbon tax passes",
         "stance": {"carbon_tax": 0.9}, "target": {"groups": ["activists"]}, "duration": 2},
        {"kind": "beliefs", "round": 4, "topic": "nuclear_power", "set": -0.8,
         "confidence": 0.9, "target": {"groups": ["activists"]}},
        {"kind": "add_agents", "round": 5, "count": 30, "group": "newcomers", "follow": 4},
        {"kind": "remove_agents", "round": 6, "target": {"ids": [1, 2, 3]}},
        {"kind": "set", "round": 7, "values": {"platforms.twitter.recommender": "random",
                                               "platforms.twitter.feed_size": 6}},
        {"kind": "post", "round": 8, "platform": "twitter", "author": 5,
         "text": "Agent five speaks.", "stance": {"nuclear_power": 0.5}},
    ]


@pytest.fixture(scope="module")
def iv_dict() -> dict:
    import yaml

    from tests.conftest import CONFIGS

    data = yaml.safe_load((CONFIGS / "quickstart.yaml").read_text())
    data.update(rounds=ROUNDS, population={"size": 300, "groups": [
        {"name": "activists", "fraction": 0.1}]}, interventions=_schedule())
    return data


@pytest.fixture(scope="module")
def iv_run(tmp_path_factory, iv_dict):
    """The schedule run once, uninterrupted."""
    return run_config(make_config(iv_dict, tmp_path_factory.mktemp("iv")))



def test_each_entry_fires_once_in_its_round(iv_run):
    """One interventions row per entry, at its round, in schedule order."""
    rows = query(iv_run.dir.db, "SELECT round, idx, kind FROM interventions ORDER BY idx")
    assert rows == [(0, 0, "posts"), (3, 1, "event"), (4, 2, "beliefs"), (5, 3, "add_agents"),
                    (6, 4, "remove_agents"), (7, 5, "set"), (8, 6, "post")]
    assert query(iv_run.dir.db, "SELECT round, n_interventions FROM rounds WHERE "
                             "n_interventions > 0 ORDER BY round") == [
        (3, 1), (4, 1), (5, 1), (6, 1), (7, 1), (8, 1)]


def test_seed_posts_carry_their_initial_votes(iv_run):
    """Round-0 posts by the news account, visible from round 1, with their seeded votes."""
    rows = query(iv_run.dir.db, "SELECT post_id, author, round, seed_up, seed_down FROM posts "
                             "WHERE text LIKE 'Seed %' ORDER BY post_id")
    assert rows == [(0, -1, 0, 1, 0), (1, -1, 0, 0, 1)]
    first_seen = query(iv_run.dir.db, "SELECT min(round) FROM exposures WHERE post_id IN (0, 1)")
    assert first_seen == [(1,)]
    up, down = query(iv_run.dir.db, "SELECT up, down FROM post_stats WHERE post_id = 0")[0]
    assert up >= 1 and down >= 0


def test_event_is_pinned_to_the_group_for_its_duration(iv_run):
    """The breaking news tops the feeds of acting activists in rounds 3-4, nobody else's,
    and expires after."""
    db = iv_run.dir.db
    shown = query(db, """
        SELECT e.round, min(e.rank), max(e.rank), bool_and(a.group_name = 'activists'),
               count(DISTINCT e.agent)
        FROM exposures e JOIN posts p USING (post_id) JOIN agents a ON a.agent_id = e.agent
        WHERE p.kind = 'event' GROUP BY e.round ORDER BY e.round""")
    assert [r[0] for r in shown] == [3, 4]
    assert all(r[1] == 0 and r[2] == 0 and r[3] for r in shown)
    acting_activists = query(db, """
        SELECT count(DISTINCT x.agent) FROM actions x JOIN agents a ON a.agent_id = x.agent
        WHERE x.round = 3 AND a.group_name = 'activists'""")[0][0]
    assert shown[0][4] == acting_activists > 0


def test_beliefs_are_set_for_the_group(iv_run):
    """At the start of round 4 the activists' nuclear position is -0.8 with confidence 0.9
    (visible in round 3's log as before, and as the starting point of round 4's update)."""
    db = iv_run.dir.db
    before = query(db, """SELECT avg(b.position) FROM beliefs b JOIN agents a
                       ON a.agent_id = b.agent WHERE b.round = 3 AND b.topic = 'nuclear_power'
                       AND a.group_name = 'activists'""")[0][0]
    after = query(db, """SELECT avg(b.position), min(b.confidence) FROM beliefs b JOIN agents a
                      ON a.agent_id = b.agent WHERE b.round = 4
                      AND b.topic = 'nuclear_power' AND a.group_name = 'activists'""")[0]
    assert before > -0.5
    assert after[0] < -0.7 and after[1] >= 0.85


def test_added_agents_join_and_act(iv_run):
    """30 newcomers (ids 300-329) join at round 5 in their group, follow 4 members each,
    get beliefs from then on, and act."""
    db = iv_run.dir.db
    assert query(db, "SELECT count(*), min(agent_id), max(agent_id), min(joined_round), "
                  "max(group_name) FROM agents WHERE joined_round > 0") == [
        (30, 300, 329, 5, "newcomers")]
    assert query(db, "SELECT min(round) FROM beliefs WHERE agent >= 300") == [(5,)]
    assert query(db, "SELECT count(*) FROM follows WHERE round = 5 AND follower >= 300 "
                  "AND op = 'follow' AND platform = 'twitter'")[0][0] >= 30 * 4
    assert query(db, "SELECT count(*) FROM actions WHERE agent >= 300")[0][0] > 0


def test_removed_agents_never_act_again(iv_run):
    """Agents 1, 2, 3 act in no round from 6 on; their earlier posts stay."""
    assert query(iv_run.dir.db, "SELECT count(*) FROM actions WHERE agent IN (1, 2, 3) "
                             "AND round >= 6") == [(0,)]


def test_parameter_change_applies_from_its_round(iv_run):
    """From round 7 twitter feeds hold 6 items (feed_size set by the intervention)."""
    sizes = query(iv_run.dir.db, "SELECT round, max(rank) + 1 FROM exposures "
                              "WHERE platform = 'twitter' AND round >= 5 GROUP BY round "
                              "ORDER BY round")
    assert [s for r, s in sizes if r < 7] == [10, 10] and all(s == 6 for r, s in sizes if r >= 7)


def test_injected_agent_post_reaches_followers(iv_run):
    """A post injected for agent 5 is stamped round 7 and shown to others in round 8."""
    db = iv_run.dir.db
    ((post_id, rnd),) = query(db, "SELECT post_id, round FROM posts WHERE text = "
                               "'Agent five speaks.'")
    assert rnd == 7
    assert query(db, f"SELECT count(*) FROM exposures WHERE post_id = {post_id} "
                  "AND round = 8")[0][0] > 0


@pytest.mark.parametrize("fault", ["after_checkpoint:5", "mid_round:6", "after_commit:3"])
@pytest.mark.slow
def test_fires_once_across_a_resume(tmp_path, iv_dict, iv_run, fault):
    """Killed right after (or inside the round after) an intervention round, resumed: the
    interventions table and every other table equal the uninterrupted run's."""
    path = write_config(tmp_path / "c.yaml", iv_dict)
    out = tmp_path / "runs"
    env = {**os.environ, "SHOAL_FAULT": fault}
    killed = subprocess.run([sys.executable, "-m", "shoal.cli", "run", str(path), "--out",
                             str(out), "--quiet"], env=env, capture_output=True, text=True)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    (run_dir,) = out.iterdir()
    assert main(["resume", str(run_dir), "--quiet"]) == 0
    db = run_dir / "trajectory.duckdb"
    assert query(db, "SELECT count(*), count(DISTINCT idx) FROM interventions") == [(7, 7)]
    assert tables_differ(iv_run.dir.db, db) == []


@pytest.mark.parametrize(("entry", "message"), [
    ({"kind": "remove_agents", "round": 2, "target": {"ids": [5000]}},
     "interventions.0.target.ids: no agent 5000"),
    ({"kind": "beliefs", "round": 2, "topic": "carbon_tax", "set": 0.1,
      "target": {"groups": ["nobody"]}}, "interventions.0.target.groups: unknown groups"),
    ({"kind": "post", "round": 2, "platform": "twitter", "author": 5000, "text": "x"},
     "interventions.0.author: no agent 5000"),
    ({"kind": "set", "round": 2, "values": {"policy.post_rate": 7}},
     "policy.post_rate: must be <= 1"),
    ({"kind": "set", "round": 2, "values": {"population.size": 7}},
     "cannot be changed mid-run"),
    ({"kind": "event", "round": 2, "text": "x", "stance": {"taxes": 1}},
     "interventions.0.stance: unknown topics"),
    ({"kind": "event", "round": 99, "text": "x"}, "is after the last round"),
])
def test_bad_entries_exit_2_and_write_nothing(tmp_path, quickstart_dict, capsys, entry,
                                              message):
    """Each bad entry is named with its path; no run directory is created."""
    data = {**quickstart_dict, "rounds": 5, "interventions": [entry]}
    path = write_config(tmp_path / "c.yaml", data)
    out = tmp_path / "runs"
    assert main(["run", str(path), "--out", str(out), "--quiet"]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists() or not any(out.iterdir())


def test_fraction_targets_are_seeded(tmp_path, quickstart_dict):
    """A fractional target picks the same agents in two runs with the same seed."""
    entry = {"kind": "remove_agents", "round": 2, "target": {"fraction": 0.2}}
    data = {**quickstart_dict, "rounds": 2, "population": {"size": 200},
            "interventions": [entry]}
    a = run_config(make_config(data, tmp_path / "a"))
    b = run_config(make_config(data, tmp_path / "b"))
    assert np.array_equal(a.world.alive, b.world.alive)
    assert 20 < (~a.world.alive).sum() < 60
    effect = json.loads(query(a.dir.db, "SELECT effect FROM interventions")[0][0])
    assert effect["agents"] == int((~a.world.alive).sum())


def test_unknown_platform_in_post_is_an_error(tmp_path, quickstart_dict):
    """Posting to a disabled platform is caught before the run starts."""
    data = {**quickstart_dict, "rounds": 3,
            "platforms": {"twitter": {}, "reddit": {"enabled": False}},
            "interventions": [{"kind": "post", "round": 1, "platform": "reddit", "text": "x"}]}
    with pytest.raises(InputError, match="reddit is not enabled"):
        run_config(make_config(data, tmp_path))
