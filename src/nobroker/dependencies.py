"""depends_on=: the prerequisites a new job waits for, as the Queue facade takes them.

`Queue.enqueue(..., depends_on=...)` and tasks' `apply_async(..., depends_on=...)`
take job ids, Jobs, TaskResults (anything with an `id`), a `Dependency`, or a
list mixing them; this module turns that into the job ids a backend with the
`dependencies` capability stores, and refuses it clearly on the others. The
rules a backend follows are in docs/TASKS.md, "Dependencies".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from . import transactions, validation
from .errors import NobrokerError

if TYPE_CHECKING:
    from .backend import Backend, Dependencies
    from .models import Job

__all__ = ["Dependency", "prerequisite_ids", "enqueuer", "failure_error"]


def failure_error(prerequisite: str, state: str) -> str:
    """A dependent's last_error when a failed prerequisite cancels it (every backend
    words it so): names the prerequisite and what became of it."""
    what = "was dead-lettered" if state == "dead" else f"was {state}"
    return f"prerequisite {prerequisite} {what}"


@dataclass(frozen=True, slots=True)
class Dependency:
    """RQ's shape: `Dependency(jobs=[r1, r2], allow_failure=True)`, accepted where
    depends_on= is; its allow_failure applies as the keyword's does."""

    jobs: Any
    allow_failure: bool = False


def prerequisite_ids(depends_on: Any) -> tuple[list[str], bool]:
    """The prerequisites' ids (duplicates dropped, order kept) and whether a
    `Dependency` asked for allow_failure; TypeError for anything else."""
    allow = False
    if isinstance(depends_on, Dependency):
        depends_on, allow = depends_on.jobs, depends_on.allow_failure
    if isinstance(depends_on, str) or hasattr(depends_on, "id"):
        items: Iterable[Any] = [depends_on]
    elif isinstance(depends_on, Iterable):
        items = depends_on
    else:
        raise TypeError(f"depends_on takes job ids, Jobs or TaskResults, not "
                        f"{type(depends_on).__name__}")
    ids: list[str] = []
    for item in items:
        job_id = item if isinstance(item, str) else getattr(item, "id", None)
        if not isinstance(job_id, str):
            raise TypeError(f"depends_on takes job ids, Jobs or TaskResults, not "
                            f"{type(item).__name__}")
        ids.append(validation.job_id(job_id))
    return list(dict.fromkeys(ids)), allow


def enqueuer(queue: object, backend: Backend, connection: Any, depends_on: Any,
             allow_failure: bool) -> Callable[..., Job]:
    """What writes one job for Queue.enqueue: transactions.enqueuer's writer without
    `depends_on`, else the backend's enqueue with prerequisites. NobrokerError where the
    backend has none, or inside the caller's transaction (the release is written with
    the prerequisite's ack, which that transaction does not hold)."""
    if depends_on is None:
        return transactions.enqueuer(queue, backend, connection)
    if not backend.capabilities.dependencies:
        raise NobrokerError(f"depends_on= is not supported by the {type(backend).__name__} "
                            "backend (it lacks the 'dependencies' capability)")
    if connection is not None or transactions.active(queue) is not None:
        raise NobrokerError("depends_on= cannot be written in the caller's transaction")
    ids, allow = prerequisite_ids(depends_on)
    if not isinstance(allow_failure, bool):
        raise TypeError("allow_failure must be a bool")

    def write(payload_text: str, payload: Any, *, priority: int, delay: float,
              max_attempts: int, job_id: str | None, meta: dict[str, Any] | None = None
              ) -> Job:
        if job_id is not None and job_id in ids:
            raise ValueError(f"job {job_id!r} cannot depend on itself")
        return cast("Dependencies", backend).enqueue(
            payload_text, payload, priority=priority, delay=delay,
            max_attempts=max_attempts, job_id=job_id, depends_on=ids,
            allow_failure=allow_failure or allow, meta=meta)

    return write
