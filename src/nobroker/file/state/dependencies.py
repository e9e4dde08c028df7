"""Planning the records of dependencies (depends_on=, enqueue_graph): which waiting
jobs a finish releases or cancels, decided under the lock in the batch that
finishes the prerequisite, so that the ack and the release are one write.

The rules (docs/TASKS.md, "Dependencies", and nobroker.dependencies.verdict): a
waiting job is released (RELEASE) in the batch that finishes the last
prerequisite it waited for, when each of them succeeded (mode SUCCESS) or
whatever became of them (ANY, allow_failure); a prerequisite that is
dead-lettered or cancelled cancels its SUCCESS dependents (CANCEL with `err`
naming it), and theirs in turn, in the same batch. A FAILURE dependent
(on_error) is released by a prerequisite's death and cancelled once all
finished without one. Nothing here touches a file, reads a clock or draws a
random number: the caller passes `now`.
"""

from __future__ import annotations

from collections.abc import Sequence

from ...dependencies import SUCCESS, Known, verdict
from ...errors import JobNotFoundError
from ...limits import JobKeys
from ..log.records import (
    AT,
    ERROR,
    ID,
    IS_KEY,
    KEEP,
    MAX_ATTEMPTS,
    PRIORITY,
    TIME,
    WAIT,
    Record,
    RecordType,
)
from .batch import Batch
from .limitfields import declared_cap, key_fields, plan_limited_enqueue
from .state import Entry, JobState, QueueState
from .waits import mode_fields

__all__ = ["prerequisites", "plan_waiting_enqueue", "plan_dependent_enqueue",
           "plan_dependents", "with_released", "plan_revivals"]

_FAILED = (JobState.DEAD, JobState.CANCELLED)


def prerequisites(state: QueueState, depends_on: Sequence[str]) -> Known:
    """What the queue knows of these prerequisites (Known). One it does not know
    (never enqueued, or finished and forgotten) is JobNotFoundError, before anything
    is written; a finished keyed job still remembered counts as done."""
    unmet: list[str] = []
    failed: tuple[str, str] | None = None
    died = False
    for job_id in dict.fromkeys(depends_on):
        entry = state.jobs.get(job_id)
        if entry is None:
            if job_id in state.done_keys:
                continue
            raise JobNotFoundError(job_id, "prerequisite job")
        if entry.state in _FAILED:
            failed = failed or (job_id, entry.state)
            died = died or entry.state is JobState.DEAD
        elif entry.state is not JobState.DONE:
            unmet.append(job_id)
    return unmet, failed, died


def plan_waiting_enqueue(state: QueueState, batch: Batch, now: float, job_id: str,
                         payload_text: str, *, priority: int, delay: float,
                         max_attempts: int, keyed: bool, depends_on: Sequence[str],
                         mode: str, keys: JobKeys | None = None) -> JobState:
    """The ENQUEUE of a new job with prerequisites in the queue (plan_dependent_enqueue)."""
    return plan_dependent_enqueue(batch, now, job_id, payload_text, priority=priority,
                                  delay=delay, max_attempts=max_attempts, keyed=keyed,
                                  known=prerequisites(state, depends_on), mode=mode,
                                  keys=keys)


def plan_dependent_enqueue(batch: Batch, now: float, job_id: str, payload_text: str, *,
                           priority: int, delay: float, max_attempts: int, keyed: bool,
                           known: Known, mode: str, keys: JobKeys | None = None) -> JobState:
    """The ENQUEUE of a new job with prerequisites: waiting for the unfinished ones
    (`w`, and its mode), pending when they settle it so already, or cancelled at once
    (ENQUEUE then CANCEL, its error saying why). Returns which. With `keys` (its limit
    keys, "rk"/"ck" on the ENQUEUE), it is limited by them once pending."""
    unmet, failed, died = known
    released, error = verdict(mode, failed, died, not unmet)
    if released or error is not None:
        if keys is not None:
            plan_limited_enqueue(batch, job_id, priority, now + delay, now, max_attempts,
                                 keyed, payload_text, keys)
        else:
            batch.add_enqueue(job_id, priority, now + delay, now, max_attempts, keyed,
                              payload_text)
        if released:
            return JobState.PENDING
        batch.finishes += 1
        batch.add(RecordType.CANCEL, {ID: job_id, TIME: now, KEEP: batch.keep, ERROR: error})
        return JobState.CANCELLED
    fields = {ID: job_id, PRIORITY: priority, AT: now + delay, TIME: now,
              MAX_ATTEMPTS: max_attempts}
    if keyed:
        fields[IS_KEY] = True
    fields[WAIT] = unmet
    mode_fields(fields, mode)
    fields.update(key_fields(keys, declared_cap(batch, job_id, keys)))
    batch.add_payload(RecordType.ENQUEUE, fields, payload_text)
    return JobState.WAITING


def plan_dependents(state: QueueState, batch: Batch, now: float, job_id: str,
                    outcome: JobState, revivable: bool = False) -> None:
    """Job `job_id` finishes with `outcome` (done, dead or cancelled) by the record
    just added to `batch`: RELEASE or CANCEL (recursively) each waiting dependent
    it settles, by verdict(). Records follow the finish they depend on, in the same
    batch. O(1) per dependent: the batch counts how many of each dependent's unmet
    prerequisites it has finished so far (`met`), rather than looking at them all.
    A dependent its death cancels (or the cancel of such a dependent: `revivable`) is
    cancelled revivable (plan_revivals)."""
    waits = state.waits
    if not waits:
        return
    dependents = waits.dependents.get(job_id)
    if not dependents:
        return
    failed = None if outcome is JobState.DONE else (job_id, outcome)
    died = outcome is JobState.DEAD
    met, resolved = batch.met, batch.resolved
    for dependent in list(dependents):
        if dependent in resolved:
            continue
        wait = waits.by_job[dependent]
        count = met[dependent] = met.get(dependent, 0) + 1
        released, error = verdict(wait.mode, failed, died, count == len(wait.unmet))
        if released:
            resolved.add(dependent)
            batch.released.append(dependent)
            batch.add(RecordType.RELEASE, {ID: dependent})
        elif error is not None:
            resolved.add(dependent)
            batch.finishes += 1
            fields = {ID: dependent, TIME: now, KEEP: batch.keep, ERROR: error}
            revives = (died or revivable) and wait.mode == SUCCESS \
                and batch.payload_of is not None
            if revives:
                _add_revivable_cancel(state, batch, dependent, fields)
            else:
                batch.add(RecordType.CANCEL, fields)
            plan_dependents(state, batch, now, dependent, JobState.CANCELLED, revives)


def with_released(state: QueueState, batch: Batch, now: float, count: int,
                  ready: list[Entry]) -> list[Entry]:
    """The first `count` of `ready` (state.ready's pick) and the jobs `batch` released
    that are due at `now`, in state.ready's order (highest priority first, then
    oldest): so that the ack of a chain's step and the lease of the next are one
    write. The caller leaves limited queues out (their leases follow the limits)."""
    jobs = state.jobs
    due = [entry for entry in (jobs[job_id] for job_id in batch.released)
           if entry.available_at <= now]
    if not due:
        return ready
    return sorted([*ready, *due], key=lambda entry: (-entry.priority, entry.seq))[:count]


def _add_revivable_cancel(state: QueueState, batch: Batch, job_id: str,
                          fields: Record) -> None:
    """The CANCEL of a dependent a failure cancels, with its limit keys, their cap and its
    payload: a requeue of the failure revives it (plan_revivals)."""
    assert batch.payload_of is not None
    entry = state.jobs[job_id]
    if state.limited.keys:
        fields.update(key_fields(state.limited.keys_of(entry.seq),
                                 state.limited.cap_of(entry.seq)))
    batch.add_payload(RecordType.CANCEL, fields, batch.payload_of(entry.loc))


def plan_revivals(state: QueueState, batch: Batch, now: float, job_id: str,
                  cleared: dict[str, list[str]]) -> None:
    """Job `job_id`, failed, waits or runs again by the record just added to `batch`
    (a REQUEUE, or a REVIVE): a REVIVE (recursively) for each cancelled dependent
    nothing failed keeps cancelled any longer. `cleared`: the batch's failed
    prerequisites requeued or revived so far, by dependent."""
    dormant = state.dormant
    for dependent in list(dormant.watching.get(job_id, ())):
        sleeper = dormant.by_job[dependent]
        if job_id not in sleeper.failed:
            continue
        done = cleared.setdefault(dependent, [])
        done.append(job_id)
        if dormant.revivable(dependent, done):
            batch.add(RecordType.REVIVE, {ID: dependent, AT: now,
                                          WAIT: [*sleeper.unmet, *done]})
            plan_revivals(state, batch, now, dependent, cleared)
