"""Workload W, hand-vectorized with numpy (baseline; spec: docs/workload_w.md).

Posts are named by their key `t*N + author` only: a post's value is looked up in
`value_of[key]`, and `-1` marks an empty feed slot. Every (N, K) feed array is kept in
ascending key order with the empty slots first, so applying column 0..K-1 in turn is
"oldest first". All readers update at once, but each reader's K posts are still applied one
after another (one column at a time), which is exactly the sequential definition.

Usage: python bench/baselines/w_numpy.py --n 100000 --rounds 5 --feed pull [--shared-draws]
"""

from __future__ import annotations

import time

import numpy as np
from w_common import EPS, MU, Args, K, P, Run, initial_state, main, shared_post_mask

EMPTY = -1


def newest_first(round_keys: list[np.ndarray], count: int) -> np.ndarray:
    """The `count` newest post keys of the whole system, newest first."""
    tail: list[np.ndarray] = []
    have = 0
    for keys in reversed(round_keys):  # rounds are in key order, and so is each round
        if have >= count:
            break
        tail.append(keys[::-1])
        have += keys.size
    return np.concatenate(tail)[:count] if tail else np.empty(0, dtype=np.int64)


def top_up(feed: np.ndarray, n_own: np.ndarray, round_keys: list[np.ndarray], n: int) -> int:
    """Global fallback, in place: fill the empty slots of every short feed row with the
    newest posts system-wide that are not by the reader and not already in its feed.
    Returns how many readers used the fallback."""
    short = np.flatnonzero(feed[:, 0] == EMPTY)  # rows are ascending: empties come first
    if short.size == 0:
        return 0
    rows = feed[short]
    need = (rows == EMPTY).sum(axis=1)
    # Reader i skips at most (K - need) posts already in its feed and n_own[i] of its own,
    # so the K + n_own[i] newest posts always hold `need` usable ones (if the system has them).
    newest = newest_first(round_keys, K + int(n_own[short].max()))
    excluded = (newest % n == short[:, None]) | (newest[None, :, None] == rows[:, None, :]).any(2)
    usable = ~excluded
    take = usable & (np.cumsum(usable, axis=1) <= need[:, None])
    merged = np.concatenate([rows, np.where(take, newest, EMPTY)], axis=1)
    feed[short] = np.sort(merged, axis=1)[:, -K:]  # at most K non-empty by construction
    return short.size


def apply_feed(x: np.ndarray, feed: np.ndarray, value_of: np.ndarray) -> np.ndarray:
    """Bounded-confidence update, oldest post first, all readers at once."""
    for c in range(feed.shape[1]):
        keys = feed[:, c]
        diff = value_of[keys] - x  # EMPTY reads a junk value; masked out below
        move = (keys != EMPTY) & (np.abs(diff) < EPS)
        x = np.where(move, x + MU * diff, x)
    return x


def pull_feed(last: np.ndarray, follows: np.ndarray) -> np.ndarray:
    """K newest of the d*K candidates (each followee's last K posts), ascending."""
    cand = last[follows].reshape(len(follows), -1)
    if cand.shape[1] > K:
        cand = np.partition(cand, cand.shape[1] - K, axis=1)[:, -K:]
    elif cand.shape[1] < K:  # only when d = 0 (N = 1): nobody to follow
        pad = np.full((len(cand), K - cand.shape[1]), EMPTY, dtype=cand.dtype)
        cand = np.concatenate([pad, cand], axis=1)
    return np.sort(cand, axis=1)


def push_posts(
    inbox: np.ndarray,
    keys: np.ndarray,
    authors: np.ndarray,
    fol_ptr: np.ndarray,
    fol_idx: np.ndarray,
) -> None:
    """Fan-out on write, in place: append each new post to every follower's inbox (capacity
    K, ascending). `authors` is ascending, so the appends for a reader come in key order."""
    counts = fol_ptr[authors + 1] - fol_ptr[authors]
    e = int(counts.sum())
    if e == 0:
        return
    # Edge j of the flattened (author, follower) list sits at fol_ptr[author] + its rank
    # among that author's edges: `start + arange(e)` after subtracting each author's offset.
    start = np.repeat(fol_ptr[authors] - (np.cumsum(counts) - counts), counts)
    readers = fol_idx[start + np.arange(e)]
    ekeys = np.repeat(keys, counts)
    order = np.argsort(readers, kind="stable")  # group by reader, keys stay ascending
    readers, ekeys = readers[order], ekeys[order]
    n_new = np.bincount(readers, minlength=len(inbox))
    from_end = np.cumsum(n_new)[readers] - 1 - np.arange(e)  # 0 = this reader's newest post
    # Shift each row left by its number of new posts, then write them into the freed tail.
    shift = np.minimum(n_new, K)[:, None] + np.arange(K)
    inbox[:] = np.take_along_axis(inbox, np.minimum(shift, K - 1), axis=1)
    keep = from_end < K
    inbox[readers[keep], K - 1 - from_end[keep]] = ekeys[keep]


def run(args: Args) -> Run:
    n, rounds = args.n, args.rounds
    x, follows, rng = initial_state(n, args.seed)
    mask = shared_post_mask(n, rounds, args.seed) if args.shared_draws else None
    if args.feed == "push":  # followers of each author, CSR (readers ascending per author)
        fol_idx = np.argsort(follows.ravel(), kind="stable") // max(follows.shape[1], 1)
        fol_ptr = np.concatenate([[0], np.cumsum(np.bincount(follows.ravel(), minlength=n))])
        inbox = np.full((n, K), EMPTY, dtype=np.int64)
    else:
        last = np.full((n, K), EMPTY, dtype=np.int64)  # each author's last K posts, ascending
    value_of = np.zeros((rounds + 1) * n)  # post value by key
    n_own = np.zeros(n, dtype=np.int64)  # posts made by each agent (bounds the fallback scan)
    round_keys: list[np.ndarray] = []
    mean_x: list[float] = []
    fallback_reads = 0

    t0 = time.perf_counter()
    for t in range(1, rounds + 1):
        # Post phase: values are the positions at the start of the round. Own draws continue
        # the initial-state generator: a fresh default_rng(seed) would replay the uniforms
        # behind x0, and round 1 would be posted by exactly the agents with x0 < -0.8.
        posts = mask[t - 1] if mask is not None else rng.random(n) < P
        authors = np.flatnonzero(posts)
        keys = t * n + authors
        value_of[keys] = x[authors]
        n_own[authors] += 1
        round_keys.append(keys)
        if args.feed == "push":
            push_posts(inbox, keys, authors, fol_ptr, fol_idx)
            feed = inbox.copy()
        else:
            last[authors, :-1] = last[authors, 1:]
            last[authors, -1] = keys
            feed = pull_feed(last, follows)
        # Read phase.
        fallback_reads += top_up(feed, n_own, round_keys, n)
        x = apply_feed(x, feed, value_of)
        mean_x.append(float(x.mean()))  # record (spec step 3)
    seconds = time.perf_counter() - t0
    return Run(seconds, x, fallback_reads / (n * rounds))


if __name__ == "__main__":
    main("numpy", run, __doc__.splitlines()[0])
