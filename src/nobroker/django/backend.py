"""NobrokerBackend: Django's Tasks framework on a nobroker queue directory or URL.

Each Django queue name is a nobroker queue of that name at `OPTIONS["location"]`
(a directory, a `postgresql://` URL, or `memory://`). A Django task's call is a
nobroker task job, ``{"task": "app.tasks.fn", "args": [...], "kwargs": {...}}``,
whose id is also the `TaskResult` id: ``QUEUE.HEX``, so `get_result` knows the
queue and `nobroker get ID` shows the same job.

Enqueue waits for the transaction: inside `transaction.atomic()` the job is
written when the transaction commits and never if it rolls back (Django's
`on_commit`; OPTIONS `"enqueue_on_commit": False` writes at once). With
OPTIONS `"database"` (a PostgreSQL alias: database.py) the job is written in
the transaction itself, on Django's connection, and commits with it. Either
way `task_enqueued` is sent at the commit, never for a rolled-back job. The
TaskResult it returns has its id at once; `get_result` finds the job from the
commit on. Arguments are checked for JSON before anything is written.
"""

from __future__ import annotations

import inspect
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import transaction
from django.tasks import Task, TaskResult, TaskResultStatus
from django.tasks.backends.base import BaseTaskBackend
from django.tasks.base import TaskError
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
from django.tasks.signals import task_enqueued
from django.utils.module_loading import import_string

from .. import validation
from ..codec import encode_payload
from ..errors import JobNotFoundError, SerializationError
from ..models import Job
from ..queue import Queue
from ..transactions import commit_with
from .database import connection_of, database_url, on_commit_of
from .records import OUTCOME_MARK, STATUS_OF, History, timestamp

__all__ = ["NobrokerBackend", "NobrokerTask"]


@dataclass(frozen=True, slots=True, kw_only=True)
class NobrokerTask(Task):
    """Django's Task, plus nobroker's per-task retry count (``@task(max_attempts=3)``)
    and exactly-once database writes (``@task(atomic=True)``)."""

    max_attempts: int | None = None
    # Run inside transaction.atomic() on OPTIONS "database", with the ack written in
    # it: the task's ORM writes and its completion commit together (database.py).
    atomic: bool = False


class NobrokerBackend(BaseTaskBackend):
    task_class = NobrokerTask
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        # BaseTaskBackend keeps a set; the worker serves queues in the listed order.
        self.queue_names: list[str] = list(dict.fromkeys(params.get("QUEUES", ["default"])))
        options = dict(self.options)
        self.location = options.pop("location", None)
        self.enqueue_on_commit = bool(options.pop("enqueue_on_commit", True))
        self.database: str | None = options.pop("database", None)
        self.schema: str | None = options.pop("schema", None)  # with "database" only
        self.queue_options = options  # the rest go to Queue(): max_attempts, fsync, ...
        self._queues: dict[str, Queue] = {}
        self._lock = threading.Lock()

    # -- the queues -----------------------------------------------------------

    def queue(self, name: str) -> Queue:
        """This process's Queue for the Django queue `name` (opened once)."""
        with self._lock:
            queue = self._queues.get(name)
            if queue is None:
                location = self.location
                if self.database is not None:
                    location = location or database_url(self.database, self.schema)
                if location is None:
                    raise InvalidTask(f"TASKS[{self.alias!r}] needs OPTIONS['location']: a "
                                      f"directory, a postgresql:// URL or 'memory://'")
                queue = Queue(location, name, **self.queue_options)
                if self.database is not None:  # delay_on_commit: at that alias's commit
                    commit_with(queue, on_commit_of(self.database))
                self._queues[name] = queue
            return queue

    def close(self) -> None:
        with self._lock:
            queues, self._queues = list(self._queues.values()), {}
        for queue in queues:
            queue.close()

    # -- Django's backend API -------------------------------------------------

    def validate_task(self, task: Task) -> None:
        super().validate_task(task)
        try:
            validation.queue_name(task.queue_name)
        except ValueError as exc:
            raise InvalidTask(str(exc)) from None
        if getattr(task, "atomic", False):
            if self.database is None:
                raise InvalidTask(f"{task.module_path}: atomic=True needs the backend's "
                                  f"OPTIONS['database'] (its writes commit with the ack "
                                  f"on Django's connection to that database)")
            if inspect.iscoroutinefunction(task.func):
                raise InvalidTask(f"{task.module_path}: atomic=True takes a plain function: "
                                  f"its transaction is one thread's connection")
        max_attempts = getattr(task, "max_attempts", None)
        if max_attempts is not None:
            try:
                validation.integer("max_attempts", max_attempts, 1, validation.INT_LIMIT)
            except (TypeError, ValueError) as exc:
                raise InvalidTask(str(exc)) from None

    def enqueue(self, task: Task, args: Any, kwargs: Any) -> TaskResult:
        self.validate_task(task)
        job_id = f"{task.queue_name}.{uuid.uuid4().hex}"
        result = TaskResult(task=task, id=job_id, status=TaskResultStatus.READY,
                            enqueued_at=None, started_at=None, last_attempted_at=None,
                            finished_at=None, args=args, kwargs=kwargs, backend=self.alias,
                            errors=[], worker_ids=[])
        payload = {"task": task.module_path, "args": result.args, "kwargs": result.kwargs}
        try:
            encode_payload(payload)  # refused here, before anything is written
        except ValueError as exc:
            raise SerializationError(f"task {task.module_path}: {exc}") from None
        delay = 0.0
        if task.run_after is not None:
            delay = max(0.0, task.run_after.timestamp() - time.time())
        attempts = getattr(task, "max_attempts", None)

        def write(connection: Any = None) -> None:
            job = self.queue(task.queue_name).enqueue(
                payload, priority=task.priority, delay=delay, max_attempts=attempts,
                job_id=job_id, connection=connection)
            object.__setattr__(result, "enqueued_at",
                               timestamp(job.enqueued_at, settings.USE_TZ))

        def announce() -> None:
            task_enqueued.send(type(self), task_result=result)

        def write_and_announce() -> None:
            write()
            announce()

        if self.database is not None:  # in the caller's transaction: commits with it
            write(connection_of(self.database))
            transaction.on_commit(announce, using=self.database)
        elif self.enqueue_on_commit:
            transaction.on_commit(write_and_announce)
        else:
            write_and_announce()
        return result

    def get_result(self, result_id: str) -> TaskResult:
        queue_name, dot, _ = str(result_id).partition(".")
        if not dot or queue_name not in self.queue_names:
            raise TaskResultDoesNotExist(result_id)
        try:
            job = self.queue(queue_name).get(result_id)
        except JobNotFoundError:
            raise TaskResultDoesNotExist(result_id) from None
        return self.result_of(job)

    # -- a job as a TaskResult ------------------------------------------------

    def result_of(self, job: Job, status: str | None = None,
                  history: History | None = None) -> TaskResult:
        """The TaskResult of `job`; `status` and `history` as a worker sees them mid-run."""
        outcome = job.result if isinstance(job.result, dict) and job.result.get(OUTCOME_MARK) \
            else None
        call = outcome if outcome is not None else job.payload
        if not isinstance(call, dict) or not isinstance(call.get("task"), str):
            raise TaskResultDoesNotExist(f"{job.id} is not a Django task's job")
        task = load_task(call["task"], self.alias)
        if task is None:
            raise TaskResultDoesNotExist(f"{job.id}: {call['task']!r} is not a task of "
                                         f"the {self.alias!r} backend")
        history = history if history is not None else History.from_job(job)
        aware = settings.USE_TZ
        workers = list(history.workers)
        # Attempts no worker recorded (running now, or lost with a killed worker).
        workers += ["unknown"] * max(0, job.attempts - len(workers))
        result = TaskResult(
            task=task, id=job.id, status=TaskResultStatus(status or STATUS_OF[job.state]),
            enqueued_at=timestamp(job.enqueued_at, aware),
            started_at=timestamp(history.started_at, aware),
            last_attempted_at=timestamp(history.last_attempted_at, aware),
            finished_at=timestamp(job.finished_at, aware) if status is None else None,
            args=call.get("args", []), kwargs=call.get("kwargs", {}), backend=self.alias,
            errors=[TaskError(exception_class_path=e.get("exception_class_path", ""),
                              traceback=e.get("traceback", "")) for e in history.errors],
            worker_ids=workers)
        if outcome is not None:
            object.__setattr__(result, "_return_value", outcome.get("value"))
        return result


def load_task(path: str, alias: str) -> Task | None:
    """The Django task at `path` if it is one of backend `alias`'s, else None.

    Only modules of installed apps are imported: a job's payload is data, and
    naming a module must not be a way to run its import-time code.
    """
    from django.apps import apps
    module = path.rpartition(".")[0]
    if not any(module == app.name or module.startswith(app.name + ".")
               for app in apps.get_app_configs()):
        return None
    try:
        found = import_string(path)
    except ImportError:
        return None
    if isinstance(found, Task) and found.backend == alias and found.module_path == path:
        return found
    return None
