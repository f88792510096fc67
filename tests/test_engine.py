"""End-to-end runs: the quick start's trajectory is complete and consistent, and the same
seed gives identical tables on both executors and any shard count."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from shoal.cli.main import main
from tests.conftest import CONFIGS
from tests.helpers import make_config, run_config, tables_differ


@pytest.fixture(scope="module")
def quickstart_db(tmp_path_factory) -> Path:
    """The quick start, run once through the real CLI."""
    out = tmp_path_factory.mktemp("runs")
    assert main(["run", str(CONFIGS / "quickstart.yaml"), "--out", str(out), "--quiet"]) == 0
    (run_dir,) = out.iterdir()
    return run_dir / "trajectory.duckdb"


def _one(db: Path, sql: str):
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(sql).fetchone()
    finally:
        con.close()


def test_every_agent_has_beliefs_every_round(quickstart_db):
    """beliefs holds (agent, topic) for rounds 0..30, once each — active or not."""
    n_agents, n_topics = _one(quickstart_db,
                              "SELECT (SELECT count(*) FROM agents), (SELECT count(*) FROM topics)")
    assert (n_agents, n_topics) == (1000, 2)
    rows, distinct, rounds = _one(
        quickstart_db,
        "SELECT count(*), count(DISTINCT (round, agent, topic)), count(DISTINCT round) "
        "FROM beliefs")
    assert rounds == 31
    assert rows == distinct == 31 * 1000 * 2
    assert _one(quickstart_db, "SELECT min(position) >= -1 AND max(position) <= 1 "
                               "AND min(confidence) >= 0 AND max(confidence) <= 1 "
                               "FROM beliefs")[0]


def test_exposures_show_only_older_posts_of_others(quickstart_db):
    """Snapshot rounds: every exposure is to a post created before that round, by someone
    else, on the same platform."""
    n, bad_round, own, wrong_platform = _one(quickstart_db, """
        SELECT count(*), count(*) FILTER (WHERE p.round >= e.round),
               count(*) FILTER (WHERE p.author = e.agent),
               count(*) FILTER (WHERE p.platform <> e.platform)
        FROM exposures e JOIN posts p USING (post_id)""")
    total = _one(quickstart_db, "SELECT count(*) FROM exposures")[0]
    assert n == total > 10_000
    assert (bad_round, own, wrong_platform) == (0, 0, 0)


def test_actions_refer_to_existing_posts_and_agents(quickstart_db):
    """Applied likes, reposts, replies... target posts that existed before the round and
    that the agent was shown; follows target agents."""
    missing, too_new, unseen = _one(quickstart_db, """
        SELECT count(*) FILTER (WHERE p.post_id IS NULL),
               count(*) FILTER (WHERE p.round >= a.round),
               count(*) FILTER (WHERE e.post_id IS NULL)
        FROM actions a
        LEFT JOIN posts p ON p.post_id = a.target_post
        LEFT JOIN exposures e ON e.round = a.round AND e.agent = a.agent
                              AND e.post_id = a.target_post
        WHERE a.target_post IS NOT NULL AND a.status = 'ok'""")
    assert (missing, too_new, unseen) == (0, 0, 0)
    assert _one(quickstart_db, """
        SELECT count(*) FROM actions a LEFT JOIN agents g ON g.agent_id = a.target_agent
        WHERE a.target_agent IS NOT NULL AND g.agent_id IS NULL""")[0] == 0
    # Every applied post-creating action made exactly the post it names.
    made, posts = _one(quickstart_db, """
        SELECT count(*) FILTER (WHERE new_post_id IS NOT NULL), (SELECT count(*) FROM posts)
        FROM actions WHERE status = 'ok'""")
    assert made == posts > 0


def test_no_agent_acts_twice_on_a_platform_in_a_round(quickstart_db):
    """max_actions_per_round defaults to 1."""
    assert _one(quickstart_db, """
        SELECT count(*) FROM (SELECT round, platform, agent FROM actions
                              GROUP BY ALL HAVING count(*) > 1)""")[0] == 0


def test_threads_and_counts_are_consistent(quickstart_db):
    """Parents are older posts on the same platform; roots are thread starters."""
    bad_parent, bad_root = _one(quickstart_db, """
        SELECT count(*) FILTER (WHERE q.post_id IS NULL OR q.round >= p.round
                                OR q.platform <> p.platform),
               count(*) FILTER (WHERE r.parent_id IS NOT NULL)
        FROM posts p LEFT JOIN posts q ON q.post_id = p.parent_id
        LEFT JOIN posts r ON r.post_id = p.root_id
        WHERE p.parent_id IS NOT NULL""")
    assert (bad_parent, bad_root) == (0, 0)
    assert _one(quickstart_db, "SELECT count(*) FROM rounds")[0] == 30
    assert _one(quickstart_db, "SELECT sum(n_posts) = (SELECT count(*) FROM posts) "
                               "FROM rounds")[0]


def test_trust_changes_with_interactions(quickstart_db):
    """Trust really moves (MiroShark's never did): likes raise it, downvotes lower it."""
    like, down = _one(quickstart_db, """
        SELECT avg(delta) FILTER (WHERE cause = 'like'),
               avg(delta) FILTER (WHERE cause = 'downvote') FROM trust""")
    assert like == pytest.approx(0.05)
    assert down == pytest.approx(-0.05)
    assert _one(quickstart_db, "SELECT count(DISTINCT value) FROM trust")[0] > 5


@pytest.mark.slow
def test_same_seed_same_tables_on_both_executors(tmp_path, ray_session, quickstart_dict):
    """Local with 1 shard, local with 2 and Ray with 3 shards give identical tables."""
    local = run_config(make_config(quickstart_dict, tmp_path / "a"))
    local2 = run_config(make_config(quickstart_dict, tmp_path / "b",
                                    executor={"kind": "local", "shards": 2}))
    ray3 = run_config(make_config(quickstart_dict, tmp_path / "c",
                                  executor={"kind": "ray", "shards": 3}))
    assert tables_differ(local.dir.db, local2.dir.db) == []
    assert tables_differ(local.dir.db, ray3.dir.db) == []


def test_different_seed_different_tables(tmp_path, quickstart_dict):
    """The seed matters: beliefs, posts and actions all change."""
    small = {**quickstart_dict, "rounds": 5}
    a = run_config(make_config(small, tmp_path / "a"))
    b = run_config(make_config(small, tmp_path / "b", seed=7))
    differ = tables_differ(a.dir.db, b.dir.db)
    assert {"beliefs", "posts", "actions", "exposures", "agents"} <= set(differ)


@pytest.fixture
def small_world(tmp_path, quickstart_dict):
    """Round 0 of a 100-agent quick start."""
    from shoal.world.world import build_world

    return build_world(make_config({**quickstart_dict, "population": {"size": 100}},
                                   tmp_path))


def _trust_events(value: float):
    """One round's trust events (as the apply phase hands them over), the last pair's
    value after the update set to `value`."""
    import numpy as np

    return {"truster": np.array([1, 2, 2]), "trustee": np.array([5, 7, 7]),
            "cause": np.array([0, 0, 2], dtype=np.int8),  # like; like and downvote
            "delta": np.array([0.05, 1e308, -1e308]), "value": np.array([0.55, value, value])}


@pytest.mark.parametrize(("field", "bad", "what"), [
    ("position", float("nan"), "positions"), ("position", float("-inf"), "positions"),
    ("confidence", float("inf"), "confidences")])
@pytest.mark.parametrize("agent", [3, 97])
def test_non_finite_belief_stops_naming_the_rule(small_world, field, bad, what, agent):
    """A belief the update left NaN or infinite stops the round with NumericError naming
    the rule, the first agent and topic, and that the round was not kept (the check on
    one range of agents and on several)."""
    from types import SimpleNamespace

    from shoal.core.errors import NumericError
    from shoal.core.workers import SERIAL, Workers
    from shoal.engine.update import check_finite

    applied = SimpleNamespace(trust=_trust_events(0.6))
    check_finite(small_world, applied, 4)  # all finite: nothing happens
    getattr(small_world.beliefs, field)[agent, 1] = bad
    for workers in (SERIAL, Workers(3, min_rows=2)):
        with pytest.raises(NumericError) as err:
            check_finite(small_world, applied, 4, workers)
    msg = str(err.value)
    assert f"round 4: the belief rule 'social_influence' made 1 {what} not finite" in msg
    assert f"agent {agent}, topic {small_world.topics[1]!r}" in msg
    assert "Nothing of round 4 was kept" in msg


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_trust_stops_naming_the_deltas(small_world, bad):
    """Trust the update left NaN or infinite stops the round naming the pair and the
    trust deltas that produced it."""
    from types import SimpleNamespace

    from shoal.core.errors import NumericError
    from shoal.engine.update import check_finite

    with pytest.raises(NumericError) as err:
        check_finite(small_world, SimpleNamespace(trust=_trust_events(bad)), 4)
    msg = str(err.value)
    assert "round 4: trust became not finite for 2 event(s)" in msg
    assert "agent 2 in agent 7, from downvote, like" in msg
    assert "beliefs.trust.downvote, beliefs.trust.like" in msg


@pytest.mark.filterwarnings("ignore:overflow:RuntimeWarning",
                            "ignore:invalid value:RuntimeWarning")
def test_cli_run_whose_rule_overflows_exits_2(tmp_path, quickstart_dict, capsys):
    """A config whose numbers are finite but whose update overflows (a huge social
    influence rate): `shoal run` exits 2 naming the rule, the round is not kept and the
    run is recorded as stopped."""
    import json

    from tests.conftest import write_config
    from tests.helpers import query

    data = {**quickstart_dict, "rounds": 3, "population": {"size": 100},
            "beliefs": {"update": {"rule": "social_influence", "rate": 1e308,
                                   "novelty_new": 1e308, "novelty_seen": 1e308}}}
    path = write_config(tmp_path / "c.yaml", data)
    assert main(["run", str(path), "--out", str(tmp_path / "runs"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "round 1: the belief rule 'social_influence' made" in err
    assert "not finite" in err and "check beliefs.update's parameters" in err
    (run_dir,) = (tmp_path / "runs").iterdir()
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["status"] == "stopped" and meta["rounds_done"] == 0
    assert query(run_dir / "trajectory.duckdb", "SELECT count(*) FROM rounds") == [(0,)]
