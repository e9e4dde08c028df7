"""A finished job's outcome, and waiting for it from asyncio code.

`Queue.result` and `Queue.aresult` (and a task's `TaskResult`) return what a
done job's ack stored, or raise `TaskFailed` for a job that ended dead or
cancelled; `await_outcome` waits for that in a worker thread, in slices, so
an awaiting coroutine never blocks its event loop and a cancelled await
leaves no thread waiting for long.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from . import validation
from .codec import encode_payload
from .errors import TaskFailed
from .models import Job, JobState

__all__ = ["outcome", "finished_outcome", "await_outcome", "result_text", "wait_arguments"]

AWAIT_SLICE = 1.0  # seconds one worker-thread wait lasts at most


def result_text(result: Any, result_ttl: float | None,
                missing: object) -> tuple[str | None, float | None]:
    """An ack's result as JSON text (None when the caller passed `missing`: no result)
    and its retention (None: the queue's), checked."""
    ttl = None if result_ttl is None else validation.number("result_ttl", result_ttl,
                                                             minimum=0)
    return (None if result is missing else encode_payload(result, "result")), ttl


def wait_arguments(job_id: str, timeout: float | None) -> tuple[str, float | None]:
    """A wait for a job to finish: its id and timeout (None: no limit), checked."""
    limit = None if timeout is None else validation.number("timeout", timeout, minimum=0)
    return validation.job_id(job_id), limit


def finished_outcome(job: Job | None, job_id: str, timeout: float | None) -> Any:
    """`outcome` of what a wait returned; TimeoutError if it returned nothing."""
    if job is None:
        raise TimeoutError(f"job {job_id!r} did not finish within {timeout:g}s")
    return outcome(job)


def outcome(job: Job) -> Any:
    """A finished job's result, or TaskFailed if it did not end done."""
    if job.state is not JobState.DONE:
        raise TaskFailed(job.id, str(job.state), job.last_error)
    return job.result


async def await_outcome(wait_finished: Callable[[str, float | None], Job | None],
                        job_id: str, limit: float | None) -> Any:
    """The outcome of `job_id` once `wait_finished` (a backend's) sees it finished;
    TimeoutError after `limit` seconds (None: as long as it takes)."""
    deadline = None if limit is None else time.monotonic() + limit
    while True:
        left = AWAIT_SLICE if deadline is None else min(
            AWAIT_SLICE, max(0.0, deadline - time.monotonic()))
        job = await asyncio.to_thread(wait_finished, job_id, left)
        if job is not None or (deadline is not None and time.monotonic() >= deadline):
            return finished_outcome(job, job_id, limit)
