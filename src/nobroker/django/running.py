"""What a worker runs for a Django task's job, and how it finds the task.

`nobroker_work` gives each queue's task registry a resolver: a job naming a
Django task of this backend registers `run_task` under that name on first
sight, so the worker needs no list of tasks and runs what the payload names
(only tasks of installed apps: see backend.load_task). `run_task` is a plain
module-level function, so `--pool process` children import it too.

Around each call, as Django's request cycle does: stale database connections
are closed before and after, so a worker whose connection dropped keeps
working (an `atomic=True` task's are checked by database.atomic_transaction,
around the transaction it runs in). Django's signals fire here, in the worker: `task_started`, then
`task_finished` after every attempt, with the status the result has after it
(SUCCESSFUL; READY when it will be retried; FAILED after the last attempt);
an atomic task's once its transaction ended: after the commit of its ack
(never if that rolls back), or after the rollback of a failed attempt.
"""

from __future__ import annotations

import functools
import os
import socket
import time
import traceback
from typing import Any

from ..errors import Retry, Snooze
from ..queue import Queue
from ..tasks import Task as NobrokerTaskHandle
from ..tasks import current_job
from .records import ERROR_PREFIX, OUTCOME_MARK, History, TaskAttemptFailed

__all__ = ["run_task", "resolver", "worker_id"]


def worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _ready() -> None:
    """Set Django up in a process that has not (a `--pool process` child)."""
    from django.apps import apps
    if not apps.ready:
        import django
        django.setup()


def run_task(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """Run the Django task the current job names; its outcome becomes the job's result.

    A failure raises TaskAttemptFailed carrying the history (the worker stores it
    as last_error and retries or dead-letters the job); nobroker's Retry and
    Snooze pass through untouched.
    """
    _ready()
    from django.db import DEFAULT_DB_ALIAS, close_old_connections, transaction
    from django.tasks import TaskContext
    from django.tasks.signals import task_finished, task_started
    from django.utils.json import normalize_json

    from .backend import NobrokerBackend, load_task
    from .database import after_rollback

    running = current_job()
    job = None if running is None else running.job
    if job is None or not isinstance(job.payload, dict):
        raise RuntimeError("run_task runs only inside a nobroker worker, for a task job")
    path = job.payload["task"]
    from django.tasks import task_backends
    found = [(backend, task) for backend in task_backends.all()
             if isinstance(backend, NobrokerBackend)
             and (task := load_task(path, backend.alias)) is not None]
    if not found:
        raise LookupError(f"{path!r} is not a task of a nobroker backend")
    backend, task = found[0]
    history = History.from_job(job).started(worker_id(), time.time())
    result = backend.result_of(job, "RUNNING", history)
    sender = type(backend)
    # An atomic task runs inside transaction.atomic() (database.atomic_transaction, which
    # checks the connections around it): closing one here would end that transaction.
    in_transaction = getattr(job, "connection", None) is not None
    if not in_transaction:
        close_old_connections()
    try:
        task_started.send(sender=sender, task_result=result)
        try:
            if task.takes_context:
                value = task.call(TaskContext(task_result=result), *args, **kwargs)
            else:
                value = task.call(*args, **kwargs)
            value = normalize_json(value)
        except (Retry, Snooze):
            raise
        except Exception as exc:
            kind = type(exc)
            history = history.failed(f"{kind.__module__}.{kind.__qualname__}",
                                     "".join(traceback.format_exception(exc)))
            last = job.attempts >= job.max_attempts
            after = backend.result_of(job, "FAILED" if last else "READY", history)
            failed = functools.partial(task_finished.send, sender=sender, task_result=after)
            if in_transaction:  # its writes are rolled back first: receivers see that
                after_rollback(failed)
            else:
                failed()
            raise TaskAttemptFailed(history.error_text()[len(ERROR_PREFIX):]) from exc
        done = backend.result_of(job, "SUCCESSFUL", history)
        object.__setattr__(done, "_return_value", value)
        finished = functools.partial(task_finished.send, sender=sender, task_result=done)
        if in_transaction:  # once the ack's transaction committed; never on its rollback
            # robust: a raising receiver is logged; the job is done, committed already
            transaction.on_commit(finished, using=backend.database or DEFAULT_DB_ALIAS,
                                  robust=True)
        else:
            finished()
        return {OUTCOME_MARK: 1, "task": path, "args": list(args), "kwargs": dict(kwargs),
                "value": value, **history.as_mapping()}
    finally:
        if not in_transaction:
            close_old_connections()


def resolver(queue: Queue, alias: str) -> Any:
    """A registry resolver for `queue`: Django tasks of backend `alias` run `run_task`."""
    from .backend import load_task

    def resolve(name: str) -> NobrokerTaskHandle[Any, Any] | None:
        task = load_task(name, alias)
        if task is None:
            return None
        # The job carries its own max_attempts (written at enqueue).
        handle: NobrokerTaskHandle[Any, Any] = queue.task(
            run_task, name=name, atomic=bool(getattr(task, "atomic", False)))
        return handle

    return resolve
