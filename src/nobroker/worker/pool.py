"""Where a Worker's handler call runs, and how a time limit ends it.

What it owns: running one call and reporting its `Outcome` (a result, or the
`last_error` text to nack with, and the delay a `Retry` or `Snooze` named),
four ways:

- inline, in the slot's own thread (the default, no time limit);
- in a fresh thread, under a time limit: at the limit the call is reported
  as failed and its thread abandoned, because Python cannot kill a thread;
  it runs on, detached, and whatever it returns is ignored;
- on the Worker's one asyncio event loop (`EventLoop`), for `async def`
  handlers and tasks: the slot thread waits on the coroutine's future, so at
  most `concurrency` coroutines run at once; at a time limit the coroutine
  is cancelled;
- in a child process, one per slot (`pool="process"`): children.py.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ..errors import Retry, Snooze
from ..models import Job

__all__ = ["Outcome", "EventLoop", "run_in_thread", "timeout_text", "timed_out",
           "describe_error", "error_delays", "job_to_json"]


def describe_error(exc: BaseException) -> str:
    """`last_error` for a handler's exception: its type and message."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def timeout_text(seconds: float) -> str:
    return f"TimeoutError: exceeded {seconds:g} s"


@dataclass(frozen=True, slots=True)
class Outcome:
    """How one call ended: `error_text` None means it returned `result`."""

    result: Any = None
    error_text: str | None = None
    error: BaseException | None = None  # the exception, when it was raised in this process
    detail: str | None = None  # a traceback formatted elsewhere (a child process)
    timed_out: bool = False
    crashed: bool = False  # a child process died under the call
    retry_delay: float | None = None  # the call raised Retry(delay=...): nack with it
    snooze_delay: float | None = None  # not an attempt (Snooze, a held lock): snooze
    settled: str | None = None  # already settled by the run (an atomic task): its counter

    @classmethod
    def failed(cls, exc: BaseException) -> Outcome:
        retry, snooze = error_delays(exc)
        return cls(error_text=describe_error(exc), error=exc, retry_delay=retry,
                   snooze_delay=snooze)

    def traceback(self) -> str:
        if self.error is not None:
            return "".join(traceback.format_exception(self.error)).rstrip()
        return self.detail or ""


def error_delays(exc: BaseException) -> tuple[float | None, float | None]:
    """(retry_delay, snooze_delay) that an exception asks for."""
    if isinstance(exc, Retry):
        return exc.delay, None
    if isinstance(exc, Snooze):
        return None, exc.delay
    return None, None


def timed_out(seconds: float) -> Outcome:
    return Outcome(error_text=timeout_text(seconds), timed_out=True)


def run_in_thread(call: Callable[[], Any], timeout: float, name: str,
                  after: Callable[[], None] | None = None) -> Outcome:
    """Run `call` in a new daemon thread; give up on it after `timeout` seconds.
    `after` runs in that thread once the call ended, even if we gave up on it."""
    box: list[Outcome] = []
    done = threading.Event()

    def target() -> None:
        try:
            box.append(Outcome(result=call()))
        except BaseException as exc:  # whatever it raises is the job's failure
            box.append(Outcome.failed(exc))
        finally:
            try:
                if after is not None:
                    after()
            finally:
                done.set()

    threading.Thread(target=target, name=name, daemon=True).start()
    if not done.wait(timeout):
        return timed_out(timeout)
    return box[0]


class EventLoop:
    """One asyncio event loop, in a thread of its own, for a Worker's coroutines."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._afters: dict[object, Callable[[], None]] = {}  # of coroutines not ended yet

    def _running(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                self._thread = threading.Thread(target=loop.run_forever, name=self.name,
                                                daemon=True)
                self._thread.start()
                self._loop = loop
            return self._loop

    def run(self, awaitable: Awaitable[Any], timeout: float | None,
            after: Callable[[], None] | None = None) -> Outcome:
        """Run `awaitable` on the loop; cancel it at `timeout` seconds. `after` runs
        once the coroutine really ended (a cancelled one may take a while to), even
        if we stopped waiting for it, or once close() stopped the loop under it."""
        finish = None if after is None else self._once(after)
        coroutine = _wrap(awaitable, finish)
        try:
            future = asyncio.run_coroutine_threadsafe(coroutine, self._running())
        except BaseException:
            coroutine.close()  # never started: its finally does not run
            if finish is not None:
                finish()
            raise
        try:
            return Outcome(result=future.result(timeout))
        except concurrent.futures.TimeoutError as exc:
            if future.done():  # the coroutine raised TimeoutError itself
                return Outcome.failed(exc)
            future.cancel()
            assert timeout is not None
            return timed_out(timeout)
        except concurrent.futures.CancelledError:
            return Outcome(error_text="CancelledError: the coroutine was cancelled")
        except BaseException as exc:  # the coroutine's own failure
            return Outcome.failed(exc)

    def close(self) -> None:
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join(1.0)
        if not thread.is_alive():
            loop.close()
            # A coroutine still pending will never run again: what waited for its
            # end (its run's lock) is let go now.
            with self._lock:
                left, self._afters = list(self._afters.values()), {}
            for after in left:
                after()

    def _once(self, after: Callable[[], None]) -> Callable[[], None]:
        """`after`, called at most once: by its coroutine's end, or by close()."""
        token = object()

        def finish() -> None:
            with self._lock:
                pending = self._afters.pop(token, None)
            if pending is not None:
                pending()

        with self._lock:
            self._afters[token] = after
        return finish


async def _wrap(awaitable: Awaitable[Any], after: Callable[[], None] | None) -> Any:
    try:
        return await awaitable
    finally:
        if after is not None:
            after()


def job_to_json(job: Job) -> dict[str, Any]:
    """The fields of a Job as JSON values, for a child process to rebuild it."""
    return {"id": job.id, "payload": job.payload, "priority": job.priority,
            "attempts": job.attempts, "max_attempts": job.max_attempts,
            "state": str(job.state), "available_at": job.available_at,
            "enqueued_at": job.enqueued_at, "last_error": job.last_error, "token": job.token,
            "lease_expires_at": job.lease_expires_at,
            "progress": None if job.progress is None else list(job.progress), "meta": job.meta}
