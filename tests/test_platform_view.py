"""PlatformView.take: the same rows whether asked by slice, index array or mask."""

from __future__ import annotations

import dataclasses

import numpy as np

from shoal.config import parse_config
from shoal.engine.observe import new_view
from shoal.testing import small_config
from shoal.world.world import build_world


def test_take_by_slice_indices_or_mask_gives_the_same_rows():
    world = build_world(parse_config(small_config()))
    plat = next(iter(world.platforms))
    view = new_view(world, plat, np.arange(6, dtype=np.int64), 3)
    rng = np.random.default_rng(0)
    for f in dataclasses.fields(view):
        a = getattr(view, f.name)
        if isinstance(a, np.ndarray) and a.dtype != object and f.name != "agents":
            a[...] = rng.integers(0, 5, a.shape).astype(a.dtype)
    view.prompts = [f"p{i}" for i in range(6)]
    mask = np.array([False, True, False, True, True, False])
    by_slice, by_index, by_mask = (view.take(slice(1, 5))
                                   .take(np.array([0, 2, 3])), view.take(np.array([1, 3, 4])),
                                   view.take(mask))
    for other in (by_index, by_mask):
        for f in dataclasses.fields(view):
            x, y = getattr(by_slice, f.name), getattr(other, f.name)
            if isinstance(x, np.ndarray):
                np.testing.assert_array_equal(x, y)
                assert x.dtype == y.dtype
            else:
                assert x == y
    assert by_mask.prompts == ["p1", "p3", "p4"]
    assert np.shares_memory(view.take(slice(1, 5)).feed, view.feed)  # a slice: a view
