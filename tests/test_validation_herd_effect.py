"""The `herd_effect` validation case (Muchnik, Aral & Taylor 2013) at quick size, its
measure, its scenario against configs/herd_effect, and the policy's correction rule."""

from __future__ import annotations

import csv
import math

import duckdb
import numpy as np
import pytest
import yaml

from shoal import open_run
from shoal.agents.observation import PlatformView
from shoal.agents.rule_policy import RulePolicy, RulePolicyConfig
from shoal.config import TopicSpec, parse_config
from shoal.core.counter_rng import CounterRNG
from shoal.core.vocabulary import ActionType
from shoal.validation.case import mean_interval
from shoal.validation.cases import herd_effect
from shoal.validation.runner import validate
from tests.conftest import CONFIGS

REPLICATES = 3


@pytest.fixture(scope="module")
def result(ray_session, tmp_path_factory):
    out = tmp_path_factory.mktemp("herd")
    # three replicates, not the quick size's six (the suite's time): the checks' intervals
    # and the effect's sign need no more
    done = validate(["herd_effect"], out, quick=True, replicates=REPLICATES)
    (r,) = done.results
    return out / "herd_effect-rule", r


@pytest.mark.slow  # runs simulations (the quick tier leaves it out)
def test_quick_run_has_finite_checks_and_a_plot(result):
    folder, r = result
    assert r.error is None, r.error
    assert [c.target for c in r.checks] == [herd_effect.UP_TARGET, 0.0,
                                             herd_effect.FIRST_UP_TARGET]
    for c in r.checks:
        assert math.isfinite(c.simulated)
        assert all(math.isfinite(v) for v in c.interval)
        assert c.interval[0] <= c.simulated <= c.interval[1]
        assert c.tolerance
    assert r.plots == ["herd_effect.png"]
    assert (folder / "herd_effect.png").stat().st_size > 0
    assert len(r.seeds) == REPLICATES


@pytest.mark.slow  # runs simulations (the quick tier leaves it out)
def test_checks_are_the_relative_effects_of_the_recorded_scores(result):
    """The checks recomputed by hand from scores.csv; the up arm ends above the control,
    and every arm's posts score (the measure reads the treated posts, not nothing)."""
    folder, r = result
    with (folder / "scores.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [int(row["seed"]) for row in rows] == r.seeds
    s = {arm: np.array([float(row[arm]) for row in rows])
         for arm in (*herd_effect.ARMS, "first_view_up_up", "first_view_up_control")}
    assert (s["control"] > 0).all()
    up = 100 * (s["up"] - s["control"]) / s["control"]
    down = 100 * (s["down"] - s["control"]) / s["control"]
    first = 100 * (s["first_view_up_up"] - s["first_view_up_control"]) / s[
        "first_view_up_control"]
    for check, values in zip(r.checks, (up, down, first), strict=True):
        m, interval = mean_interval(values)
        assert check.simulated == pytest.approx(m)
        assert check.interval == pytest.approx(interval)
    assert up.mean() > 0
    lo, hi = herd_effect.UP_BAND
    assert r.checks[0].passed == (lo <= up.mean() <= hi)
    low, high = r.checks[1].interval
    bound = herd_effect.DOWN_BOUND
    assert r.checks[1].passed == (-bound <= low and high <= bound)
    lo, hi = herd_effect.FIRST_UP_BAND
    assert r.checks[2].passed == (lo <= first.mean() <= hi)


@pytest.mark.slow  # runs simulations (the quick tier leaves it out)
def test_the_forks_carry_the_seeded_votes(result):
    """Each arm's fork holds the 40 treated posts, with exactly its seeded vote at least."""
    folder, _ = result
    (root,) = [p for p in folder.iterdir() if p.name.startswith("herd-experiment-")]
    for arm, (up, down) in {"up": (1, 0), "control": (0, 0), "down": (0, 1)}.items():
        (unit,) = root.glob(f"r0-{arm}")
        (run_dir,) = [p for p in unit.iterdir() if p.is_dir()]
        run = open_run(run_dir)
        posts = run.posts.set_index("post_id").loc[run.treated_posts()]
        assert len(posts) == 40
        assert (posts["seed_up"] == up).all() and (posts["seed_down"] == down).all()
        assert (posts["up"] >= up).all() and (posts["down"] >= down).all()
        if arm != "down":  # the first viewers' up-vote rate, in SQL from the file
            ids = ", ".join(map(str, run.treated_posts()))
            ((rate,),) = duckdb.connect(str(run_dir / "trajectory.duckdb"),
                                        read_only=True).sql(
                f"WITH e AS (SELECT DISTINCT round, agent, post_id FROM exposures WHERE "
                f"post_id IN ({ids})), first AS (SELECT * FROM e QUALIFY round = min(round) "
                "OVER (PARTITION BY post_id)), up AS (SELECT DISTINCT round, agent, "
                "target_post AS post_id FROM actions WHERE status = 'ok' AND action = "
                f"'upvote' AND target_post IN ({ids})) SELECT avg((up.agent IS NOT NULL)"
                "::INT) FROM first LEFT JOIN up USING (round, agent, post_id)").fetchall()
            assert 0 < rate < 0.5  # (a chance per view: most viewers do not vote)
            assert herd_effect.first_view_up_rate(run) == pytest.approx(rate)


def test_the_scenario_is_configs_herd_effect():
    """The case runs the documented experiment: the config and the 40 treated posts of
    configs/herd_effect (texts aside: the case words them itself)."""
    shipped = yaml.safe_load((CONFIGS / "herd_effect.yaml").read_text())
    assert parse_config(shipped) == parse_config(herd_effect.SCENARIO)
    for arm in herd_effect.ARMS:
        (mine,) = herd_effect.treated_posts(arm)
        (theirs,) = yaml.safe_load((CONFIGS / "herd_effect" / f"{arm}.yaml").read_text())
        assert mine["round"] == theirs["round"] == herd_effect.BRANCH_ROUND + 1
        strip = [{k: v for k, v in item.items() if k != "text"} for item in mine["items"]]
        assert strip == [{k: v for k, v in item.items() if k != "text"}
                         for item in theirs["items"]]
        assert all(item["text"] for item in mine["items"])


def _view(up: list[int], down: list[int]) -> PlatformView:
    """One reddit agent at position 0.5 on one topic, whose feed holds posts with the same
    stance (0.5) and the given vote counts."""
    k = len(up)
    return PlatformView(
        platform=1, name="reddit", agents=np.array([0]),
        feed=np.arange(k)[None, :], author=np.full((1, k), 1), kind=np.zeros((1, k), np.int8),
        stance=np.full((1, k, 1), 0.5), up=np.array([up], np.int32),
        down=np.array([down], np.int32), follows_author=np.zeros((1, k), bool),
        trust=np.full((1, k), 0.5), voted=np.zeros((1, k), bool),
        reposted=np.zeros((1, k), bool))


def _upvote_weights(cfg: RulePolicyConfig, view: PlatformView) -> np.ndarray:
    policy = RulePolicy(cfg, [TopicSpec(name="t")], CounterRNG(1), np.ones((2, 1)),
                        ["a", "b"])
    types, w = policy.weights(view, np.array([[0.5]]), np.array([[0.5]]))
    return w[0, types.index(ActionType.UPVOTE)], w[0, types.index(ActionType.DOWNVOTE)]


def test_correction_lifts_upvotes_of_posts_below_zero_only():
    """w_up × (1 + correction · ln(1 + max(down − up, 0))); downvote weights untouched;
    correction 0 leaves every weight as it was."""
    view = _view(up=[0, 0, 1, 3, 2], down=[0, 1, 1, 1, 5])
    plain_up, plain_down = _upvote_weights(RulePolicyConfig(social_proof=0.3), view)
    up, down = _upvote_weights(RulePolicyConfig(social_proof=0.3, correction=0.75), view)
    factor = 1 + 0.75 * np.log1p(np.maximum(np.array([0, 1, 0, -2, 3]), 0))
    np.testing.assert_allclose(up, plain_up * factor)
    np.testing.assert_array_equal(down, plain_down)
    assert up[1] > plain_up[1] and up[0] == plain_up[0] and up[3] == plain_up[3]
    assert RulePolicyConfig().correction == 0.0


def test_a_control_without_a_positive_score_has_no_relative_effect():
    """Muchnik et al.'s effects are percentages of the control's score: of 0 (±inf) or of
    a negative score (the sign turned) they mean nothing, and the interval leaves them out
    instead of averaging an infinity away or in."""
    effect = herd_effect.relative(np.array([5.0, 3.0, -2.0]), np.array([4.0, 0.0, -4.0]))
    assert effect[0] == pytest.approx(25.0) and np.isnan(effect[1:]).all()
    assert mean_interval(effect)[0] == pytest.approx(25.0)
