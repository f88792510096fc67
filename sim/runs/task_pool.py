"""One bounded pool of Ray tasks for everything that runs many simulations at once: sweep
members, experiment units, calibration draws.

Each task takes one CPU (a run is single-threaded numpy) and is never retried by Ray (a
retry would leave a second run directory for the same unit). A task that raises, or
whose worker dies, is a failed outcome naming why, never an exception out of the loop;
the caller decides what a failure means. Ctrl-C cancels what is running.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Any

from shoal.core.errors import InputError
from shoal.engine.executors import ensure_ray


@dataclass
class Outcome:
    """How a task ended: its value, or why it failed (`cause`: the exception the task
    raised, when it raised one)."""

    ok: bool
    value: Any = None
    error: str | None = None
    cause: BaseException | None = None


class TaskPool:
    """Runs `fn` as Ray tasks, at most `parallel` at once (default: the cluster's CPUs),
    on the Ray `ensure_ray(address)` gives (a local instance it starts is shut down when
    the pool closes). Use as a context manager."""

    def __init__(self, fn: Callable[..., Any], parallel: int | None = None,
                 address: str | None = None):
        self.fn, self.parallel, self.address = fn, parallel, address

    def __enter__(self) -> TaskPool:
        import ray  # only here: planning and reading results must not pay Ray's import

        self._owns = ensure_ray(self.address)
        self._task = ray.remote(num_cpus=1, max_retries=0)(self.fn)
        self.limit = self.parallel or max(1, int(ray.cluster_resources().get("CPU", 1)))
        self._pending: dict[Any, Hashable] = {}
        return self

    def __exit__(self, kind: type | None, exc: BaseException | None, tb: Any) -> None:
        import ray

        try:
            if exc is not None:  # (Ctrl-C, or the caller's own error): stop what runs
                for ref in self._pending:
                    ray.cancel(ref, force=True)
        finally:
            if self._owns:
                ray.shutdown()

    @property
    def running(self) -> list[Hashable]:
        """The keys of the tasks started and not yet finished."""
        return list(self._pending.values())

    def run(self, ready: Callable[[], Iterable[Hashable]],
            args: Callable[[Hashable], tuple[Any, ...]],
            done: Callable[[Hashable, Outcome], None]) -> None:
        """Keep up to `limit` tasks running until nothing is ready or running: start the
        keys `ready()` gives (asked again after each task ends, so a task may make others
        ready) with `fn(*args(key))`, and call `done(key, outcome)` as each ends."""
        import ray

        started: set[Hashable] = set()
        while True:
            for key in ready():
                if len(self._pending) >= self.limit:
                    break
                if key not in started:
                    started.add(key)
                    self._pending[self._task.remote(*args(key))] = key
            if not self._pending:
                return
            (ref,), _ = ray.wait(list(self._pending), num_returns=1)
            done(self._pending.pop(ref), outcome(ref))


def failure(exc: Exception, started: float) -> dict[str, Any]:
    """A run task's own record of why it failed (an InputError: the user's to fix), as
    sweeps and experiments keep it; `started`: its `time.perf_counter()` at the start."""
    shown = str(exc) if isinstance(exc, InputError) else f"{type(exc).__name__}: {exc}"
    return {"status": "failed", "error": shown, "input_error": isinstance(exc, InputError),
            "seconds": time.perf_counter() - started}


def outcome(ref: Any) -> Outcome:
    """A finished task's outcome (a task that raised, or whose worker died: failed)."""
    import ray

    try:
        return Outcome(True, ray.get(ref))
    except ray.exceptions.RayError as exc:
        cause = getattr(exc, "cause", None)
        shown = cause if isinstance(cause, BaseException) else exc
        return Outcome(False, error=f"{type(shown).__name__}: {str(shown).splitlines()[0]}"
                       if str(shown) else type(shown).__name__,
                       cause=cause if isinstance(cause, BaseException) else None)
