"""Workload W in plain Python: lists, deques, one loop per agent (baseline; spec:
docs/workload_w.md).

A post is a tuple `(key, value)` with `key = t*N + author`; tuples order by key, and keys
are unique, so sorting posts sorts them oldest first. Only the initial state (and the
`--shared-draws` mask) comes from numpy; it is converted to lists before the timed rounds.

Usage: python bench/baselines/w_plain.py --n 100000 --rounds 5 --feed pull [--shared-draws]
"""

from __future__ import annotations

import heapq
import random
import time
from collections import deque

import numpy as np
from w_common import EPS, MU, Args, K, P, Run, initial_state, main, shared_post_mask

Post = tuple[int, float]


def top_up(feed: list[Post], i: int, posts: list[Post], n: int) -> None:
    """Global fallback, in place: add the newest posts system-wide that are not by `i` and
    not already in `feed` until it holds K (`posts` is in key order)."""
    have = {key for key, _ in feed}
    for post in reversed(posts):
        if len(feed) == K:
            break
        if post[0] % n != i and post[0] not in have:
            feed.append(post)


def run(args: Args) -> Run:
    n, rounds, push = args.n, args.rounds, args.feed == "push"
    x0, follows_np, _ = initial_state(n, args.seed)
    x: list[float] = x0.tolist()
    follows: list[list[int]] = follows_np.tolist()
    mask = shared_post_mask(n, rounds, args.seed).tolist() if args.shared_draws else None
    rand = random.Random(args.seed)
    followers: list[list[int]] = [[] for _ in range(n)]
    for i, row in enumerate(follows):
        for f in row:
            followers[f].append(i)
    # push: each reader's inbox; pull: each author's own last K posts. Both oldest first.
    boxes: list[deque[Post]] = [deque(maxlen=K) for _ in range(n)]
    posts: list[Post] = []  # every post, in key order (for the global fallback)
    mean_x: list[float] = []
    fallback_reads = 0

    t0 = time.perf_counter()
    for t in range(1, rounds + 1):
        # Post phase, in id order, so `posts` and every inbox stay in key order.
        decide = mask[t - 1] if mask is not None else [rand.random() < P for _ in range(n)]
        for i in range(n):
            if decide[i]:
                post = (t * n + i, x[i])
                posts.append(post)
                if push:
                    for r in followers[i]:
                        boxes[r].append(post)
                else:
                    boxes[i].append(post)
        # Read phase; posts are frozen, so updating x in place is the sequential definition.
        for i in range(n):
            if push:
                feed = list(boxes[i])
            else:
                feed = heapq.nlargest(K, [p for f in follows[i] for p in boxes[f]])
            if len(feed) < K:
                fallback_reads += 1
                top_up(feed, i, posts, n)
            xi = x[i]
            for _, v in sorted(feed):  # oldest first
                if abs(v - xi) < EPS:
                    xi = xi + MU * (v - xi)
            x[i] = xi
        mean_x.append(sum(x) / n)  # record (spec step 3)
    seconds = time.perf_counter() - t0
    return Run(seconds, np.array(x), fallback_reads / (n * rounds))


if __name__ == "__main__":
    main("plain", run, __doc__.splitlines()[0])
