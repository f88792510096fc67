"""What breaking news does to beliefs under the default rule (docs/beliefs.md, "What news
does"): a reader's first reading of news of stance s moves it by `news_rate` · s wherever it
stands, once (not again for another platform's copy or a later reading), and the shift
persists; and
the shipped news experiment, at a reduced size, measures an effect of the news whose
interval excludes 0, of the size the rule predicts."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from shoal.analysis.experiments import open_experiment
from shoal.beliefs.exposure import ExposureHistory
from shoal.beliefs.rules import Exposures, UpdateContext
from shoal.beliefs.rules.social_influence import SocialInfluence, SocialInfluenceRule
from shoal.beliefs.state import BeliefState
from shoal.beliefs.trust import TrustStore
from shoal.cli.main import main
from shoal.core.posts import NewPosts, PostKind, PostStore
from tests.conftest import ROOT, write_config

T = 2  # topics: the news addresses topic 0 only
NEWS = "BREAKING: parliament passes the carbon levy"


def store() -> PostStore:
    """Posts 0-1: peer posts; 2-3: one news item's copies on platforms 0 and 1; 4: other
    news (another text), all on topic 0."""
    posts = PostStore(T, 2)
    posts.append(NewPosts(
        platform=np.array([0, 1], np.int8), author=np.array([5, 6], np.int32),
        kind=np.zeros(2, np.int8), parent=np.full(2, -1),
        stance=np.array([[0.8, np.nan], [-0.6, 0.3]]), text=["a", "b"]), 1)
    posts.append(NewPosts(
        platform=np.array([0, 1, 0], np.int8), author=np.full(3, -1, np.int32),
        kind=np.full(3, PostKind.EVENT, np.int8), parent=np.full(3, -1),
        stance=np.array([[0.45, np.nan], [0.45, np.nan], [-0.9, np.nan]]),
        text=[NEWS, NEWS, "BREAKING: the levy is repealed"]), 2)
    return posts


def feed(agents: list[int], rows: list[list[int]]) -> Exposures:
    """Exposures of `agents` to the posts of `rows` (oldest first, -1 padded on the left),
    no votes, trust 0.5."""
    width = max(len(r) for r in rows)
    posts = np.array([[-1] * (width - len(r)) + r for r in rows], np.int64)
    valid = posts >= 0
    return Exposures(np.array(agents, np.int64), posts, np.zeros(posts.shape, np.int32),
                     np.zeros(posts.shape, np.int32), np.where(valid, 0.5, 0.0))


class World:
    """Positions, confidences, anchors and history of 4 agents, updated round by round."""

    def __init__(self, cfg: SocialInfluence):
        self.rule = SocialInfluenceRule(cfg)
        self.posts = store()
        self.beliefs = BeliefState(np.array([[-0.5, 0.1], [0.2, -0.3], [0.7, 0.0],
                                             [-0.9, 0.4]]), np.full((4, T), 0.4))
        self.x0 = self.beliefs.position.copy()
        self.history = ExposureHistory()
        self.round = 3

    def step(self, exposures: Exposures) -> np.ndarray:
        """One update; returns the positions after it."""
        ctx = UpdateContext(round=self.round, posts=self.posts, trust=TrustStore(0.5),
                            history=self.history, engagement=np.zeros((4, T)),
                            initial_position=self.x0)
        self.rule.update(self.beliefs, exposures, ctx)
        self.history.record(*exposures.flat(), self.round)
        self.round += 1
        return self.beliefs.position.copy()


def nobody() -> Exposures:
    return feed([0], [[]])


def test_a_first_reading_moves_every_reader_alike_and_it_persists() -> None:
    w = World(SocialInfluence(rule="social_influence"))  # the defaults: anchor 0.15
    start = w.beliefs.position.copy()
    after = w.step(feed([0, 2], [[2], [2]]))
    rate = SocialInfluence(rule="social_influence").news_rate
    assert rate == pytest.approx(0.17)
    want = start.copy()
    want[[0, 2], 0] += rate * 0.45  # -0.5 and 0.7 (beyond the news' 0.45) both move up
    np.testing.assert_allclose(after, want, rtol=0, atol=1e-12)
    for _ in range(20):  # the anchor moved with the reader: nothing wears off
        later = w.step(nobody())
    np.testing.assert_allclose(later, want, rtol=0, atol=1e-12)


def test_without_persistence_the_shift_wears_off_at_the_anchors_rate() -> None:
    w = World(SocialInfluence(rule="social_influence", news_persistence=0.0, anchor=0.15))
    start = w.beliefs.position.copy()
    moved = w.step(feed([0], [[2]]))[0, 0] - start[0, 0]
    # The update that moved it already pulled back 0.15 of the shift.
    assert moved == pytest.approx(0.85 * 0.17 * 0.45, abs=1e-12)
    for _ in range(10):
        later = w.step(nobody())
    assert later[0, 0] - start[0, 0] == pytest.approx(moved * 0.85 ** 10, abs=1e-12)


def test_news_persuades_once_per_reader_across_copies_and_rounds() -> None:
    cfg = SocialInfluence(rule="social_influence", anchor=0.0)
    w = World(cfg)
    start = w.beliefs.position.copy()
    # Agent 0 is shown both platforms' copies in one round; agent 1 one copy.
    after = w.step(feed([0, 1], [[2, 3], [3]]))
    np.testing.assert_allclose(after[[0, 1], 0], start[[0, 1], 0] + 0.17 * 0.45,
                               atol=1e-12)
    # Next round: the other copy, or the same one again, moves nobody; news with another
    # text is a first reading.
    again = w.step(feed([0, 1], [[3], [2, 4]]))
    assert again[0, 0] == after[0, 0]
    assert again[1, 0] == pytest.approx(after[1, 0] - 0.17 * 0.9, abs=1e-12)
    np.testing.assert_array_equal(again[:, 1], start[:, 1])  # the news addresses topic 0


def test_peer_posts_keep_their_formula_beside_the_news() -> None:
    """A feed of a peer post and the news moves the reader by the peer nudge alone (as
    without the news) plus the news shift."""
    cfg = SocialInfluence(rule="social_influence", rate=0.3, anchor=0.0)
    both = World(cfg).step(feed([3], [[0, 2]]))
    peer = World(cfg).step(feed([3], [[0]]))
    assert both[3, 0] == pytest.approx(peer[3, 0] + 0.17 * 0.45, abs=1e-12)
    assert peer[3, 0] != -0.9  # the peer post did move it


def test_positions_and_anchors_stay_on_the_scale() -> None:
    w = World(SocialInfluence(rule="social_influence"))
    w.beliefs.position[2, 0] = w.x0[2, 0] = 0.95
    after = w.step(feed([2], [[2]]))
    assert after[2, 0] == 1.0 and w.x0[2, 0] == 1.0


def test_news_rate_null_makes_news_an_ordinary_post() -> None:
    """`news_rate: null` is the behaviour before: the event post is weighed like a peer
    post (trust, votes, novelty, resistance, `rate`), read again or not."""
    cfg = SocialInfluence(rule="social_influence", rate=0.08, anchor=0.0, news_rate=None)
    w = World(cfg)
    as_news = w.step(feed([0, 1], [[2, 3], [3]]))
    plain = World(cfg)
    plain.posts.kind[:] = PostKind.POST  # the same posts, not news
    as_posts = plain.step(feed([0, 1], [[2, 3], [3]]))
    np.testing.assert_array_equal(as_news, as_posts)
    # Agent 0 read two posts of stance 0.45: 2 × 0.5 · 0.3 · 1.5 · 0.08 / (0.3 + 0.7 · 0.4).
    step = 2 * 0.5 * 0.3 * 1.5 * 0.08 / (0.3 + 0.7 * 0.4) * (0.45 + 0.5)
    assert as_news[0, 0] == pytest.approx(-0.5 + step, abs=1e-12)


# -------------------------------------------------------- the shipped experiment, smaller


def reduced_news_experiment() -> dict:
    """configs/experiments/news.yaml as shipped, smaller: 200 agents, 16 rounds with the
    news at round 8 (still 3 rounds pinned), 5 replicates branching at round 4 (the
    fewest with a bootstrap interval), the arms without the news and with twice its
    stance."""
    data = yaml.safe_load((ROOT / "configs" / "experiments" / "news.yaml").read_text())
    data["population"]["size"] = 200
    data["rounds"] = 16
    (news,) = [i for i in data["interventions"] if i.get("name") == "news"]
    news["round"] = 8
    exp = data["experiment"]
    exp["replicates"] = 5
    exp["metrics"] = ["belief_mean.carbon_tax", "belief_sd.carbon_tax"]
    exp["arms"] = {k: exp["arms"][k] for k in ("control", "no_news", "double_stance")}
    return data


@pytest.fixture(scope="module")
def effects(ray_session, tmp_path_factory) -> tuple[pd.DataFrame, Path]:
    tmp = tmp_path_factory.mktemp("news")
    config = write_config(tmp / "news.yaml", reduced_news_experiment())
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main(["experiment", str(config), "--out", str(tmp / "out"), "--quiet"])
    assert code == 0, err.getvalue()
    (root,) = [p for p in (tmp / "out").iterdir() if p.is_dir()]
    return pd.read_csv(root / "effects.csv"), root


@pytest.mark.slow  # runs simulations (the quick tier leaves it out)
def test_the_news_experiment_measures_the_news(effects) -> None:
    table, _ = effects
    row = table.set_index(["arm", "metric"]).loc[("no_news", "belief_mean.carbon_tax")]
    assert row["n"] == 5
    # Without the news the mean ends lower, and neither interval reaches 0.
    assert row["t_high"] < 0 and row["boot_high"] < 0
    twice = table.set_index(["arm", "metric"]).loc[("double_stance", "belief_mean.carbon_tax")]
    assert twice["t_low"] > 0 and twice["boot_low"] > 0


@pytest.mark.slow  # runs simulations (the quick tier leaves it out)
def test_the_effect_is_the_size_the_rule_predicts(effects) -> None:
    """Each replicate's effect on the mean is the news' readers' shift (news_rate × its
    stance, clipped at 1) summed over the population (peer persuasion adds next to nothing
    at the calibrated `rate`): within 5% of it, computed from the control runs' exposures
    and positions."""
    _, root = effects
    exp = open_experiment(root)
    out = exp.outcomes
    predicted, measured = [], []
    for replicate in range(5):
        run = exp.run("control", replicate)
        news = set(run.posts.query("kind == 'event'")["post_id"])
        assert len(news) == 2  # one copy per platform
        shown = run.table("exposures")
        shown = shown[shown["post_id"].isin(news)]
        first = shown.sort_values("round").drop_duplicates("agent")
        b = run.beliefs.query("topic == 'carbon_tax'")
        position = b.set_index(["round", "agent"])["position"]
        # The position a reader had when it first read the news: at the end of the round
        # before (peer nudges of that round are negligible).
        x = position.loc[list(zip(first["round"] - 1, first["agent"], strict=True))]
        moved = np.minimum(x.to_numpy() + 0.17 * 0.45, 1.0) - x.to_numpy()  # clipped at 1
        predicted.append(float(moved.sum()) / b["agent"].nunique())
        values = out.query("metric == 'belief_mean.carbon_tax' and replicate == @replicate")
        values = values.set_index("arm")["value"]
        measured.append(values["control"] - values["no_news"])
    np.testing.assert_allclose(measured, predicted, rtol=0.05)
