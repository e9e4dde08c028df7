"""FileBackend's blocking waits: until a job may be leasable (Backend.wait), and until
a job has finished (Backend.wait_finished). Both sleep on the handle's wake-up
channels, never polling: a writer's poke, a due time or the timeout ends a sleep.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ..limits import Limits
from ..models import Job, JobState
from .handle import QueueHandle

__all__ = ["wait_leasable", "wait_finished"]

_FINISHED = (JobState.DONE, JobState.DEAD, JobState.CANCELLED)
_LONG_WAIT = 3600.0  # wait_finished without a timeout re-looks this often, for safety


def wait_leasable(handle: QueueHandle, limits: Limits | None, timeout: float) -> bool:
    """True once a job may be leasable (ready, a delay, lease deadline or rate window
    due, or a producer's poke); False after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        handle.prepare_wait()  # before looking, so a poke from now on is kept for us
        paused, due, now = handle.read(
            lambda state: (state.paused, None if state.paused else state.next_wakeup(
                limits, handle.peek_now()), handle.peek_now()))
        if due is not None and due <= now:
            return True
        left = deadline - time.monotonic()
        limit = left if due is None else min(left, due - now)
        woken = handle.wait(limit)
        if not (paused and woken):
            return woken or (due is not None and due <= handle.peek_now())
        # Paused: a producer's poke makes nothing leasable yet; wait on for RESUME.


def wait_finished(handle: QueueHandle, get: Callable[[str], Job], job_id: str,
                  timeout: float | None) -> Job | None:
    """The job (read by `get`) once it is done, dead or cancelled; None after
    `timeout` seconds (None: no limit)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    waiter = None
    try:
        while True:
            job = get(job_id)
            if job.state in _FINISHED:
                return job
            if waiter is None:  # look again once writers can poke us (finished.py)
                waiter = handle.finish_waiter()
                continue
            left = _LONG_WAIT if deadline is None else deadline - time.monotonic()
            if left <= 0:
                return None
            waiter.wait(left)
    finally:
        if waiter is not None:
            waiter.close()
