"""Stance estimation for free text (beliefs.stance): accuracy on a labelled set we wrote
(tests/data/stance_labelled.jsonl) and exact reading of the rule-based agents' posts.

The labelled set has two splits: `dev` (78 texts, the lexicon was tuned while writing it)
and `heldout` (40 texts written after the lexicon was frozen, never tuned on). A pair
(text, topic) is right when the sign of the estimate (|s| < 0.1 counts as 0) equals the
label, or when the label says "mentioned, no stance" and the estimate is NaN. The floors
below are the measured values rounded down (docs/models.md has the numbers).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from shoal.agents.post_text import PostWriter
from shoal.beliefs.render import stance_bin
from shoal.beliefs.stance import estimate_stance
from shoal.beliefs.topics import TopicMatcher
from shoal.config import TopicSpec
from tests.conftest import ROOT

TOPICS = [
    TopicSpec(name="carbon_tax", label="the carbon tax",
              keywords=["carbon tax", "carbon levy", "carbon pricing"]),
    TopicSpec(name="nuclear_power", label="nuclear power",
              keywords=["nuclear power", "nuclear energy", "reactors"]),
    TopicSpec(name="rent_control", label="rent control", keywords=["rent control", "rent caps"]),
]
NAMES = [t.name for t in TOPICS]
ROWS = [json.loads(line) for line in
        (ROOT / "tests" / "data" / "stance_labelled.jsonl").read_text().splitlines() if line]


def sign(value: float) -> int:
    """-1, 0 or +1 with a dead zone of 0.1 around 0."""
    return 0 if abs(value) < 0.1 else int(np.sign(value))


def scores(split: str | None) -> tuple[int, int, int]:
    """(right, labelled pairs, pairs where the estimator gave a stance) for a split."""
    right = total = decided = 0
    for row in ROWS:
        if split is not None and row["split"] != split:
            continue
        est, _ = estimate_stance(row["text"], TOPICS)
        for topic, label in row["stance"].items():
            value = est[NAMES.index(topic)]
            total += 1
            decided += not np.isnan(value)
            if label is None:
                right += bool(np.isnan(value))
            else:
                right += (not np.isnan(value)) and sign(value) == label
    return right, total, decided


def test_the_set_is_big_and_varied_enough() -> None:
    """≥ 60 texts, with negations, two-topic texts, neutral and no-stance labels."""
    assert len(ROWS) >= 60
    two_topic = sum(len(r["stance"]) >= 2 for r in ROWS)
    neutral = sum(0 in r["stance"].values() for r in ROWS)
    no_stance = sum(None in r["stance"].values() for r in ROWS)
    negated = sum(any(w in r["text"].lower() for w in ("not ", "n't", "never", "no "))
                  for r in ROWS)
    assert two_topic >= 10 and neutral >= 8 and no_stance >= 5 and negated >= 15


@pytest.mark.parametrize(("split", "floor"), [(None, 0.88), ("dev", 0.95), ("heldout", 0.72)])
def test_sign_accuracy_floor(split: str | None, floor: float) -> None:
    """Sign accuracy per split, at least the floor we measured (0.90 overall, 0.98 dev,
    0.75 held-out)."""
    right, total, _ = scores(split)
    assert right / total >= floor, (right, total)


def test_when_it_answers_it_is_almost_always_right() -> None:
    """On the held-out split the lexicon abstains (NaN) on most of its misses; of the
    stances it does give, ≥ 0.9 have the right sign (31 of 32 measured)."""
    right = decided = 0
    for row in ROWS:
        if row["split"] != "heldout":
            continue
        est, _ = estimate_stance(row["text"], TOPICS)
        for topic, label in row["stance"].items():
            value = est[NAMES.index(topic)]
            if label is not None and not np.isnan(value):
                decided += 1
                right += sign(value) == label
    assert right / decided >= 0.9, (right, decided)


def test_topic_detection_is_exact_on_the_set() -> None:
    """Topics are found on word boundaries: the matched set equals the labelled one for
    every text (including 'Again and again the aim…', which mentions no topic)."""
    matcher = TopicMatcher.from_config(TOPICS)
    for row in ROWS:
        found = sorted(n for n, hit in zip(NAMES, matcher.match(row["text"]), strict=True)
                       if hit)
        assert found == sorted(row["mentioned"]), row["text"]


def test_method_is_recorded() -> None:
    """'lexicon' when any topic got a stance, 'none' otherwise (NaN everywhere)."""
    est, method = estimate_stance("I strongly support the carbon tax.", TOPICS)
    assert method == "lexicon" and est[0] > 0.6 and np.isnan(est[1:]).all()
    est, method = estimate_stance("The committee meets on Tuesday.", TOPICS)
    assert method == "none" and np.isnan(est).all()
    est, method = estimate_stance("", TOPICS)
    assert method == "none" and np.isnan(est).all()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_reads_rule_based_posts_into_their_stance_bins(seed: int) -> None:
    """The rule-based agents' posts (agents/post_text.py: openers, one or two stance
    sentences with reasons, replies and quotes) are read back into exactly the stance bin
    they were written from, for every topic they address, and NaN for the others."""
    rng = np.random.default_rng(seed)
    writer = PostWriter([t.label for t in TOPICS])
    n = 300
    stance = rng.uniform(-1, 1, (n, len(TOPICS)))
    stance[rng.random((n, len(TOPICS))) < 0.5] = np.nan
    stance[np.isnan(stance).all(axis=1), 0] = 0.1
    texts = writer.posts(stance, rng.random((n, 3)))
    for text, s in zip(texts, stance, strict=True):
        est, method = estimate_stance(text, TOPICS)
        written = ~np.isnan(s)
        # Posts mention at most two topics (the first two addressed, in index order).
        read = ~np.isnan(est)
        assert method == "lexicon", text
        assert (read <= written).all() and 1 <= read.sum() <= 2, text
        np.testing.assert_array_equal(stance_bin(est[read]), stance_bin(s[read]), err_msg=text)
    for kind in ("reply", "quote", "comment"):
        for agree in (True, False):
            text = writer.response(kind, "sam", agree, [1, 2], [0.7, -0.3], rng.random(3))
            est, _ = estimate_stance(text, TOPICS)
            assert stance_bin(est[1]) == stance_bin(0.7) and stance_bin(est[2]) == stance_bin(-0.3)
