"""The task layer, above the queue: `@q.task`, `@q.periodic`, results by name.

Layer order: this package imports the queue's public names; queue.py
imports it only lazily, inside `Queue.task` and `Queue.periodic`, so the
core never depends on it. The Worker runs a queue's registered tasks when it
is given no handler (worker/slots.py).

    registry.py  Task, the per-queue registry, the payload format
    task_result.py  TaskResult, the handle .delay() returns
    canvas.py    signatures (task.s), chain, group, chord, and their compiler
    graph_builder.py  the compiler's pure bookkeeping: steps in, GraphNodes out
    step_payloads.py  the JSON a workflow step carries (its parents' ids)
    steps.py     the task runner's reading of a job: a step's inputs, read when it runs
    workflow_results.py  GroupResult, and the handles a workflow's delay() returns
    cron.py      the five-field cron parser and its next/previous times
    zones.py     time zones for cron: names, and the instants of a local minute (DST)
    schedule.py  periodic schedules and the Scheduler that enqueues their ticks
    running.py   RunningJob: current_job(), with progress() and set_meta()
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from ..limits import require as require_limits
from .canvas import Signature, chain, chord, compile_canvas, group
from .cron import Cron
from .registry import (
    Task,
    TaskCall,
    TaskRegistry,
    call_as,
    current_job,
    parse_payload,
    queue_clock,
    registered_queues,
    registry_of,
)
from .running import RunningJob
from .schedule import Schedule, tick_job_id
from .scheduler import Scheduler
from .steps import step_call
from .task_result import TaskResult
from .workflow_results import GroupResult

if TYPE_CHECKING:
    from ..queue import Queue

__all__ = ["Cron", "RunningJob", "Schedule", "Scheduler", "Task", "TaskCall", "TaskRegistry",
           "TaskResult", "call_as", "current_job", "parse_payload", "periodic", "queue_clock",
           "registered_queues", "registry_of", "task", "tick_job_id",
           "Signature", "chain", "group", "chord", "GroupResult", "compile_canvas",
           "step_call"]

P = ParamSpec("P")
R = TypeVar("R")


def task(queue: Queue, fn: Callable[P, R] | None = None, *, name: str | None = None,
         max_attempts: int | None = None, priority: int = 0, timeout: float | None = None,
         result_ttl: float | None = None, lock: bool | str = False,
         schedule: Schedule | None = None, atomic: bool = False,
         limits: dict[str, Any] | None = None) -> Any:
    """Register `fn` on `queue` (what `Queue.task` does); usable with or without ().
    `limits`: its rate_limit, rate_limit_key, concurrency and concurrency_key, declared
    in the queue's settings (nobroker.limits) once the task is made."""
    def register(func: Callable[P, R]) -> Task[P, R]:
        made = Task(queue, func, name=name, max_attempts=max_attempts, priority=priority,
                    timeout=timeout, result_ttl=result_ttl, lock=lock, schedule=schedule,
                    atomic=atomic)
        if limits and any(value is not None for value in limits.values()):
            declare_limits(queue, made.name, limits)
        registry_of(queue).add(made)
        return made

    return register if fn is None else register(fn)


def declare_limits(queue: Queue, name: str, limits: dict[str, Any]) -> None:
    """Task `name`'s limits, into its queue's settings; refused (NobrokerError) where
    the backend cannot hold them, ValueError for a key declared otherwise before."""
    require_limits(queue.backend, "rate_limit= and concurrency=")
    queue.backend.settings.limits.declare_task(name, **limits)


def periodic(queue: Queue, *, cron: str | None = None, every: float | timedelta | None = None,
             tz: str | None = None, name: str | None = None, max_attempts: int | None = None,
             priority: int = 0, timeout: float | None = None,
             result_ttl: float | None = None,
             lock: bool | str = False) -> Callable[[Callable[[], R]], Task[[], R]]:
    """Register a task that runs on a schedule (what `Queue.periodic` does)."""
    schedule = Schedule.of(cron, every, tz)

    def register(func: Callable[[], R]) -> Task[[], R]:
        made: Task[[], R] = task(queue, func, name=name, max_attempts=max_attempts,
                                 priority=priority, timeout=timeout, result_ttl=result_ttl,
                                 lock=lock, schedule=schedule)
        return made

    return register
