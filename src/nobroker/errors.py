"""The one error hierarchy of nobroker.

Every error the library raises on purpose derives from `NobrokerError`, so a
caller can catch one class. Low-level errors (`struct.error`,
`json.JSONDecodeError`, `OSError`) are translated into these at the boundary
where they happen and never leak as themselves.

`Retry` and `Snooze` are the exceptions here that nobroker does not raise: a
handler raises them to nobroker, to say when its job runs again.
"""

from __future__ import annotations

from datetime import timedelta

from . import validation

__all__ = [
    "NobrokerError",
    "NotLeasedError",
    "JobNotFoundError",
    "LockTimeoutError",
    "CorruptLogError",
    "CompactionError",
    "QueueClosedError",
    "SerializationError",
    "StorageError",
    "TaskFailed",
    "UnsafeFilesystemError",
    "DatabaseError",
    "ConnectionLostError",
    "TaskLockedError",
    "WorkerCrashedError",
    "Retry",
    "Snooze",
]


class NobrokerError(Exception):
    """Root of every error nobroker raises on purpose."""


class NotLeasedError(NobrokerError):
    """An ack/nack/extend carried a fencing token that is no longer the job's lease."""

    def __init__(self, job_id: str, reason: str) -> None:
        super().__init__(f"job {job_id!r} is not leased by this holder: {reason}")
        self.job_id = job_id
        self.reason = reason

    @classmethod
    def unless_held(cls, job_id: str, state: str | None, lease: int | None,
                    token: int | None) -> None:
        """Raise, saying why, unless `token` is the current lease of the job, which is
        in `state` (None: no longer in the queue) under the lease `lease`; so that
        every backend refuses a stale holder in the same words."""
        if state is None:
            raise cls(job_id, "it is no longer in the queue")
        if state != "leased":
            raise cls(job_id, f"it is {state}")
        if token is None or lease != token:
            raise cls(job_id, f"lease {token} was superseded by lease {lease}")


class JobNotFoundError(NobrokerError):
    """No job with this id is in the queue (never enqueued, purged, or done and forgotten)."""

    def __init__(self, job_id: str, what: str = "job") -> None:
        super().__init__(f"no {what} with id {job_id!r}")
        self.job_id = job_id


class LockTimeoutError(NobrokerError):
    """Another process held the queue's lock for longer than `lock_timeout`."""

    def __init__(self, path: str, timeout: float, holder_pid: int | None) -> None:
        holder = f" (held by pid {holder_pid})" if holder_pid is not None else ""
        super().__init__(f"could not lock {path} within {timeout:g}s{holder}")
        self.path = path
        self.timeout = timeout
        self.holder_pid = holder_pid


class CorruptLogError(NobrokerError):
    """A log holds damage that no crash can produce; nothing was modified."""

    def __init__(self, path: str, offset: int, reason: str) -> None:
        super().__init__(f"{path}: corrupt at offset {offset}: {reason}")
        self.path = path
        self.offset = offset
        self.reason = reason


class CompactionError(NobrokerError):
    """Compaction failed; the previous generation is still the authoritative one."""


class QueueClosedError(NobrokerError):
    """The queue was closed, or poisoned by a failed fsync and must be reopened."""


class SerializationError(NobrokerError, ValueError):
    """A payload, job id or argument cannot be stored as strict JSON; nothing was written."""


class StorageError(NobrokerError):
    """The operating system refused a write or an fsync.

    The call's outcome is indeterminate: it may or may not survive a crash.
    After a failed fsync the handle is poisoned (every later call raises
    `QueueClosedError`) because the kernel may already have dropped the pages,
    so a retried fsync would prove nothing.
    """

    errno: int | None

    def __init__(self, path: str, operation: str, error: OSError) -> None:
        super().__init__(f"{path}: {operation} failed: {error.strerror or error}")
        self.path = path
        self.operation = operation
        self.errno = error.errno


class UnsafeFilesystemError(NobrokerError):
    """The queue directory is on a network file system, where file locks protect nothing."""


# -- the PostgreSQL backend's (nobroker.postgres translates psycopg's errors into these)


class DatabaseError(StorageError):
    """The PostgreSQL server refused a call; as with StorageError, its outcome is unknown.

    `location` is the queue's URL with its password replaced by ***; the
    message never holds the password either.
    """

    def __init__(self, location: str, operation: str, reason: str) -> None:
        NobrokerError.__init__(self, f"{location}: {operation} failed: {reason}")
        self.path = location
        self.operation = operation
        self.errno = None


class ConnectionLostError(DatabaseError):
    """The connection to the server broke or could not be made.

    The call's outcome is unknown (a commit may have happened just before the
    break). The handle itself stays usable: its next call connects again, so a
    worker waits a little and carries on.
    """


class TaskFailed(NobrokerError):
    """A job waited for (`TaskResult.get`, `Queue.result`) ended dead or cancelled, not done."""

    def __init__(self, job_id: str, state: str, last_error: str | None,
                 task: str | None = None) -> None:
        why = f": {last_error}" if last_error else ""
        which = f" (task {task!r})" if task else ""
        super().__init__(f"job {job_id!r}{which} ended {state}{why}")
        self.job_id = job_id
        self.state = state
        self.last_error = last_error
        self.task = task  # the task the job ran, where known (a workflow step's)


class TaskLockedError(NobrokerError):
    """A named lock (`Queue.lock`, a task's `lock=`) is held by another run, in
    this process or any other on the queue."""

    def __init__(self, key: str) -> None:
        super().__init__(f"the lock {key!r} is held by another run")
        self.key = key


class WorkerCrashedError(NobrokerError):
    """A Worker's own thread (a slot, the acker, the heartbeat) raised what nothing
    expected; the worker stopped. The traceback was logged and is chained as
    `__cause__`; a job that thread held comes back once its lease runs out."""

    def __init__(self, thread: str, reason: str) -> None:
        super().__init__(f"the worker's thread {thread} failed: {reason}")
        self.thread = thread
        self.reason = reason


class Retry(Exception):
    """Raised by a handler or task: give this job back, to run again after `delay`.

    `delay` is seconds or a timedelta (None: the queue's backoff policy). It
    is a failed attempt like any other: it counts against `max_attempts`
    (the last one moves the job to the dead-letter queue) and "Retry: reason"
    becomes its `last_error`. Only the wait is the handler's to choose, e.g.
    an API's Retry-After. Not a NobrokerError, so that a handler's own
    `except NobrokerError` around queue calls does not swallow it.
    """

    def __init__(self, reason: str = "", *, delay: float | timedelta | None = None) -> None:
        super().__init__(reason)
        self.delay = None if delay is None else _seconds("Retry delay", delay)


class Snooze(Exception):
    """Raised by a handler or task: give this job back untried, to run again after
    `delay` seconds (or a timedelta).

    Unlike Retry it is not an attempt: the job's attempts stay as they were
    before this run, so snoozing never dead-letters it (Oban's and River's
    snooze). For work that is not ready yet, not for a failure.
    """

    def __init__(self, reason: str = "", *, delay: float | timedelta) -> None:
        super().__init__(reason)
        self.delay = _seconds("Snooze delay", delay)


def _seconds(name: str, delay: float | timedelta) -> float:
    """A Retry's or Snooze's delay: seconds or a timedelta, finite and >= 0."""
    if isinstance(delay, timedelta):
        delay = delay.total_seconds()
    return validation.number(name, delay, minimum=0)
