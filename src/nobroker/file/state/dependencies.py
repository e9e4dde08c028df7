"""Planning the records of dependencies (depends_on=): which waiting jobs a finish
releases or cancels, decided under the lock in the batch that finishes the
prerequisite, so that the ack and the release are one write.

The rules (docs/TASKS.md, "Dependencies"): a waiting job is released (RELEASE)
in the batch that finishes the last prerequisite it waited for, when each of
them succeeded (or failed, with allow_failure); a prerequisite that is
dead-lettered or cancelled cancels its dependents without allow_failure (CANCEL
with `err` naming it), and theirs in turn, in the same batch. Nothing here
touches a file, reads a clock or draws a random number: the caller passes `now`.
"""

from __future__ import annotations

from collections.abc import Sequence

from ...dependencies import failure_error
from ...errors import JobNotFoundError
from ..log.records import (
    ALLOW_FAILURE,
    AT,
    ERROR,
    ID,
    IS_KEY,
    KEEP,
    MAX_ATTEMPTS,
    PRIORITY,
    TIME,
    WAIT,
    RecordType,
)
from .batch import Batch
from .state import JobState, QueueState

__all__ = ["prerequisites", "plan_waiting_enqueue", "plan_dependents"]

_FAILED = (JobState.DEAD, JobState.CANCELLED)


def prerequisites(state: QueueState, depends_on: Sequence[str]
                  ) -> tuple[list[str], tuple[str, JobState] | None]:
    """The prerequisites not finished yet, and the first that failed (dead or cancelled)
    with its state, if any. A prerequisite the queue does not know (never enqueued,
    or finished and forgotten) is JobNotFoundError, before anything is written; a
    finished keyed job still remembered counts as done."""
    unmet: list[str] = []
    failed: tuple[str, JobState] | None = None
    for job_id in dict.fromkeys(depends_on):
        entry = state.jobs.get(job_id)
        if entry is None:
            if job_id in state.done_keys:
                continue
            raise JobNotFoundError(job_id, "prerequisite job")
        if entry.state in _FAILED:
            failed = failed or (job_id, entry.state)
        elif entry.state is not JobState.DONE:
            unmet.append(job_id)
    return unmet, failed


def plan_waiting_enqueue(state: QueueState, batch: Batch, now: float, job_id: str,
                         payload_text: str, *, priority: int, delay: float,
                         max_attempts: int, keyed: bool, depends_on: Sequence[str],
                         allow_failure: bool) -> None:
    """The ENQUEUE of a new job with prerequisites: waiting for the unfinished ones
    (`w`), pending when they all succeeded, cancelled at once (ENQUEUE then CANCEL,
    its error naming the prerequisite) when one failed, without allow_failure."""
    unmet, failed = prerequisites(state, depends_on)
    if failed is not None and not allow_failure:
        batch.add_enqueue(job_id, priority, now + delay, now, max_attempts, keyed,
                          payload_text)
        batch.finishes += 1
        batch.add(RecordType.CANCEL, {ID: job_id, TIME: now, KEEP: batch.keep,
                                      ERROR: failure_error(*failed)})
        return
    if not unmet:
        batch.add_enqueue(job_id, priority, now + delay, now, max_attempts, keyed,
                          payload_text)
        return
    fields = {ID: job_id, PRIORITY: priority, AT: now + delay, TIME: now,
              MAX_ATTEMPTS: max_attempts}
    if keyed:
        fields[IS_KEY] = True
    fields[WAIT] = unmet
    if allow_failure:
        fields[ALLOW_FAILURE] = True
    batch.add_payload(RecordType.ENQUEUE, fields, payload_text)


def plan_dependents(state: QueueState, batch: Batch, now: float, job_id: str,
                    outcome: JobState) -> None:
    """Job `job_id` finishes with `outcome` (done, dead or cancelled) by the record
    just added to `batch`: RELEASE each waiting dependent whose prerequisites have
    all finished in this batch or before, and CANCEL (recursively) each that a
    failure settles. Records follow the finish they depend on, in the same batch."""
    waits = state.waits
    if not waits:
        return
    batch.settled.add(job_id)
    for dependent in list(waits.dependents.get(job_id, ())):
        if dependent in batch.resolved:
            continue
        wait = waits.by_job[dependent]
        if outcome is JobState.DONE or wait.allow_failure:
            if all(other in batch.settled for other in wait.unmet):
                batch.resolved.add(dependent)
                batch.add(RecordType.RELEASE, {ID: dependent})
            continue
        batch.resolved.add(dependent)
        batch.finishes += 1
        batch.add(RecordType.CANCEL, {ID: dependent, TIME: now, KEEP: batch.keep,
                                      ERROR: failure_error(job_id, outcome)})
        plan_dependents(state, batch, now, dependent, JobState.CANCELLED)
