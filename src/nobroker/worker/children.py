"""A child process per slot (`pool="process"`): the parent's handle on it, and its loop.

What it owns: `ChildProcess`, the slot's child, started with the "spawn"
context so no thread or lock of the parent is copied; and `child_main`, the
child's side. At a time limit the child is killed (SIGKILL), and a child that
dies (a segfault, the OOM killer) is reported with the signal's name; the next
call starts a fresh child.

Rules for the child: it imports the handler or task by name
("module:qualname"), never receives a pickled callable or pickled job data:
each request and each reply is one JSON text over a pipe. While a call runs,
its `current_job().progress()` and `set_meta()` go up the same pipe as
`{"report": ...}` messages (coalesced in the child, as in a thread); the parent
writes each under the job's lease and answers it before reading on. It ignores
SIGINT, since the parent decides when work stops, and it exits when the
parent closes the pipe (or dies).
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import json
import multiprocessing
import signal
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from ..errors import NobrokerError, SerializationError
from ..models import Job, JobState, Progress
from ..tasks import RunningJob, call_as
from .pool import Outcome, describe_error, error_delays, timed_out

__all__ = ["ChildProcess", "child_main"]

_CONTEXT = "spawn"
NoteWrite = Callable[[Progress | None, dict[str, Any]], None]  # the parent's write of a report


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

    def call(self, request: dict[str, Any], timeout: float | None,
             write_notes: NoteWrite | None = None) -> Outcome:
        """Send one request; wait for the reply, at most `timeout` seconds, meanwhile
        writing each progress report the call makes with `write_notes(progress, meta)`
        and answering it (None: a report is refused as having nowhere to go).

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
            deadline = None if timeout is None else time.monotonic() + timeout
            while True:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                if not conn.poll(left):
                    self.kill()
                    self.start()  # the replacement starts its imports now, not at the next job
                    assert timeout is not None
                    return timed_out(timeout)
                reply = json.loads(conn.recv_bytes())
                if "report" not in reply:
                    break
                conn.send_bytes(_written(reply["report"], write_notes))
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


def _written(report: dict[str, Any], write_notes: NoteWrite | None) -> bytes:
    """A child's report written in the parent: the answer the child waits for."""
    progress = report["progress"]
    try:
        if write_notes is None:
            raise NobrokerError("this job's reports have nowhere to go")
        write_notes(None if progress is None else (progress[0], progress[1]), report["meta"])
    except NobrokerError as exc:  # raised in the child's progress() or set_meta()
        return json.dumps({"ok": False, "error": describe_error(exc)}).encode()
    return b'{"ok": true}'


# -- the child's side ------------------------------------------------------


class _PipeNotes:
    """A child's RunningJob writes its reports through this: each one sent to the
    parent, which writes it under the lease (ChildProcess.call), and its answer
    awaited, so a report fails in the child as it would in the parent. The lock keeps
    a held report's timer thread and the call's own thread from interleaving."""

    def __init__(self, conn: Any, name: str) -> None:
        self.conn, self.name = conn, name
        self.lock = threading.Lock()

    def write_notes(self, job: Job, progress: Progress | None, meta: dict[str, Any]) -> None:
        report = {"progress": None if progress is None else list(progress), "meta": meta}
        with self.lock:
            self.conn.send_bytes(json.dumps({"report": report}).encode())
            answer = json.loads(self.conn.recv_bytes())
        if not answer["ok"]:
            raise NobrokerError(f"the worker could not write the report: {answer['error']}")


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
        running = _running(request, conn)
        try:
            try:
                value = _child_call(request, running)
                if inspect.isawaitable(value):
                    if loop is None:
                        loop = asyncio.new_event_loop()
                    value = loop.run_until_complete(value)
            finally:
                running.flush()  # the last report, before the reply that settles the job
            if not request["keep"]:
                value = None
            try:
                text = json.dumps({"ok": True, "result": value}, allow_nan=False)
            except (TypeError, ValueError) as exc:
                raise SerializationError(f"the return value is not JSON: {exc}") from None
        except BaseException as exc:  # the call's failure, sent back as its last_error
            retry, snooze = error_delays(exc)
            text = json.dumps({"ok": False, "error": describe_error(exc),
                               "traceback": "".join(traceback.format_exception(exc)),
                               "retry_delay": retry, "snooze_delay": snooze})
        try:
            conn.send_bytes(text.encode())
        except OSError:  # the parent is gone or gave up on this call
            return


def _running(request: dict[str, Any], conn: Any) -> RunningJob:
    """The call's `current_job()`: the job as leased, its reports sent to the parent."""
    fields = dict(request["job"])
    fields["state"] = JobState(fields["state"])
    if fields.get("progress") is not None:
        fields["progress"] = tuple(fields["progress"])
    return RunningJob(Job(**fields), _PipeNotes(conn, str(request.get("queue") or "")))


def _child_call(request: dict[str, Any], running: RunningJob) -> Any:
    module_name, _, qualname = str(request["spec"]).partition(":")
    target: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        target = getattr(target, part)
    if request["handler"]:
        return call_as(running, target, (running.job,), {})
    return call_as(running, target, request["args"], request["kwargs"])
