"""Tests for pairwise trust (beliefs.trust) and exposure history (beliefs.exposure) against
dictionary models."""

from __future__ import annotations

import numpy as np
import pytest

from shoal.beliefs.exposure import ExposureHistory
from shoal.beliefs.trust import TrustStore

SEEDS = [0, 1, 2, 3, 4, 5]


# --------------------------------------------------------------------------- trust


def test_unseen_pairs_have_initial_trust() -> None:
    """Pairs never updated read as the initial value, including on an empty store."""
    t = TrustStore(0.37)
    assert t.get(np.array([0, 5, 2**20]), np.array([1, 5, 3])).tolist() == [0.37] * 3
    t.add(np.array([0]), np.array([1]), np.array([0.1]))
    got = t.get(np.array([0, 1, 0, 9]), np.array([1, 0, 2, 9]))
    np.testing.assert_allclose(got, [0.47, 0.37, 0.37, 0.37], rtol=0, atol=1e-15)
    assert len(t) == 1


def test_deltas_summed_per_pair_before_clipping() -> None:
    """Deltas of one call are summed per pair, then clipped once (not clipped step by step)."""
    t = TrustStore(0.98)
    out = t.add(np.array([1, 1, 2, 2]), np.array([2, 2, 1, 1]),
                np.array([0.05, -0.05, -0.5, -0.6]))
    # (1, 2): 0.98 + 0.05 - 0.05 = 0.98 (step-wise clipping would give 0.95).
    # (2, 1): 0.98 - 1.1 -> clipped to 0.
    assert out[0].tolist() == [1, 2]
    assert out[1].tolist() == [2, 1]
    np.testing.assert_allclose(out[2], [0.98, 0.0], rtol=0, atol=1e-15)
    np.testing.assert_allclose(t.get(np.array([1, 2]), np.array([2, 1])), [0.98, 0.0],
                               rtol=0, atol=1e-15)
    t.add(np.array([1]), np.array([2]), np.array([0.5]))
    assert t.get(np.array([1]), np.array([2])).tolist() == [1.0]


@pytest.mark.parametrize("seed", SEEDS)
def test_trust_matches_dict_model(seed: int) -> None:
    """Random batches of deltas (repeated pairs, large ids) against a dict model; returned
    arrays are the touched pairs sorted by (truster, trustee) with their new values."""
    rng = np.random.default_rng(seed)
    initial = float(rng.random())
    t = TrustStore(initial)
    model: dict[tuple[int, int], float] = {}
    ids = np.array([0, 1, 2, 3, 7, 2**31 - 1])
    for _ in range(30):
        m = int(rng.integers(0, 12))
        a, b = rng.choice(ids, m), rng.choice(ids, m)
        d = rng.normal(0, 0.2, m)
        total: dict[tuple[int, int], float] = {}
        for x, y, dv in zip(a.tolist(), b.tolist(), d.tolist(), strict=True):
            total[(x, y)] = total.get((x, y), 0.0) + dv
        for pair, dv in total.items():
            model[pair] = min(1.0, max(0.0, model.get(pair, initial) + dv))
        tr, te, val = t.add(a, b, d)
        touched = sorted(total)
        assert list(zip(tr.tolist(), te.tolist(), strict=True)) == touched
        np.testing.assert_allclose(val, [model[p] for p in touched], rtol=0, atol=1e-12)
        assert len(t) == len(model)
        qa, qb = rng.choice(ids, 20), rng.choice(ids, 20)
        expected = [model.get(p, initial) for p in zip(qa.tolist(), qb.tolist(), strict=True)]
        np.testing.assert_allclose(t.get(qa, qb), expected, rtol=0, atol=1e-12)
        assert ((t.values >= 0) & (t.values <= 1)).all()
        assert (np.diff(t.keys) > 0).all()


def test_trust_empty_add() -> None:
    """Adding nothing returns empty arrays and stores nothing."""
    t = TrustStore(0.5)
    tr, te, val = t.add(np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0))
    assert (len(tr), len(te), len(val), len(t)) == (0, 0, 0, 0)


def test_trust_state_round_trip() -> None:
    """set_state(get_state()) reads the same values; so does replaying the journal."""
    rng = np.random.default_rng(3)
    t = TrustStore(0.25)
    t.add(rng.integers(0, 10, 40), rng.integers(0, 10, 40), rng.normal(0, 0.3, 40))
    first = t.take_changes()
    t.add(rng.integers(0, 10, 40), rng.integers(0, 10, 40), rng.normal(0, 0.3, 40))
    replayed = TrustStore(0.25)
    replayed.replay([first, t.take_changes()])
    np.testing.assert_array_equal(replayed.keys, t.keys)
    np.testing.assert_array_equal(replayed.values, t.values)
    u = TrustStore(0.25)
    u.set_state(t.get_state())
    qa, qb = np.repeat(np.arange(12), 12), np.tile(np.arange(12), 12)
    np.testing.assert_array_equal(u.get(qa, qb), t.get(qa, qb))
    assert u.initial == 0.25
    # The restored store keeps working like the original.
    t.add(np.array([11]), np.array([11]), np.array([0.1]))
    u.add(np.array([11]), np.array([11]), np.array([0.1]))
    np.testing.assert_array_equal(u.get(qa, qb), t.get(qa, qb))


# --------------------------------------------------------------------------- exposure


@pytest.mark.parametrize("seed", SEEDS)
def test_exposure_history_without_window_matches_set(seed: int) -> None:
    """seen() is 'recorded in an earlier call', with repeats inside one record call."""
    rng = np.random.default_rng(seed)
    h = ExposureHistory()
    model: dict[tuple[int, int], int] = {}
    for r in range(1, 15):
        a, p = rng.integers(0, 6, 10), rng.integers(0, 12, 10)
        pairs = list(zip(a.tolist(), p.tolist(), strict=True))
        assert h.seen(a, p).tolist() == [pair in model for pair in pairs]
        h.record(a, p, r)
        for pair in pairs:
            model[pair] = r
        assert len(h) == len(model)
        # Every entry keeps the round it was last seen in.
        keys = sorted(model)
        assert [(int(k >> 32), int(k & 0xFFFFFFFF)) for k in h.keys] == keys
        assert h.last_round.tolist() == [model[k] for k in keys]


def test_exposure_history_empty() -> None:
    """An empty history has seen nothing; recording nothing keeps it empty."""
    h = ExposureHistory(window=3)
    assert h.seen(np.array([0, 1]), np.array([0, 1])).tolist() == [False, False]
    h.record(np.empty(0, np.int64), np.empty(0, np.int64), 1)
    assert len(h) == 0


def test_exposure_window_forgets_old_exposures() -> None:
    """With window w, a post seen once in round r is still 'seen' when round r + w reads
    the history, and is dropped by round r + w's record() (then counts as new again)."""
    h = ExposureHistory(window=3)
    h.record(np.array([0]), np.array([10]), 1)
    for r in (2, 3, 4):
        assert h.seen(np.array([0]), np.array([10])).tolist() == [True]
        h.record(np.array([1]), np.array([r]), r)  # unrelated exposures advance the clock
    assert h.seen(np.array([0, 1, 1]), np.array([10, 3, 4])).tolist() == [False, True, True]
    h.record(np.array([0]), np.array([10]), 5)
    assert h.seen(np.array([0]), np.array([10])).tolist() == [True]
    assert h.last_round[h.keys == (0 << 32 | 10)].tolist() == [5]


def test_exposure_window_keeps_posts_seen_recently() -> None:
    """A post in the feed every round stays 'seen' (novelty_seen), never flips back to new."""
    h = ExposureHistory(window=2)
    for r in range(1, 6):
        if r > 1:
            assert h.seen(np.array([0]), np.array([7])).tolist() == [True], f"round {r}"
        h.record(np.array([0]), np.array([7]), r)


def test_exposure_state_round_trip() -> None:
    """set_state(get_state()) restores keys and last-seen rounds; so does the journal."""
    h = ExposureHistory(window=4)
    h.record(np.array([0, 1, 2]), np.array([5, 5, 6]), 1)
    h.record(np.array([0, 3]), np.array([8, 8]), 2)
    replayed = ExposureHistory(window=4)
    replayed.replay([h.take_changes()], as_of=2)
    np.testing.assert_array_equal(replayed.keys, h.keys)
    np.testing.assert_array_equal(replayed.last_round, h.last_round)
    g = ExposureHistory(window=4)
    g.set_state(h.get_state())
    probe_a, probe_p = np.array([0, 1, 2, 3, 0, 9]), np.array([5, 5, 6, 8, 8, 9])
    assert g.seen(probe_a, probe_p).tolist() == [True] * 5 + [False]
    np.testing.assert_array_equal(g.last_round, h.last_round)
    g.record(np.array([9]), np.array([9]), 5)  # rounds 1 is now beyond the window
    assert g.seen(probe_a, probe_p).tolist() == [False, False, False, True, True, True]
