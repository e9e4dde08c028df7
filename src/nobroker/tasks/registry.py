"""Tasks: named functions a queue's jobs call, and the handle a caller keeps.

What it owns: the `Task` a `@q.task` decorator returns (`.delay()`,
`.apply_async()`, `.adelay()`; calling it runs the function in-process) and
the per-queue `TaskRegistry` that a `Worker(q)` without a handler runs jobs
from. The `TaskResult` that `.delay()` returns is task_result.py's.

The payload of a task job is plain JSON that any program may write:

    {"task": "myapp.tasks.send_email", "args": ["ada@example.com"], "kwargs": {"subject": "hi"}}

Rules: arguments are checked for JSON when the job is enqueued, so a bad one
raises `SerializationError` from `.delay()` and never reaches a worker; the
registry lives beside its Queue (a weak mapping), never in the Queue: queue.py
only hands `@q.task` and `@q.periodic` over to this package, importing it
inside those methods, so importing queue.py imports no task code; nothing
here reads a clock except through the queue's (for `eta=`).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar

from .. import validation
from ..codec import encode_payload
from ..errors import SerializationError
from ..models import Job, JobState
from ..transactions import after_commit, transactional
from .canvas import Signature
from .running import RunningJob, enter_wrappers, runs_wrapped
from .task_result import TaskResult

if TYPE_CHECKING:
    from ..queue import Queue
    from .schedule import Schedule

__all__ = ["Task", "TaskResult", "TaskRegistry", "TaskCall", "registry_of", "parse_payload",
           "queue_clock", "current_job", "call_as"]

P = ParamSpec("P")
R = TypeVar("R")

_REGISTRIES: weakref.WeakKeyDictionary[Queue, TaskRegistry] = weakref.WeakKeyDictionary()
_CURRENT: contextvars.ContextVar[RunningJob | None] = contextvars.ContextVar("nobroker_job",
                                                                             default=None)


def current_job() -> RunningJob | None:
    """The job a Worker is running this task or handler for (None outside one).

    What Celery's `self.request` and RQ's `get_current_job()` give: the job's
    id, attempts and payload, e.g. to make a side effect idempotent; and
    `progress(fraction, note)` and `set_meta(mapping)` to report on it
    (running.py). `current_job().job` is the Job itself.
    """
    return _CURRENT.get()


def call_as(job: Job | RunningJob, fn: Callable[..., Any], args: Sequence[Any],
            kwargs: Mapping[str, Any]) -> Any:
    """Call `fn` with `current_job()` returning `job`; an awaitable it returns is
    wrapped so that `current_job()` holds while it runs too. A plain Job has nowhere
    to write reports: its progress() and set_meta() raise NobrokerError."""
    if not isinstance(job, RunningJob):
        job = RunningJob(job, None)
    deferred = inspect.iscoroutinefunction(fn)  # its wrappers go around the await
    token = _CURRENT.set(job)
    try:
        if deferred or not runs_wrapped():  # most runs: no ExitStack to build
            value = fn(*args, **kwargs)
        else:
            with contextlib.ExitStack() as around:
                enter_wrappers(around, job)
                value = fn(*args, **kwargs)
    finally:
        _CURRENT.reset(token)
    if value is not None and inspect.isawaitable(value):  # None: most handlers' return
        return _awaited_as(job, value, deferred)
    return value


async def _awaited_as(job: RunningJob, awaitable: Any, wrapped: bool) -> Any:
    _CURRENT.set(job)  # in the asyncio task's own copy of the context
    with contextlib.ExitStack() as around:
        if wrapped:
            enter_wrappers(around, job)
        return await awaitable


def queue_clock(queue: Queue) -> Callable[[], float]:
    """The clock the queue stamps its records with (its settings'; injected in tests)."""
    settings = getattr(getattr(queue, "backend", None), "settings", None)
    clock = getattr(settings, "clock", None)
    return clock if callable(clock) else time.time


@dataclass(frozen=True, slots=True)
class TaskCall:
    """A task job's payload, decoded: which task, with what."""

    name: str
    args: list[Any]
    kwargs: dict[str, Any]


def parse_payload(payload: Any) -> TaskCall:
    """The task call a job's payload names; ValueError (one line) if it is not one."""
    if not isinstance(payload, dict) or not isinstance(payload.get("task"), str):
        raise ValueError('not a task payload: expected {"task": NAME, "args": [...], '
                         '"kwargs": {...}}')
    args = payload.get("args", [])
    kwargs = payload.get("kwargs", {})
    if not isinstance(args, list):
        raise ValueError(f"task payload: 'args' must be a list, not {type(args).__name__}")
    if not isinstance(kwargs, dict):
        raise ValueError(f"task payload: 'kwargs' must be an object, not "
                         f"{type(kwargs).__name__}")
    return TaskCall(payload["task"], args, kwargs)


class Task(Generic[P, R]):
    """A function registered on a queue; see the module doc."""

    def __init__(self, queue: Queue, fn: Callable[P, R], *, name: str | None = None,
                 max_attempts: int | None = None, priority: int = 0,
                 timeout: float | None = None, result_ttl: float | None = None,
                 lock: bool | str = False, schedule: Schedule | None = None,
                 atomic: bool = False) -> None:
        if not callable(fn):
            raise TypeError(f"a task must be a function, not {type(fn).__name__}")
        self.fn = fn
        self.queue = queue
        self.name = name if name is not None else f"{fn.__module__}.{fn.__qualname__}"
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"task name must be a non-empty string, not {self.name!r}")
        self.max_attempts = _optional_int("max_attempts", max_attempts, 1)
        self.priority = _int("priority", priority)
        self.timeout = _optional_seconds("timeout", timeout)
        self.result_ttl = _optional_seconds("result_ttl", result_ttl, zero=True)
        self.lock = _lock_key(lock, self.name)
        self.schedule = schedule
        self.is_async = inspect.iscoroutinefunction(fn)
        self.atomic = _atomic(queue, atomic, self.is_async)
        functools.update_wrapper(self, fn)

    @property
    def spec(self) -> str:
        """MODULE:QUALNAME, how a child process imports this task (pool="process")."""
        return f"{self.fn.__module__}:{self.fn.__qualname__}"

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Run the function here and now; nothing is enqueued."""
        return self.fn(*args, **kwargs)

    def delay(self, *args: P.args, **kwargs: P.kwargs) -> TaskResult:
        """Enqueue a call with these arguments; durable when this returns. On an eager
        queue (nobroker.testing) the call has run, and finished, when this returns."""
        return self.apply_async(args, kwargs)

    def apply_async(self, args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None,
                    *, delay: float | timedelta = 0.0, eta: datetime | float | None = None,
                    job_id: str | None = None, priority: int | None = None,
                    max_attempts: int | None = None, depends_on: Any = None,
                    allow_failure: bool = False) -> TaskResult:
        """Enqueue a call, with the queue options: `delay` seconds (or `eta`, a datetime
        or epoch seconds), an idempotency `job_id`, a `priority` for this call, and
        `depends_on` (TaskResults or job ids it waits for; docs/TASKS.md)."""
        payload = {"task": self.name, "args": list(args),
                   "kwargs": {} if kwargs is None else dict(kwargs)}
        if isinstance(delay, timedelta):
            delay = delay.total_seconds()
        if eta is not None:
            if delay:
                raise ValueError("give delay= or eta=, not both")
            at = eta.timestamp() if isinstance(eta, datetime) else eta
            delay = max(0.0, float(at) - queue_clock(self.queue)())
        try:
            job = self.queue.enqueue(
                payload, priority=self.priority if priority is None else priority,
                delay=delay, job_id=job_id, depends_on=depends_on, allow_failure=allow_failure,
                max_attempts=self.max_attempts if max_attempts is None else max_attempts)
        except SerializationError as exc:
            raise SerializationError(f"task {self.name!r}: arguments are not JSON: "
                                     f"{exc}") from None
        if self.queue.eager and job.state is JobState.PENDING:  # here and now, as a worker
            from ..testing import run_eagerly
            run_eagerly(self.queue, job)
        return TaskResult(self.queue, job.id)

    def s(self, *args: Any, **kwargs: Any) -> Signature:
        """A signature of a call (canvas.py): enqueued later, in a chain, group or chord;
        in a chain it receives the previous step's result in front of `args`."""
        return Signature(self, args, kwargs)

    def si(self, *args: Any, **kwargs: Any) -> Signature:
        """An immutable signature: in a chain it ignores the previous step's result."""
        return Signature(self, args, kwargs, immutable=True)

    def signature(self, args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None,
                  *, immutable: bool = False, **options: Any) -> Signature:
        """Celery's long form of `s`: `task.signature((2, 2), countdown=10)`."""
        return Signature(self, args, kwargs, immutable=immutable, **options)

    def delay_on_commit(self, *args: P.args, **kwargs: P.kwargs) -> None:
        """`delay` once the application's transaction commits, never if it rolls back:
        under Django (the app nobroker.django), its `transaction.on_commit` on the
        database of the queue's backend's OPTIONS "database", else the default one;
        at once outside `atomic()`. Elsewhere NobrokerError: nothing
        says when a transaction commits (on PostgreSQL, `with q.transaction(conn):`).
        The arguments are checked for JSON now; the job's id is not known until then."""
        try:
            encode_payload({"task": self.name, "args": list(args), "kwargs": dict(kwargs)})
        except SerializationError as exc:
            raise SerializationError(f"task {self.name!r}: arguments are not JSON: "
                                     f"{exc}") from None
        after_commit(f"{self.name}.delay_on_commit()", lambda: self.apply_async(args, kwargs),
                     self.queue)

    async def adelay(self, *args: P.args, **kwargs: P.kwargs) -> TaskResult:
        """`delay` for asyncio code: the write and its fsync run off the event loop."""
        return await asyncio.to_thread(self.apply_async, args, kwargs)

    async def aapply_async(self, args: Sequence[Any] = (),
                           kwargs: Mapping[str, Any] | None = None,
                           **options: Any) -> TaskResult:
        """`apply_async` for asyncio code."""
        return await asyncio.to_thread(functools.partial(self.apply_async, args, kwargs,
                                                         **options))

    def __repr__(self) -> str:
        return f"<Task {self.name}>"


class TaskRegistry:
    """The tasks registered on one queue, by name.

    `resolver`, when set, is asked for a name the registry does not know (and
    what it returns is registered): a framework integration (nobroker.django)
    registers its tasks on first use instead of importing every module first.
    """

    def __init__(self) -> None:
        self._tasks: dict[str, Task[Any, Any]] = {}
        self.resolver: Callable[[str], Task[Any, Any] | None] | None = None

    def add(self, task: Task[Any, Any]) -> None:
        known = self._tasks.get(task.name)
        if known is not None and known.fn is not task.fn:
            raise ValueError(f"a task named {task.name!r} is already registered on this "
                             f"queue; pass name= to tell them apart")
        self._tasks[task.name] = task

    def get(self, name: str) -> Task[Any, Any] | None:
        task = self._tasks.get(name)
        if task is None and self.resolver is not None:
            task = self.resolver(name)
            if task is not None:
                self.add(task)
        return task

    def periodic(self) -> list[Task[Any, Any]]:
        return [t for t in self._tasks.values() if t.schedule is not None]

    def __iter__(self) -> Iterator[Task[Any, Any]]:
        return iter(list(self._tasks.values()))

    def __len__(self) -> int:
        return len(self._tasks)

    def __contains__(self, name: object) -> bool:
        return name in self._tasks


def registry_of(queue: Queue, *, create: bool = True) -> TaskRegistry:
    """The registry of `queue` (an empty one if it has none and `create` is False)."""
    registry = _REGISTRIES.get(queue)
    if registry is None:
        registry = TaskRegistry()
        if create:
            _REGISTRIES[queue] = registry
    return registry


def registered_queues() -> list[Queue]:
    """Every live queue with tasks registered on it, in no particular order."""
    return [q for q, registry in list(_REGISTRIES.items()) if len(registry)]


def _int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    return value


def _optional_int(name: str, value: object, minimum: int) -> int | None:
    if value is None:
        return None
    number = _int(name, value)
    if number < minimum:
        raise ValueError(f"{name} must be >= {minimum}, not {number}")
    return number


def _optional_seconds(name: str, value: object, *, zero: bool = False) -> float | None:
    if value is None:
        return None
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number of seconds, not {type(value).__name__}")
    if not (value >= 0 if zero else value > 0) or value == float("inf"):
        raise ValueError(f"{name} must be a finite number {'>=' if zero else '>'} 0, "
                         f"not {value}")
    return float(value)


def _atomic(queue: Queue, atomic: object, is_async: bool) -> bool:
    """A task's `atomic=`: refused where the ack cannot join the task's transaction."""
    if not atomic:
        return False
    transactional(queue.backend, "atomic=True")
    if is_async:
        raise ValueError("atomic=True takes a plain function: its transaction is one "
                         "connection's, used by the worker thread that runs it")
    return True


def _lock_key(lock: object, name: str) -> str | None:
    """A task's `lock=`: False for none, True for one named after the task, or its key."""
    if lock is False or lock is None:
        return None
    if lock is True:
        return validation.lock_key(name)
    if not isinstance(lock, str):
        raise TypeError(f"lock must be True, False or a key string, not {type(lock).__name__}")
    return validation.lock_key(lock)
