"""An asyncio event loop in a thread of its own, for synchronous callers: the in-process
shards' LLM calls (`LocalExecutor`), a chat model used from a worker thread (`SyncChat`).

Stopping one never leaves asyncio's "Task was destroyed but it is pending!" or "Event loop
is closed" behind, whenever the caller is interrupted (Ctrl-C, a deadline):

- `run(coro)` waits for the coroutine's result; if the waiting thread is interrupted, the
  coroutine's task is cancelled and the call returns (re-raising) only once the task has
  finished, its own cancellation handling (cancelling and awaiting what it started) done.
- `close(last)` stops the loop; then, in the loop's own thread, whatever still runs on it
  is cancelled and awaited, `last()` runs (closing connections, which belong to this
  loop), asynchronous generators and the default executor are shut down, and the loop is
  closed. A caller interrupted while it waits for that does not cut the teardown short.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from typing import Any, TypeVar

T = TypeVar("T")
SETTLE_S = 10.0  # how long an interrupted `run` waits for its task to wind down
CLOSE_S = 30.0  # how long `close` waits for the teardown


class LoopThread:
    """An event loop running in a daemon thread named `name` (`loop`: the loop to run,
    default a new asyncio one)."""

    def __init__(self, name: str, loop: asyncio.AbstractEventLoop | None = None):
        self.loop = loop or asyncio.new_event_loop()
        self._last: Callable[[], Awaitable[object]] | None = None
        self._error: BaseException | None = None  # raised by the teardown, for `close`
        self._closing = False
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()

    @property
    def ident(self) -> int | None:
        """The loop thread's `threading.get_ident()` (None before it started)."""
        return self._thread.ident

    def _main(self) -> None:
        try:
            self.loop.run_forever()
        finally:
            try:
                self.loop.run_until_complete(self._teardown())
            except BaseException as exc:  # handed to `close`, not printed by the thread
                self._error = exc
            finally:
                self.loop.close()

    async def _teardown(self) -> None:
        current = asyncio.current_task()
        await cancel_all(t for t in asyncio.all_tasks() if t is not current)
        try:
            if self._last is not None:
                await self._last()
        finally:
            await self.loop.shutdown_asyncgens()
            await self.loop.shutdown_default_executor()  # (DNS lookups run there)

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float | None = None) -> T:
        """The result of `coro`, run on the loop (`TimeoutError` after `timeout_s`). If the
        wait ends early (a timeout, a KeyboardInterrupt), the task is cancelled and waited
        for (at most `SETTLE_S`) before the exception goes on."""
        result: concurrent.futures.Future[T] = concurrent.futures.Future()
        ended = threading.Event()
        task: list[asyncio.Task[T]] = []  # (touched on the loop's thread only)

        def finished(done: asyncio.Task[T]) -> None:
            _settle(result, done)
            ended.set()

        def start() -> None:
            if result.cancelled():  # given up before it started: it never will
                coro.close()
                ended.set()
                return
            task.append(self.loop.create_task(coro))
            task[0].add_done_callback(finished)

        def cancel() -> None:  # (queued after `start`, so it sees its task)
            if task:
                task[0].cancel()

        try:
            self.loop.call_soon_threadsafe(start)
        except RuntimeError:  # the loop is closed: the coroutine is dropped, not left
            coro.close()
            raise
        try:
            return result.result(timeout_s)
        except BaseException:
            result.cancel()
            if not self.loop.is_closed():
                self.loop.call_soon_threadsafe(cancel)
                ended.wait(SETTLE_S)
            raise

    def close(self, last: Callable[[], Awaitable[object]] | None = None) -> None:
        """Cancel and await what still runs on the loop, then await `last()` (e.g. close
        the connections opened on the loop), then close the loop; re-raises what the
        teardown raised. Later calls do nothing."""
        if self._closing:
            return
        self._closing = True
        self._last = last
        if not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(CLOSE_S)
        if self._error is not None:
            error, self._error = self._error, None
            raise error


async def cancel_all(tasks: Iterable[asyncio.Future[Any]]) -> None:
    """Cancel `tasks` and wait until every one has finished (their errors taken, so none
    is reported later as never retrieved)."""
    pending = list(tasks)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)


async def gather_or_cancel(*aws: Awaitable[T]) -> list[T]:
    """`asyncio.gather` of `aws`, except that when one of them fails, or the caller is
    cancelled, the others are cancelled and awaited before the error goes on (`gather`
    leaves them running, to be destroyed pending with their loop)."""
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        return await asyncio.gather(*tasks)
    except BaseException:
        await cancel_all(tasks)
        raise


def _settle(result: concurrent.futures.Future[T], task: asyncio.Task[T]) -> None:
    """Hand a finished task's outcome to the caller's future (unless it gave up)."""
    if task.cancelled():
        result.cancel()
        return
    error = task.exception()  # (taken even if the caller gave up: never "not retrieved")
    if not result.set_running_or_notify_cancel():
        return
    if error is not None:
        result.set_exception(error)
    else:
        result.set_result(task.result())
