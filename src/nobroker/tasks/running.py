"""The running job's context: what `current_job()` returns inside a task or handler.

What it owns: one running job's progress and metadata as its code reports them
(`progress(fraction, note)`, `set_meta(mapping)`), and writing them to the
queue under the job's lease (Backend.write_notes: on files a PROGRESS record,
fenced by the lease token like an EXTEND, so a stale holder's report is
refused). Everything else reads through to the leased Job: `id`, `attempts`,
`payload`, `token`, ... as `current_job()` gave them before; `meta` is the
merged metadata so far (a copy).

Writes are coalesced: at most one per job per `interval` seconds (1 by
default). A report inside the interval after a write is held, and the newest
held report is written when the interval ends (a timer thread) or when the
worker calls `flush()` as the call returns, before it acks or nacks: so the
last value is always written, and nothing is written for a call that reports
nothing. A write made inside `progress()` or `set_meta()` raises what the
queue raised (NotLeasedError: the job is no longer this holder's); a held
one written later is logged instead, as nobody waits for it.

Instrumentation (nobroker.otel's consumer span) wraps every run: `wrap_runs(fn)`
registers `fn(running_job)`, a context manager that call_as (registry.py) enters
around each call of a task or handler in this process, in the context the call
runs in (its thread, or for a coroutine the task that awaits it).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, ExitStack
from typing import Any, Final, Protocol

from ..codec import metadata as checked_meta
from ..errors import NobrokerError
from ..models import Job, Progress
from ..validation import progress as checked_progress

__all__ = ["RunningJob", "NoteWriter", "INTERVAL", "RunWrapper", "wrap_runs", "unwrap_runs",
           "enter_wrappers", "runs_wrapped"]

INTERVAL: Final = 1.0  # seconds between two writes of one job's progress and metadata
log = logging.getLogger("nobroker")


class NoteWriter(Protocol):
    """Where a running job's reports are written: its queue's backend, or in a process
    pool's child the pipe to the worker, which writes them (worker/children.py)."""

    @property
    def name(self) -> str: ...  # the queue's name

    def write_notes(self, job: Job, progress: Progress | None,
                    meta: dict[str, Any]) -> None: ...


class RunningJob:
    """The job a worker is running, as its code sees it (see the module doc)."""

    __slots__ = ("_reports", "job")

    def __init__(self, job: Job, backend: NoteWriter | None, *, interval: float = INTERVAL,
                 clock: Callable[[], float] = time.monotonic,
                 reports: _Reports | None = None) -> None:
        self.job = job  # the Job as leased; current_job().job for code that wants a Job
        # `reports`: another context's of the same run (around), shared with it.
        self._reports = _Reports(job, backend, interval, clock) if reports is None else reports

    def __getattr__(self, name: str) -> Any:
        return getattr(self.job, name)

    def __repr__(self) -> str:
        return f"RunningJob({self.job!r})"

    @property
    def meta(self) -> dict[str, Any]:
        """The job's metadata so far, merged (a copy)."""
        return self._reports.meta()

    @property
    def queue_name(self) -> str | None:
        """The name of the job's queue (None where this process has no queue: a child)."""
        backend = self._reports.backend
        return None if backend is None else backend.name

    @property
    def reported(self) -> Progress | None:
        """The last progress reported, (fraction, note), or None."""
        return self._reports.progress

    def around(self, job: Job) -> RunningJob:
        """This context reading through to `job` (the same job, as an atomic task's
        TransactionJob), its reports shared with this one."""
        return RunningJob(job, None, reports=self._reports)

    def progress(self, fraction: float, note: str | None = None) -> None:
        """How far the job got, from 0 to 1, and what it is doing (`note`)."""
        self._reports.report(checked_progress(fraction, note), None)

    def set_meta(self, mapping: Mapping[str, Any]) -> None:
        """Merge `mapping` (string keys, JSON values) into the job's metadata."""
        checked_meta(mapping)  # refused before anything is merged
        self._reports.report(None, mapping)

    def flush(self) -> None:
        """Write the held report now, if there is one (the worker, as the call returns);
        a failure is logged."""
        self._reports.flush()


class _Reports:
    """One running job's reports and their writes, shared by its contexts."""

    def __init__(self, job: Job, backend: NoteWriter | None, interval: float,
                 clock: Callable[[], float]) -> None:
        self.job = job
        self.backend = backend  # None: reports cannot be written here
        self.interval = interval
        self.clock = clock
        self.lock = threading.Lock()
        self.progress: Progress | None = job.progress
        self.merged: dict[str, Any] = dict(job.meta)
        self.written_at: float | None = None
        self.held = False  # a report not written yet
        self.timer: threading.Timer | None = None

    def meta(self) -> dict[str, Any]:
        with self.lock:
            return checked_meta(self.merged)  # a copy

    def report(self, progress: Progress | None, mapping: Mapping[str, Any] | None) -> None:
        if self.backend is None:
            raise NobrokerError("progress() and set_meta() are not available here: this "
                                "job was called without its queue (call_as with a plain Job)")
        with self.lock:
            if mapping is not None:
                self.merged = checked_meta({**self.merged, **mapping})  # a copy
            if progress is not None:
                self.progress = progress
            now = self.clock()
            if self.written_at is None or now - self.written_at >= self.interval:
                self._write()
                return
            self.held = True
            if self.timer is None:
                self.timer = threading.Timer(self.written_at + self.interval - now,
                                             self._on_timer)
                self.timer.daemon = True
                self.timer.start()

    def flush(self) -> None:
        with self.lock:
            if self.timer is not None:
                self.timer.cancel()
                self.timer = None
            if self.held:
                self._write_logged()

    # -- under the lock ------------------------------------------------------

    def _write(self) -> None:
        assert self.backend is not None
        self.held = False
        self.written_at = self.clock()
        self.backend.write_notes(self.job, self.progress, dict(self.merged))

    def _write_logged(self) -> None:
        try:
            self._write()
        except NobrokerError as exc:
            log.warning("job %s: its progress could not be written: %s", self.job.id, exc)

    def _on_timer(self) -> None:
        with self.lock:
            self.timer = None
            if self.held:
                self._write_logged()


RunWrapper = Callable[[RunningJob], AbstractContextManager[object]]
_WRAPPERS: list[RunWrapper] = []  # process-wide, like logging's handlers: few, rarely changed


def wrap_runs(wrapper: RunWrapper) -> None:
    """Enter `wrapper(job)` around every run of a task or handler in this process (once,
    however often it is registered); the outermost is the one registered first."""
    if wrapper not in _WRAPPERS:
        _WRAPPERS.append(wrapper)


def unwrap_runs(wrapper: RunWrapper) -> None:
    """Stop entering `wrapper` around runs (nothing if it was not registered)."""
    if wrapper in _WRAPPERS:
        _WRAPPERS.remove(wrapper)


def runs_wrapped() -> bool:
    """Whether any wrapper is registered (call_as skips the ExitStack otherwise)."""
    return bool(_WRAPPERS)


def enter_wrappers(stack: ExitStack, job: RunningJob) -> None:
    """Enter every registered wrapper of `job`'s run on `stack` (call_as's)."""
    for wrapper in tuple(_WRAPPERS):
        stack.enter_context(wrapper(job))
