"""What a task job calls, as the worker runs it: its payload, plus a workflow step's inputs.

`step_call(queue, job)` is the task runner's reading of a job: for a plain
task payload it is `parse_payload`; for a workflow step (step_payloads.py)
it also reads what the step waited for, from the queue, when it runs:

- "parents": the prerequisites' results (`Queue.get(id).result`), put in front
  of the step's own arguments (one value, or a list in member order);
- "failure_of": the watched job that was dead-lettered (the earliest, if
  several were), passed as the keywords `job_id=` and `error=` after the
  handler's own.

The engine released the step only once its prerequisites succeeded (or, for
a handler, one died), so a missing or unfinished result is a broken
workflow, not a race: ValueError, which fails this attempt with the reason.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import JobNotFoundError, NobrokerError
from ..models import Job, JobState
from .registry import TaskCall, parse_payload
from .step_payloads import Tree, failure_of, parents_of

if TYPE_CHECKING:
    from ..queue import Queue

__all__ = ["step_call"]


def step_call(queue: Queue, job: Job) -> TaskCall:
    """The task call `job` makes, its inputs read from `queue`; ValueError (one line)
    if the payload is not a task's or an input cannot be read."""
    call = parse_payload(job.payload)
    payload = job.payload
    tree = parents_of(payload)
    if tree is not None:
        call = TaskCall(call.name, [_value(queue, tree), *call.args], call.kwargs)
    watched = failure_of(payload)
    if watched is not None:
        dead = _first_dead(queue, watched)
        call = TaskCall(call.name, call.args,
                        {**call.kwargs, "job_id": dead.id, "error": dead.last_error})
    return call


def _value(queue: Queue, tree: Tree) -> Any:
    if isinstance(tree, str):
        return _result(queue, tree)
    return [_value(queue, item) for item in tree]


def _result(queue: Queue, job_id: str) -> Any:
    job = _read(queue, job_id)
    if job is None:
        raise ValueError(f"prerequisite {job_id} is no longer known: its result was "
                         f"kept for less time than the step waited (result_ttl)")
    if job.state is not JobState.DONE:
        raise ValueError(f"prerequisite {job_id} is {job.state}, not done: its result "
                         f"cannot be passed on")
    return job.result


def _first_dead(queue: Queue, ids: list[str]) -> Job:
    """The dead-lettered one of `ids` that finished first."""
    dead = [job for job in (_read(queue, i) for i in ids)
            if job is not None and job.state is JobState.DEAD]
    if not dead:
        raise ValueError("on_error handler: none of the jobs it watches is dead-lettered "
                         "(requeued since?)")
    return min(dead, key=lambda job: job.finished_at or 0.0)


def _read(queue: Queue, job_id: str) -> Job | None:
    """The job (None: the queue no longer knows it); ValueError if it cannot be read."""
    try:
        return queue.get(job_id)
    except JobNotFoundError:
        return None
    except NobrokerError as exc:  # a lost connection: this attempt fails, a retry reads
        raise ValueError(f"could not read prerequisite {job_id}: {exc}") from None
