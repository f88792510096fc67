"""Commits rounds to the store on a background thread, in order, one round in flight.

The driver hands over round r's tables (immutable Arrow data) and goes on computing round
r+1 while this thread runs the DuckDB transaction (DuckDB releases the GIL while it
works, so on two cores the two overlap). Ordering and atomicity are unchanged: rounds are
committed one by one, each in one transaction, and only this thread touches the
connection. `submit` blocks while a round is still pending, so at most one round of data
is ever held in memory and a crash loses at most the round that was not committed.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa

from shoal.core.errors import StorageFull, out_of_space
from shoal.core.faults import crash_point
from shoal.store.live_mirror import LiveMirror
from shoal.store.trajectory import TrajectoryStore


@dataclass
class RoundPayload:
    """What the writer commits for one round."""

    round: int
    tables: dict[str, pa.Table]
    # builds the `rounds` row given ms spent logging; None: not a whole round (the calls of
    # a round that stopped), which leaves `last_committed` as it was
    rounds_row: Callable[[float], pa.Table] | None
    after_commit: Callable[[], None] | None = None  # e.g. write the checkpoint of this round


class RoundWriter:
    """A single background committer for a store (and its optional live mirror)."""

    def __init__(self, store: TrajectoryStore, mirror: LiveMirror | None = None,
                 last_committed: int = 0):
        self.store = store
        self.mirror = mirror
        self._pending: RoundPayload | None = None
        self._error: BaseException | None = None
        self._cond = threading.Condition()
        self._closed = False
        self.last_committed = last_committed  # the last round committed and checkpointed
        self._thread = threading.Thread(target=self._loop, name="shoal-writer", daemon=True)
        self._thread.start()

    def submit(self, payload: RoundPayload) -> None:
        """Queue a round for commit; waits while the previous one is still pending."""
        with self._cond:
            while self._pending is not None and self._error is None:
                self._cond.wait()
            self._raise()
            self._pending = payload
            self._cond.notify_all()

    def flush(self) -> None:
        """Wait until every submitted round is committed; re-raise a writer error."""
        with self._cond:
            while self._pending is not None and self._error is None:
                self._cond.wait()
            self._raise()

    def close(self) -> None:
        """Flush and stop the thread."""
        try:
            self.flush()
        finally:
            with self._cond:
                self._closed = True
                self._cond.notify_all()
            self._thread.join()

    def _raise(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            if out_of_space(error):
                raise StorageFull(f"no space left on the device of {self.store.path}: the "
                                  f"last round saved whole is round {self.last_committed}; "
                                  "free some space, then resume the run") from error
            raise RuntimeError(f"writing the trajectory failed: {error}") from error

    def _loop(self) -> None:
        while True:
            with self._cond:
                while self._pending is None and not self._closed:
                    self._cond.wait()
                if self._pending is None:
                    return
                payload = self._pending
            try:
                self._commit(payload)
            except BaseException as exc:  # handed to the driver thread at its next call
                with self._cond:
                    self._error = exc
                    self._pending = None
                    self._cond.notify_all()
                continue
            with self._cond:
                if payload.rounds_row is not None:
                    self.last_committed = payload.round
                self._pending = None
                self._cond.notify_all()

    def _commit(self, payload: RoundPayload) -> None:
        store = self.store
        t = time.perf_counter()
        store.con.execute("BEGIN TRANSACTION")
        try:
            for i, (name, data) in enumerate(payload.tables.items()):
                store.insert(name, data)
                if i == 1:
                    crash_point("mid_commit", payload.round)
            rounds_row = None
            if payload.rounds_row is not None:
                rounds_row = payload.rounds_row(1e3 * (time.perf_counter() - t))
                store.insert("rounds", rounds_row)
            store.con.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(Exception):  # (the connection may be gone with the error)
                store.con.execute("ROLLBACK")
            raise
        crash_point("after_commit", payload.round)
        if self.mirror is not None and rounds_row is not None:
            self.mirror.write(payload.round, {**payload.tables, "rounds": rounds_row})
        if payload.after_commit is not None:
            payload.after_commit()
        crash_point("after_checkpoint", payload.round)
