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
- in a child process (`ChildProcess`, `pool="process"`), one per slot,
  started with the "spawn" context so no thread or lock of the parent is
  copied: at a time limit the child is killed (SIGKILL), and a child that
  dies (a segfault, the OOM killer) is reported with the signal's name; the
  next call starts a fresh child.

Rules for the child: it imports the handler or task by name
("module:qualname"), never receives a pickled callable or pickled job data:
each request and each reply is one JSON text over a pipe. It ignores
SIGINT, since the parent decides when work stops, and it exits when the
parent closes the pipe (or dies).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib
import inspect
import json
import multiprocessing
import signal
import threading
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ..errors import Retry, SerializationError, Snooze
from ..models import Job, JobState
from ..tasks import call_as

__all__ = ["Outcome", "EventLoop", "ChildProcess", "run_in_thread", "timeout_text",
           "describe_error", "job_to_json"]

_CONTEXT = "spawn"


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
        retry, snooze = _delays(exc)
        return cls(error_text=describe_error(exc), error=exc, retry_delay=retry,
                   snooze_delay=snooze)

    def traceback(self) -> str:
        if self.error is not None:
            return "".join(traceback.format_exception(self.error)).rstrip()
        return self.detail or ""


def _delays(exc: BaseException) -> tuple[float | None, float | None]:
    """(retry_delay, snooze_delay) that an exception asks for."""
    if isinstance(exc, Retry):
        return exc.delay, None
    if isinstance(exc, Snooze):
        return None, exc.delay
    return None, None


def _timed_out(seconds: float) -> Outcome:
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
        return _timed_out(timeout)
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
            return _timed_out(timeout)
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
            "lease_expires_at": job.lease_expires_at}


class ChildProcess:
    """One child process that runs calls sent to it, one at a time.

    Its slot thread calls `call`; the Worker's shutdown may `kill` or `close`
    it from another thread meanwhile, so the handles change under a lock, and
    once closed no replacement is started (it would outlive the Worker).
    """

    def __init__(self, preload: tuple[str, ...], name: str) -> None:
        self.preload = preload
        self.name = name
        self._lock = threading.Lock()
        self._process: Any = None  # multiprocessing's SpawnProcess
        self._conn: Any = None  # the parent's end of the pipe
        self._ready = False  # the child said it has imported its modules
        self._closed = False  # the Worker is done with it: start nothing more

    def start(self) -> None:
        """Start the child if there is none (and the Worker is not done with it)."""
        with self._lock:
            if self._process is not None or self._closed:
                return
            context: Any = multiprocessing.get_context(_CONTEXT)
            parent_end, child_end = context.Pipe(duplex=True)
            process = context.Process(target=child_main, args=(child_end, self.preload),
                                      name=self.name, daemon=False)
            process.start()
            child_end.close()
            self._process, self._conn, self._ready = process, parent_end, False

    def call(self, request: dict[str, Any], timeout: float | None) -> Outcome:
        """Send one request; wait for the reply, at most `timeout` seconds.

        The limit counts from the request, not from the child's start: a fresh
        child first reports that it has imported its modules.
        """
        text = json.dumps(request).encode()
        self.start()
        conn = self._conn  # ours even if kill() from another thread forgets it
        if conn is None:
            return Outcome(error_text="WorkerLostError: the worker is stopping")
        try:
            if not self._ready:
                conn.recv_bytes()  # the child's "ready", once its imports are done
                self._ready = True
            conn.send_bytes(text)
            if not conn.poll(timeout):
                self.kill()
                self.start()  # the replacement starts its imports now, not at the next job
                assert timeout is not None
                return _timed_out(timeout)
            reply = json.loads(conn.recv_bytes())
        except (EOFError, OSError):
            how = self._reap()
            self.start()  # its replacement
            return Outcome(error_text=f"WorkerLostError: the child process running the job "
                                      f"{how}", crashed=True)
        if reply["ok"]:
            return Outcome(result=reply["result"])
        return Outcome(error_text=reply["error"], detail=reply.get("traceback"),
                       retry_delay=reply.get("retry_delay"),
                       snooze_delay=reply.get("snooze_delay"))

    def _reap(self) -> str:
        """Wait for a dead child; say how it died."""
        process = self._forget()
        if process is None:
            return "was gone"
        process.join(5.0)
        code = process.exitcode
        if code is None:
            process.kill()
            process.join()
            return "stopped answering and was killed"
        if code < 0:
            try:
                return f"was killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"was killed by signal {-code}"
        return f"exited with status {code}"

    def kill(self, *, final: bool = False) -> None:
        """Kill the child now; `final`: and start no replacement.

        The process dies before the pipe is closed: a slot thread blocked
        reading the pipe then sees it end, whereas closing a descriptor under
        another thread's select() would not wake it.
        """
        with self._lock:
            process = self._process
            self._closed = self._closed or final
        if process is not None:
            process.kill()
            process.join()
        self._forget(final, only=process)

    def close(self, timeout: float = 1.0) -> None:
        """Let the child exit (it sees the pipe close), kill it if it does not; final."""
        process = self._forget(True)
        if process is None:
            return
        process.join(timeout)
        if process.is_alive():
            process.kill()
            process.join()

    def _forget(self, final: bool = False, only: Any = None) -> Any:
        """Drop the handles (closing the pipe); returns the process they were for.
        With `only`, nothing is dropped unless they are still that process's."""
        with self._lock:
            self._closed = self._closed or final
            if only is not None and self._process is not only:
                return None  # the slot thread reaped it and started a replacement
            process, conn = self._process, self._conn
            self._process = self._conn = None
        if conn is not None:
            conn.close()
        return process


# -- the child's side ------------------------------------------------------

def child_main(conn: Any, preload: tuple[str, ...]) -> None:
    """A child process's loop: one JSON request in, one JSON reply out, until EOF."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C goes to the whole group
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the parent stops us by closing the pipe
    for module in preload:
        try:
            importlib.import_module(module)
        except Exception:  # reported with the first job that needs it
            pass
    loop: asyncio.AbstractEventLoop | None = None
    try:
        conn.send_bytes(b"ready")
    except OSError:  # the parent let go of us before we were ready (it is stopping)
        return
    while True:
        try:
            request = json.loads(conn.recv_bytes())
        except (EOFError, OSError):
            return
        try:
            value = _child_call(request)
            if inspect.isawaitable(value):
                if loop is None:
                    loop = asyncio.new_event_loop()
                value = loop.run_until_complete(value)
            if not request["keep"]:
                value = None
            try:
                text = json.dumps({"ok": True, "result": value}, allow_nan=False)
            except (TypeError, ValueError) as exc:
                raise SerializationError(f"the return value is not JSON: {exc}") from None
        except BaseException as exc:  # the call's failure, sent back as its last_error
            retry, snooze = _delays(exc)
            text = json.dumps({"ok": False, "error": describe_error(exc),
                               "traceback": "".join(traceback.format_exception(exc)),
                               "retry_delay": retry, "snooze_delay": snooze})
        try:
            conn.send_bytes(text.encode())
        except OSError:  # the parent is gone or gave up on this call
            return


def _child_call(request: dict[str, Any]) -> Any:
    module_name, _, qualname = str(request["spec"]).partition(":")
    target: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        target = getattr(target, part)
    fields = dict(request["job"])
    fields["state"] = JobState(fields["state"])
    job = Job(**fields)
    if request["handler"]:
        return call_as(job, target, (job,), {})
    return call_as(job, target, request["args"], request["kwargs"])
