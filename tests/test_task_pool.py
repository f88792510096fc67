"""The one pool of Ray tasks that sweeps, experiments and calibrations run on: at most
`parallel` at once, tasks made ready by others start, and a task that raises or whose
worker dies is a failed outcome naming why, never an exception out of the loop."""

from __future__ import annotations

import os

import pytest

from shoal.core.errors import InputError
from shoal.runs.task_pool import TaskPool

pytestmark = pytest.mark.slow  # Ray's tasks: a Ray instance to start


def _work(n: int) -> int:
    if n == 3:
        os._exit(1)  # the worker dies
    if n == 4:
        raise InputError("four is refused")
    return n * n


def test_failures_are_outcomes_and_tasks_made_ready_start(ray_session):
    ended: dict[int, object] = {}
    ready = [0, 1]

    def done(key, outcome):
        ended[key] = outcome
        if key == 1:  # a finished task makes more ready
            ready.extend([2, 3, 4])

    with TaskPool(_work, parallel=2, address=None) as pool:
        assert pool.limit == 2
        pool.run(lambda: list(ready), lambda k: (k,), done)
    assert sorted(ended) == [0, 1, 2, 3, 4]
    assert [ended[k].value for k in (0, 1, 2)] == [0, 1, 4]
    assert not ended[3].ok and "Worker" in ended[3].error
    assert not ended[4].ok and isinstance(ended[4].cause, InputError)
    assert "four is refused" in ended[4].error
