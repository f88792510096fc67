"""Tests for the counter-based generator (sim.counter_rng): Philox4x32-10 known answers, a
pure-Python reference, keyed draws that do not depend on who else is drawn, and crude
distribution checks."""

from __future__ import annotations

import numpy as np
import pytest

from shoal.core.counter_rng import CounterRNG, Purpose, philox4x32

M32 = 0xFFFFFFFF

# Random123 known-answer vectors for philox4x32 with 10 rounds: (counter, key, expected).
KAT = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((M32, M32, M32, M32), (M32, M32), (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]


def philox_ref(ctr: tuple[int, int, int, int], key: tuple[int, int], rounds: int = 10
               ) -> tuple[int, int, int, int]:
    """Philox4x32 written with Python ints, straight from Salmon et al. (2011)."""
    c0, c1, c2, c3 = ctr
    k0, k1 = key
    for _ in range(rounds):
        p0, p1 = 0xD2511F53 * c0, 0xCD9E8D57 * c2
        c0, c1, c2, c3 = ((p1 >> 32) ^ c1 ^ k0, p1 & M32, (p0 >> 32) ^ c3 ^ k1, p0 & M32)
        k0, k1 = (k0 + 0x9E3779B9) & M32, (k1 + 0xBB67AE85) & M32
    return c0, c1, c2, c3


def uniform_ref(seed: int, round_: int, purpose: int, agent: int, n: int) -> list[float]:
    """The documented layout: counter (agent, round, purpose, block), key = the 64-bit seed;
    each block gives two 53-bit doubles from word pairs (w0, w1) and (w2, w3)."""
    key = (seed & M32, (seed >> 32) & M32)
    out: list[float] = []
    block = 0
    while len(out) < n:
        w0, w1, w2, w3 = philox_ref((agent & M32, round_ & M32, purpose & M32, block), key)
        out.append((((w0 << 32) | w1) >> 11) / 2.0**53)
        out.append((((w2 << 32) | w3) >> 11) / 2.0**53)
        block += 1
    return out[:n]


@pytest.mark.parametrize(("ctr", "key", "expected"), KAT)
def test_philox_known_answers(ctr, key, expected) -> None:
    """philox4x32 (vectorised) and the Python reference reproduce the Random123 vectors."""
    words = philox4x32(*(np.array([c], dtype=np.uint64) for c in ctr), *key)
    assert tuple(int(w[0]) for w in words) == expected
    assert philox_ref(ctr, key) == expected


def test_philox_known_answers_in_one_batch() -> None:
    """All three vectors computed in one vectorised call (same key) stay independent:
    counters that share the zero key give the zero-key answer in any position."""
    ctrs = np.array([KAT[0][0], (1, 2, 3, 4), KAT[0][0]], dtype=np.uint64)
    words = philox4x32(ctrs[:, 0], ctrs[:, 1], ctrs[:, 2], ctrs[:, 3], 0, 0)
    got = np.stack(words, axis=1)
    assert tuple(int(x) for x in got[0]) == KAT[0][2]
    assert tuple(int(x) for x in got[2]) == KAT[0][2]
    assert tuple(int(x) for x in got[1]) == philox_ref((1, 2, 3, 4), (0, 0))


@pytest.mark.parametrize("seed", [0, 1, 7, 12345])
def test_philox_matches_reference_on_random_counters(seed: int) -> None:
    """The numpy Philox equals the pure-Python one on random counters and keys."""
    rng = np.random.default_rng(seed)
    ctrs = rng.integers(0, 2**32, size=(64, 4), dtype=np.uint64)
    k0, k1 = (int(x) for x in rng.integers(0, 2**32, size=2, dtype=np.uint64))
    words = np.stack(philox4x32(ctrs[:, 0], ctrs[:, 1], ctrs[:, 2], ctrs[:, 3], k0, k1), 1)
    for row, ctr in zip(words, ctrs, strict=True):
        assert tuple(int(x) for x in row) == philox_ref(tuple(int(c) for c in ctr), (k0, k1))


@pytest.mark.parametrize("seed", [0, 3, 2**40 + 5])
def test_uniform_matches_reference_layout(seed: int) -> None:
    """`uniform` is exactly the documented counter layout, for odd and even n."""
    rng = CounterRNG(seed)
    agents = np.array([0, 5, 2**31 + 3, 17])
    for n in (1, 2, 5):
        got = rng.uniform(4, Purpose.ENGAGE, agents, n)
        assert got.shape == (len(agents), n)
        for row, a in zip(got, agents, strict=True):
            assert row.tolist() == uniform_ref(seed, 4, int(Purpose.ENGAGE), int(a), n)


@pytest.mark.parametrize("seed", [0, 11, 99])
def test_uniform_independent_of_other_agents_and_order(seed: int) -> None:
    """An agent's draws do not depend on which other agents are in the call, or their order."""
    gen = np.random.default_rng(seed)
    rng = CounterRNG(seed)
    everyone = np.arange(500)
    full = rng.uniform(3, Purpose.POST, everyone, 3)
    for _ in range(5):
        subset = gen.choice(everyone, size=gen.integers(1, 60), replace=False)  # random order
        part = rng.uniform(3, Purpose.POST, subset, 3)
        np.testing.assert_array_equal(part, full[subset])
    # Repeating an agent in one call repeats its draws.
    twice = rng.uniform(3, Purpose.POST, np.array([7, 7, 8]), 3)
    np.testing.assert_array_equal(twice[0], twice[1])
    assert not np.array_equal(twice[0], twice[2])


def test_uniform_prefix_does_not_depend_on_n() -> None:
    """The first draws of an agent are the same whatever n is asked for."""
    rng = CounterRNG(5)
    agents = np.arange(20)
    wide = rng.uniform(2, Purpose.TOPIC, agents, 9)
    for n in range(1, 9):
        np.testing.assert_array_equal(rng.uniform(2, Purpose.TOPIC, agents, n), wide[:, :n])
    np.testing.assert_array_equal(rng.uniform1(2, Purpose.TOPIC, agents), wide[:, 0])


def test_uniform_values_in_unit_interval() -> None:
    """Draws lie in [0, 1) and are not degenerate."""
    u = CounterRNG(1).uniform(1, Purpose.FEED, np.arange(50_000), 4)
    assert u.min() >= 0.0
    assert u.max() < 1.0
    assert len(np.unique(u)) == u.size


def test_streams_differ_by_purpose_round_and_seed() -> None:
    """Changing the purpose, the round or either half of the seed changes every draw."""
    agents = np.arange(2000)
    base = CounterRNG(42).uniform(1, Purpose.POST, agents, 2)
    variants = [
        CounterRNG(42).uniform(1, Purpose.ENGAGE, agents, 2),
        CounterRNG(42).uniform(2, Purpose.POST, agents, 2),
        CounterRNG(43).uniform(1, Purpose.POST, agents, 2),
        CounterRNG(42 + 2**32).uniform(1, Purpose.POST, agents, 2),  # high key word
    ]
    for other in variants:
        assert (other == base).mean() < 0.001
        # Not a shifted copy of the same stream either.
        assert abs(np.corrcoef(other.ravel(), base.ravel())[0, 1]) < 0.1
    assert len({int(p) for p in Purpose}) == len(Purpose)


def test_uniform_is_roughly_uniform() -> None:
    """Mean, variance and a 20-bin histogram of 200k draws match U[0, 1)."""
    n = 200_000
    u = CounterRNG(2024).uniform(9, Purpose.SCHEDULE, np.arange(n // 2), 2).ravel()
    assert abs(u.mean() - 0.5) < 4 * np.sqrt(1 / 12 / n)
    # Var of U is 1/12; the SE of the sample variance is sqrt(1/180/n).
    assert abs(u.var() - 1 / 12) < 4 * np.sqrt(1 / 180 / n)
    counts = np.bincount((u * 20).astype(int), minlength=20)
    expected = n / 20
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert chi2 < 50  # 19 dof: P(chi2 > 50) ~ 1e-4
    # Neighbouring draws of one agent are uncorrelated.
    pairs = u.reshape(-1, 2)
    assert abs(np.corrcoef(pairs[:, 0], pairs[:, 1])[0, 1]) < 4 / np.sqrt(n / 2)


def test_normal_moments() -> None:
    """Box–Muller normals: mean 0, std 1, light tails, finite."""
    n = 200_000
    z = CounterRNG(8).normal(1, Purpose.EXPRESSION, np.arange(n // 4), 4).ravel()
    assert np.isfinite(z).all()
    assert abs(z.mean()) < 4 / np.sqrt(n)
    assert abs(z.std() - 1.0) < 4 * np.sqrt(1 / (2 * n))
    assert abs((np.abs(z) > 1.96).mean() - 0.05) < 4 * np.sqrt(0.05 * 0.95 / n)


def test_normal_is_box_muller_of_uniform_pairs() -> None:
    """`normal` is sqrt(-2 log(1 - u0)) cos(2 pi u1) of the agent's uniform pairs."""
    rng = CounterRNG(77)
    agents = np.array([3, 1, 4])
    z = rng.normal(6, Purpose.LLM, agents, 3)
    u = rng.uniform(6, Purpose.LLM, agents, 6)
    expected = np.sqrt(-2.0 * np.log(1.0 - u[:, 0::2])) * np.cos(2.0 * np.pi * u[:, 1::2])
    np.testing.assert_array_equal(z, expected)


def test_generator_is_keyed() -> None:
    """`generator(*key)` gives the same stream for the same seed and key, another otherwise."""
    a = CounterRNG(9).generator(1, 2).random(5)
    b = CounterRNG(9).generator(1, 2).random(5)
    c = CounterRNG(9).generator(2, 1).random(5)
    d = CounterRNG(10).generator(1, 2).random(5)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    assert not np.array_equal(a, d)


def test_an_agents_first_numbers_do_not_depend_on_how_many_are_drawn():
    """uniform(…, n)[:, :m] is uniform(…, m) for m <= n: a caller may draw only the
    numbers it will read (the rule policy without engagement draws one, not three)."""
    rng = CounterRNG(5)
    agents = np.array([0, 3, 7, 2**31 + 5], np.int64)
    full = rng.uniform(4, 17, agents, 5)
    for m in range(1, 6):
        np.testing.assert_array_equal(rng.uniform(4, 17, agents, m), full[:, :m])
