"""Tests for the sorted edge set and follow graph (sim.follow_graph) against a Python set."""

from __future__ import annotations

import numpy as np
import pytest

from shoal.core.follow_graph import FollowGraph, SortedKeySet, expand_csr, pack, unpack
from shoal.core.keys import first_occurrence, unique_sorted
from shoal.core.workers import SERIAL, Workers

SEEDS = [0, 1, 2, 3, 4, 5]


def first_occurrence_mask(keys: list[int], hit: set[int]) -> list[bool]:
    """True at the first occurrence of each key that is in `hit`."""
    seen: set[int] = set()
    out = []
    for key in keys:
        out.append(key in hit and key not in seen)
        seen.add(key)
    return out


# --------------------------------------------------------------------------- SortedKeySet


def test_pack_unpack_round_trip() -> None:
    """Packing (src, dst) into int64 and back is lossless (src < 2**31, dst < 2**32)."""
    src = np.array([0, 1, 2**31 - 1, 2**30 + 5, 7])
    dst = np.array([0, 2**32 - 1, 3, 2**31, 7])
    s, d = unpack(pack(src, dst))
    np.testing.assert_array_equal(s, src)
    np.testing.assert_array_equal(d, dst)
    # Packed keys sort by (src, dst).
    keys = pack(src, dst)
    order = np.argsort(keys)
    assert sorted(zip(src.tolist(), dst.tolist(), strict=True)) == list(
        zip(src[order].tolist(), dst[order].tolist(), strict=True))


@pytest.mark.parametrize("seed", SEEDS)
def test_sorted_key_set_matches_python_set(seed: int) -> None:
    """add/remove masks mark the first occurrence of keys that were new/present; contains
    and the key array follow a Python set through random operations with duplicates."""
    rng = np.random.default_rng(seed)
    init = rng.integers(0, 40, int(rng.integers(0, 15)))
    s = SortedKeySet(init if len(init) else None)
    model = set(init.tolist())
    for _ in range(40):
        keys = rng.integers(0, 40, int(rng.integers(0, 12)))
        klist = keys.tolist()
        if rng.random() < 0.5:
            mask = s.add(keys)
            expected = first_occurrence_mask(klist, set(klist) - model)
            model |= set(klist)
        else:
            mask = s.remove(keys)
            expected = first_occurrence_mask(klist, set(klist) & model)
            model -= set(klist)
        assert mask.dtype == bool
        assert mask.tolist() == expected
        assert s.keys.tolist() == sorted(model)
        assert len(s) == len(model)
        probe = rng.integers(-3, 45, 20)
        assert s.contains(probe).tolist() == [int(p) in model for p in probe]


@pytest.mark.parametrize("seed", SEEDS)
def test_unique_sorted_and_first_occurrence(seed: int) -> None:
    """The key helpers behind SortedKeySet: sorted distinct values, and the mask of each
    value's first occurrence in array order."""
    rng = np.random.default_rng(seed)
    values = rng.integers(0, 2**40, 50)[rng.integers(0, 50, int(rng.integers(0, 80)))]
    assert unique_sorted(values).tolist() == sorted(set(values.tolist()))
    seen: set[int] = set()
    expected = []
    for v in values.tolist():
        expected.append(v not in seen)
        seen.add(v)
    assert first_occurrence(values).tolist() == expected


def test_sorted_key_set_empty_and_edges() -> None:
    """Empty sets contain nothing; keys beyond the ends are not found; removing absent keys
    is a no-op."""
    s = SortedKeySet()
    assert s.contains(np.array([0, 5])).tolist() == [False, False]
    assert s.remove(np.array([1])).tolist() == [False]
    assert s.add(np.array([5, 5, 2])).tolist() == [True, False, True]
    assert s.contains(np.array([1, 2, 5, 6])).tolist() == [False, True, True, False]
    assert s.add(np.empty(0, np.int64)).tolist() == []
    assert s.keys.tolist() == [2, 5]


# --------------------------------------------------------------------------- FollowGraph


def graph_model_check(g: FollowGraph, edges: set[tuple[int, int]]) -> None:
    """Assert every view of `g` matches the set of (follower, followee) edges."""
    n = g.n_agents
    src, dst = g.edge_arrays()
    assert list(zip(src.tolist(), dst.tolist(), strict=True)) == sorted(edges)
    assert len(g) == len(edges)
    indptr, followees = g.followees()
    assert len(indptr) == n + 1
    ind_f, followers = g.followers()
    assert len(ind_f) == n + 1
    for a in range(n):
        mine = sorted(b for (x, b) in edges if x == a)
        assert followees[indptr[a]:indptr[a + 1]].tolist() == mine
        theirs = sorted(x for (x, b) in edges if b == a)
        assert sorted(followers[ind_f[a]:ind_f[a + 1]].tolist()) == theirs
    assert g.out_degree().tolist() == [sum(1 for (x, _) in edges if x == a) for a in range(n)]
    assert g.in_degree().tolist() == [sum(1 for (_, b) in edges if b == a) for a in range(n)]


@pytest.mark.parametrize("seed", SEEDS)
def test_follow_graph_random_ops_match_edge_set(seed: int) -> None:
    """Follow/unfollow masks, is_following and both CSR views track a set of edges through
    random operation sequences (with repeated edges inside one call)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 15))
    src0, dst0 = rng.integers(0, n, 10), rng.integers(0, n, 10)
    g = FollowGraph(n, src0, dst0)
    edges = set(zip(src0.tolist(), dst0.tolist(), strict=True))
    graph_model_check(g, edges)
    for _ in range(25):
        m = int(rng.integers(0, 10))
        src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
        pairs = list(zip(src.tolist(), dst.tolist(), strict=True))
        keys = [a * 1000 + b for a, b in pairs]
        current = {a * 1000 + b for a, b in edges}
        if rng.random() < 0.6:
            mask = g.follow(src, dst)
            assert mask.tolist() == first_occurrence_mask(keys, set(keys) - current)
            edges |= set(pairs)
        else:
            mask = g.unfollow(src, dst)
            assert mask.tolist() == first_occurrence_mask(keys, set(keys) & current)
            edges -= set(pairs)
        graph_model_check(g, edges)
        qs, qd = rng.integers(0, n, 15), rng.integers(0, n, 15)
        assert g.is_following(qs, qd).tolist() == [
            (a, b) in edges for a, b in zip(qs.tolist(), qd.tolist(), strict=True)]


def test_follow_graph_cache_invalidated_on_change() -> None:
    """CSR views computed before a change are not reused after it."""
    g = FollowGraph(3, np.array([0]), np.array([1]))
    assert g.followees()[1].tolist() == [1]
    assert g.followers()[1].tolist() == [0]
    g.follow(np.array([2]), np.array([1]))
    assert g.followers()[0].tolist() == [0, 0, 2, 2]
    g.unfollow(np.array([0]), np.array([1]))
    assert g.followees()[0].tolist() == [0, 0, 0, 1]
    assert g.followees()[1].tolist() == [1]
    # A no-op change keeps the views right as well.
    assert not g.follow(np.array([2]), np.array([1])).any()
    assert g.followers()[1].tolist() == [2]


@pytest.mark.parametrize("workers", [SERIAL, Workers(3, min_rows=1)], ids=["serial", "ranges"])
@pytest.mark.parametrize("seed", SEEDS)
def test_expand_csr_matches_brute_force(seed: int, workers: Workers) -> None:
    """expand_csr lists each requested row's entries, tagged with the row's position,
    for repeated and empty rows, on one thread or a range of rows per worker."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 12))
    counts = rng.integers(0, 5, n)
    indptr = np.concatenate([[0], np.cumsum(counts)])
    indices = rng.integers(0, 100, int(counts.sum()))
    rows = rng.integers(0, n, int(rng.integers(0, 10)))
    which, entries = expand_csr(indptr, indices, rows, workers)
    exp_which, exp_entries = [], []
    for pos, r in enumerate(rows.tolist()):
        for e in indices[indptr[r]:indptr[r + 1]].tolist():
            exp_which.append(pos)
            exp_entries.append(e)
    assert which.tolist() == exp_which
    assert entries.tolist() == exp_entries


def test_grow_adds_isolated_agents() -> None:
    """grow makes room for new ids: views cover them, they start with no edges, and they can
    follow and be followed; shrinking is ignored."""
    g = FollowGraph(3, np.array([0, 1]), np.array([1, 2]))
    g.followees()
    g.grow(6)
    assert g.n_agents == 6
    assert g.out_degree().tolist() == [1, 1, 0, 0, 0, 0]
    assert g.in_degree().tolist() == [0, 1, 1, 0, 0, 0]
    assert g.follow(np.array([5, 0]), np.array([4, 5])).tolist() == [True, True]
    graph_model_check(g, {(0, 1), (1, 2), (5, 4), (0, 5)})
    g.grow(2)
    assert g.n_agents == 6


@pytest.mark.parametrize("seed", SEEDS[:3])
def test_state_round_trip(seed: int) -> None:
    """set_state(get_state()) gives the same graph, and the copy evolves independently;
    replaying the journal of follows and unfollows gives it too."""
    rng = np.random.default_rng(seed)
    n = 20
    g = FollowGraph(n, rng.integers(0, n, 60), rng.integers(0, n, 60))
    first = g.take_changes()
    g.unfollow(rng.integers(0, n, 20), rng.integers(0, n, 20))
    g.follow(rng.integers(0, n, 10), rng.integers(0, n, 10))
    replayed = FollowGraph(n)
    replayed.replay([first, g.take_changes()])
    np.testing.assert_array_equal(replayed.get_state().arrays["edges"],
                                  g.get_state().arrays["edges"])
    assert not len(replayed.take_changes().arrays["op"])  # replayed changes are not news
    h = FollowGraph(n)
    h.set_state(g.get_state())
    assert h.n_agents == n
    s1, d1 = g.edge_arrays()
    edges = set(zip(s1.tolist(), d1.tolist(), strict=True))
    graph_model_check(h, edges)
    h.follow(np.array([0]), np.array([19]))
    h.unfollow(s1[:3], d1[:3])
    graph_model_check(g, edges)  # the original is unaffected
    graph_model_check(h, (edges | {(0, 19)}) - set(zip(s1[:3].tolist(), d1[:3].tolist(),
                                                          strict=True)))


@pytest.mark.parametrize("values", [[], [3], [1, 2, 5], [5, 2, 2, 9, 1], [1, 1, 2], [-4, 0, 7]])
def test_unique_sorted_is_np_unique(values: list[int]) -> None:
    """unique_sorted equals np.unique, on input already strictly increasing (returned
    without a sort, as a copy) and on any other."""
    a = np.array(values, np.int64)
    out = unique_sorted(a)
    np.testing.assert_array_equal(out, np.unique(a))
    assert out.dtype == a.dtype and (not len(a) or not np.shares_memory(out, a))
