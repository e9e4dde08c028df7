"""TaskResult: the handle `.delay()` hands back on one task job.

It holds the queue and the job's id, nothing else of the job: `state`, `ready`
and `get` ask the queue each time. `parent` is the handle of the step before
it in a workflow (a chain's previous step, a chord's header), None for a job
enqueued on its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import JobNotFoundError
from ..models import Job, JobState

if TYPE_CHECKING:
    from ..queue import Queue

__all__ = ["TaskResult"]

_FINISHED = frozenset({JobState.DONE, JobState.DEAD, JobState.CANCELLED})


class TaskResult:
    """A handle on one task job: its id, its state, and a way to wait for its result."""

    __slots__ = ("id", "parent", "queue")

    def __init__(self, queue: Queue, job_id: str, parent: Any = None) -> None:
        self.queue = queue
        self.id = job_id
        # The handle of what ran before it in a workflow: a TaskResult or a GroupResult
        # (workflow_results.py, which imports this module: hence Any); None at the start.
        self.parent = parent

    @property
    def job(self) -> Job:
        """The job as the queue holds it now (JobNotFoundError once it is forgotten)."""
        return self.queue.get(self.id)

    @property
    def info(self) -> Job:
        """`job`, by the name RQ and Celery users look for: its `progress` and `meta`
        (what the running task reported) among the rest."""
        return self.queue.get(self.id)

    @property
    def state(self) -> JobState:
        """pending, leased, done, dead or cancelled, as of now."""
        return self.job.state

    def ready(self) -> bool:
        """True once the job has finished: done, dead or cancelled."""
        try:
            return self.state in _FINISHED
        except JobNotFoundError:
            return True  # finished and forgotten after its retention

    def get(self, timeout: float | None = None) -> Any:
        """Wait for the result (woken by the ack, no polling) and return it.

        Raises TaskFailed (with the job's last_error) for a dead or cancelled
        job, TimeoutError if it has not finished within `timeout` seconds.
        """
        return self.queue.result(self.id, timeout=timeout)

    async def aget(self, timeout: float | None = None) -> Any:
        """`get` for asyncio code: awaits without blocking the event loop."""
        return await self.queue.aresult(self.id, timeout=timeout)

    def cancel(self) -> bool:
        """Cancel the job: True if it was pending or leased, False if already finished."""
        return self.queue.cancel(self.id)

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, TaskResult) and other.id == self.id
                and other.queue is self.queue)

    def __hash__(self) -> int:
        return hash(self.id)

    def __repr__(self) -> str:
        return f"TaskResult({self.id!r})"
