"""Which of a round's exposures are an agent's first reading of a piece of breaking news.

An `event` intervention injects one post per platform (the news account's copies, made
together: consecutive ids, the same round and text). A reader is persuaded by the news
once (docs/beliefs.md, "What news does"): by the first copy it is shown, on whichever
platform, and not again by another copy or by the same one pinned in a later round.
"""

from __future__ import annotations

import numpy as np

from shoal.beliefs.rules.base import Exposures, UpdateContext
from shoal.core.keys import first_occurrence, pack
from shoal.core.posts import PostKind


def news_mask(exposures: Exposures, ctx: UpdateContext) -> np.ndarray:
    """Mask [A, M] of the exposures that are breaking-news posts (kind `event`)."""
    kind = ctx.posts.get("kind", exposures.posts, -1)
    return (kind == PostKind.EVENT) & exposures.valid


def copies(ctx: UpdateContext, post_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For event posts, the first id and the number of the copies they belong to: the run
    of consecutive event posts of the same round and text (one per platform)."""
    kind, rnd, text = ctx.posts.kind, ctx.posts.round, ctx.posts.text

    def same(a: int, b: int) -> bool:
        return (0 <= b < len(kind) and kind[b] == PostKind.EVENT and rnd[b] == rnd[a]
                and text[b] == text[a])

    first = np.empty(len(post_ids), np.int64)
    count = np.empty(len(post_ids), np.int64)
    for i, p in enumerate(post_ids.tolist()):  # a handful: the news pinned this round
        lo = hi = p
        while same(p, lo - 1):
            lo -= 1
        while same(p, hi + 1):
            hi += 1
        first[i], count[i] = lo, hi - lo + 1
    return first, count


def first_readings(exposures: Exposures, ctx: UpdateContext, news: np.ndarray
                   ) -> np.ndarray:
    """Mask [A, M]: the news exposures (`news`, from `news_mask`) that are the reader's
    first reading of that news: no copy of it seen in an earlier round (the exposure
    history), and the first copy shown this round (rows are oldest first)."""
    out = np.zeros(news.shape, dtype=bool)
    if not news.any():
        return out
    rows, cols = np.nonzero(news)
    posts = exposures.posts[rows, cols]
    readers = exposures.agents[rows]
    ids, inverse = np.unique(posts, return_inverse=True)
    first, count = copies(ctx, ids)
    first, count = first[inverse], count[inverse]
    seen = np.zeros(len(posts), dtype=bool)
    if ctx.history is not None:
        for k in range(int(count.max())):
            has = k < count
            seen[has] |= ctx.history.seen(readers[has], first[has] + k)
    # Row-major order is reader by reader, oldest post first: the first copy shown wins.
    out[rows, cols] = ~seen & first_occurrence(pack(readers, first))
    return out
