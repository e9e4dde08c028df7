"""Turning API calls into records: leasing, fencing, retries, idempotent keys.

Each function looks at the replay state and the present time and returns the
records an API call must write, or raises before anything is written
(NotLeasedError, JobNotFoundError). Nothing here touches a file, so the same
decisions can back another storage engine.

Every non-deterministic value (a job id, a jittered retry time, a lease
deadline, a fencing token) is chosen here, once, and written into the record,
so that replay never has to choose it again. Randomness comes from the rng
the caller passes (the queue's, from Settings), never from the random module.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from ...backoff import BackoffPolicy, Rng
from ...dependencies import SUCCESS
from ...errors import JobNotFoundError, NotLeasedError
from ...limits import JobKeys, Limits
from ...models import Job
from ..log.records import (
    AT,
    DEAD_LETTER,
    ERROR,
    ID,
    KEEP,
    RESULT_KEEP,
    TIME,
    TOKEN,
    Record,
    RecordType,
)
from .batch import Batch
from .dependencies import (
    plan_dependents,
    plan_revivals,
    plan_waiting_enqueue,
    with_released,
)
from .jobindex import JobIndex
from .limitfields import plan_limited_enqueue
from .state import Entry, JobState, QueueState

__all__ = ["new_job_id", "new_job_ids", "new_nonce", "plan_reclaim", "plan_enqueue",
           "plan_enqueue_many", "plan_lease", "check_lease", "plan_settle", "plan_ack",
           "plan_nack", "plan_snooze", "plan_requeue", "plan_purge", "plan_cancel",
           "plan_delete_dead", "plan_pause", "LEASE_EXPIRED"]

LEASE_EXPIRED: Final = "lease expired"


def new_job_id(taken: JobIndex, rng: Rng) -> str:
    """The next sequence number's id (state.seq_id): the state then needs no dict
    entry for it. Random only in the unlikely case that 2**48 ids were used up."""
    job_id = taken.reserve()
    while job_id is None:
        job_id = f"{rng.getrandbits(64):016x}"
        if job_id in taken:
            job_id = None
    return job_id


def new_job_ids(taken: JobIndex, count: int, rng: Rng) -> list[str]:
    """new_job_id() `count` times, the generated ones reserved in one step."""
    ids = taken.reserve_many(count)
    while len(ids) < count:
        ids.append(new_job_id(taken, rng))
    return ids


def new_nonce(rng: Rng) -> str:
    """A random name for one compaction's snapshot (see compaction.write_generation)."""
    return f"{rng.getrandbits(64):016x}"


def plan_reclaim(state: QueueState, batch: Batch, now: float, backoff: BackoffPolicy,
                 rng: Rng, spare: str | frozenset[str] | None = None,
                 key_retention: float | None = None) -> None:
    """Expire every lease whose deadline has passed (except the caller's own jobs),
    and forget the idempotency keys older than `key_retention`.

    The caller's jobs are spared so that an ack arriving after its deadline
    still succeeds when nobody has taken the job since. Keys are forgotten by
    a record, like everything else, so that every handle's state (and a
    compaction's snapshot) agrees on which keys are still remembered.
    """
    if key_retention is not None:
        for job_id in state.forgettable(now - key_retention):
            batch.add(RecordType.FORGET, {ID: job_id})
    if state.kept:
        for job_id in state.retention_over(now):
            batch.add(RecordType.FORGET, {ID: job_id})
    spared = spare if isinstance(spare, frozenset) else frozenset((spare,) if spare else ())
    for entry in state.expired(now):
        if entry.id in spared:
            continue
        dies = entry.attempts >= entry.max_attempts
        if dies:  # dead-lettered: `at` says when it died
            batch.finishes += 1
            at = now
        else:
            at = now + backoff.delay(entry.attempts, rng)
        batch.add(RecordType.EXPIRE, {ID: entry.id, TOKEN: entry.token, AT: at})
        if dies:
            plan_dependents(state, batch, now, entry.id, JobState.DEAD)


def plan_enqueue(state: QueueState, batch: Batch, now: float, payload_text: str, *,
                 priority: int, delay: float, max_attempts: int, job_id: str | None,
                 key_retention: float, rng: Rng, depends_on: Sequence[str] = (),
                 mode: str = SUCCESS, keys: JobKeys | None = None,
                 meta: Record | None = None) -> Entry | float | None:
    """Add an ENQUEUE record, unless `job_id` is already known.

    Returns the existing Entry, or the done time (float) of a finished keyed
    job still remembered, or None when a record was added. A cancelled job
    does not hold its key: it is forgotten, in the same batch, and the key
    enqueued anew. With `depends_on`, the job waits for those jobs as `mode` says
    (dependencies.plan_waiting_enqueue); with `keys`, it is limited by them. `meta`: its
    metadata (format 1.2).
    """
    if job_id is not None:
        existing = state.jobs.get(job_id)
        if existing is not None and existing.state is JobState.CANCELLED:
            batch.add(RecordType.FORGET, {ID: job_id})
        elif existing is not None:
            return existing
        done_at = state.done_keys.get(job_id)
        if done_at is not None and done_at + key_retention > now:
            return done_at
    new_id = job_id or new_job_id(state.jobs, rng)
    if depends_on:
        plan_waiting_enqueue(state, batch, now, new_id, payload_text, priority=priority,
                             delay=delay, max_attempts=max_attempts, keyed=job_id is not None,
                             depends_on=depends_on, mode=mode, keys=keys)
    elif keys is not None:
        plan_limited_enqueue(batch, new_id, priority, now + delay, now, max_attempts,
                             job_id is not None, payload_text, keys)
    else:
        batch.add_enqueue(new_id, priority, now + delay, now, max_attempts, job_id is not None,
                          payload_text)
    if meta:
        batch.add_meta(new_id, meta)
    return None


def plan_enqueue_many(state: QueueState, batch: Batch, now: float,
                      payload_texts: Sequence[str], *, priority: int, delay: float,
                      max_attempts: int, rng: Rng, keys: Sequence[JobKeys | None] = (),
                      metas: Sequence[Record] | None = None) -> list[str]:
    """ENQUEUE records for new unkeyed jobs (plan_enqueue in a loop, without its
    per-job checks for keys); returns their ids. `keys`: each job's limit keys;
    `metas`: each job's metadata ({}: none)."""
    ids = new_job_ids(state.jobs, len(payload_texts), rng)
    if not any(keys) and not (metas and any(metas)):  # the common case, in bulk
        batch.add_enqueues(ids, priority, now + delay, now, max_attempts, payload_texts)
        return ids
    limited = any(keys)  # then every job: one record each, with its keys
    for i, (job_id, text) in enumerate(zip(ids, payload_texts, strict=True)):
        if limited:
            plan_limited_enqueue(batch, job_id, priority, now + delay, now, max_attempts,
                                 False, text, keys[i] or (None, None))
        else:
            batch.add_enqueue(job_id, priority, now + delay, now, max_attempts, False, text)
        if metas and metas[i]:
            batch.add_meta(job_id, metas[i])  # onto the record just added: O(1)
    return ids


def plan_lease(state: QueueState, batch: Batch, now: float, count: int,
               visibility_timeout: float, limits: Limits | None = None) -> list[Record]:
    """LEASE records for up to `count` ready jobs, each under a new fencing token;
    none while the queue is paused, none over the `limits` the caller declared (the
    LIMIT records of rate limits the log does not hold yet first). Jobs released
    earlier in `batch` (an ack_and_lease finishing their last prerequisite) count as
    ready, unless limits are in play."""
    if state.paused:
        return []
    if limits:
        state.limited.declare_windows(batch, limits)
    ready = state.ready(now, count, limits)
    if batch.released and not limits and not state.limited:
        ready = with_released(state, batch, now, count, ready)
    return batch.add_leases([entry.id for entry in ready], state.next_token,
                            now + visibility_timeout, now)


def plan_ack_many(state: QueueState, batch: Batch, now: float, jobs: Sequence[Job],
                   limits: Limits) -> None:
    """ACK records for `jobs` (distinct), every lease checked before any is planned
    (`limits`: the caller's, see plan_ack)."""
    table = state.table
    held, leases = table.held, table.leases
    tokens: list[int] = []
    for job in jobs:
        # The current lease, read off the table without building an Entry: the
        # common case; check_lease says why when it is not.
        seq = held.get(job.id)
        if seq is None or leases[seq][0] != job.token:
            tokens.append(check_lease(state, job.id, job.token).token)  # raises, mostly
        else:
            tokens.append(leases[seq][0])  # the state's int, equal to the job's
    batch.finishes += len(jobs)
    if not state.limited.keys and not state.waits:  # nothing else to plan: in bulk
        batch.add_acks([job.id for job in jobs], tokens, now)
        return
    for job, token in zip(jobs, tokens, strict=True):
        batch.wakes += state.limited.frees(job.id, table, limits)  # a freed slot wakes
        batch.add_ack(job.id, token, now)
        plan_dependents(state, batch, now, job.id, JobState.DONE)


def check_lease(state: QueueState, job_id: str, token: int | None) -> Entry:
    """The entry, if `token` is still the job's lease; else NotLeasedError."""
    entry = state.jobs.get(job_id)
    if entry is None:
        raise NotLeasedError(job_id, "it is no longer in the queue")
    if entry.state is not JobState.LEASED:
        raise NotLeasedError(job_id, f"it is {entry.state}")
    if token is None or entry.token != token:
        raise NotLeasedError(job_id, f"lease {token} was superseded by lease {entry.token}")
    return entry


def plan_settle(state: QueueState, batch: Batch, now: float, rtype: RecordType,
                job_id: str, token: int | None, **fields: Any) -> Entry:
    """ACK, NACK or EXTEND for a job the caller holds."""
    entry = check_lease(state, job_id, token)
    batch.add(rtype, {ID: job_id, TOKEN: token, **fields})
    return entry


def plan_ack(state: QueueState, batch: Batch, now: float, job_id: str, token: int | None,
             result_text: str | None = None, result_ttl: float = 0.0,
             key_retention: float = 0.0, limits: Limits | None = None) -> Entry:
    """ACK for a job the caller holds; with `result_text`, the job is kept with its
    result for `result_ttl` seconds (a keyed one at least `key_retention`, so that
    its id is remembered as long as a plain ack would remember it, its result still
    gone after `result_ttl`: "rkeep"). A result kept
    for no time is acked as none: a keyed job's remembered id must not carry it.
    `limits`: the caller's, which tell whether a concurrency slot it frees was awaited."""
    entry = check_lease(state, job_id, token)
    batch.finishes += 1
    if state.limited.keys:  # a concurrency slot frees: idle workers may take it
        batch.wakes += state.limited.frees(job_id, state.table, limits)
    if result_text is None or result_ttl <= 0:
        batch.add_ack(job_id, entry.token, now)  # the token: check_lease found it equal
    else:
        fields = {ID: job_id, TOKEN: token, TIME: now, KEEP: result_ttl}
        if entry.keyed and key_retention > result_ttl:  # the id outlives the result
            fields[KEEP], fields[RESULT_KEEP] = key_retention, result_ttl
        batch.add_result(RecordType.ACK, fields, result_text)
    plan_dependents(state, batch, now, job_id, JobState.DONE)  # released in this write
    return entry


def plan_nack(state: QueueState, batch: Batch, now: float, job_id: str, token: int | None,
              error: str | None, delay: float | None, backoff: BackoffPolicy,
              rng: Rng, dead: bool = False) -> Entry:
    """NACK for a job the caller holds: pending again after `delay` (None: the backoff
    policy's), or dead-lettered on its last attempt or with `dead` (the record's
    `dl`), with `at` the time it died."""
    entry = check_lease(state, job_id, token)
    dies = dead or entry.attempts >= entry.max_attempts
    if dies:
        batch.finishes += 1
        at = now
    else:
        at = now + (delay if delay is not None else backoff.delay(entry.attempts, rng))
    fields: dict[str, Any] = {ID: job_id, TOKEN: token, AT: at, ERROR: error}
    if dead:
        fields[DEAD_LETTER] = True
    batch.add(RecordType.NACK, fields)
    if dies:
        plan_dependents(state, batch, now, job_id, JobState.DEAD)
    return entry


def plan_snooze(state: QueueState, batch: Batch, now: float, job_id: str, token: int | None,
                error: str | None, delay: float) -> Entry:
    """SNOOZE for a job the caller holds: pending again after `delay`, this lease not
    counted as an attempt (so never dead-lettered by it)."""
    entry = check_lease(state, job_id, token)
    batch.add(RecordType.SNOOZE, {ID: job_id, TOKEN: token, AT: now + delay,
                                  ERROR: error})
    return entry


def plan_cancel(state: QueueState, batch: Batch, now: float, job_id: str,
                keep: float) -> bool:
    """CANCEL a pending, leased or waiting job, kept as cancelled for `keep` seconds
    (its dependents settled in the same batch); False (nothing written) for a
    finished, dead or unknown job."""
    entry = state.jobs.get(job_id)
    if entry is None or entry.state not in _CANCELLABLE:
        return False
    batch.finishes += 1
    if state.limited.keys:  # a leased one frees its concurrency slot
        batch.wakes += state.limited.frees(job_id, state.table)
    batch.add(RecordType.CANCEL, {ID: job_id, TIME: now, KEEP: keep})
    plan_dependents(state, batch, now, job_id, JobState.CANCELLED)
    return True


_CANCELLABLE: Final = (JobState.PENDING, JobState.LEASED, JobState.WAITING)


def plan_delete_dead(state: QueueState, batch: Batch, now: float,
                     job_id: str | None) -> int:
    """DELETE records: one dead job, or every dead job."""
    if job_id is not None:
        entry = state.jobs.get(job_id)
        if entry is None or entry.state is not JobState.DEAD:
            raise JobNotFoundError(job_id, "dead job")
        targets = [entry.id]
    else:
        targets = [entry.id for entry in state.entries(JobState.DEAD)]
    for target in targets:
        batch.add(RecordType.DELETE, {ID: target})
    batch.finishes += len(targets)
    return len(targets)


def plan_pause(state: QueueState, batch: Batch, now: float, paused: bool) -> bool:
    """PAUSE or RESUME, unless the queue is so already; returns whether it changed.
    A resume pokes idle workers (up to one per pending job)."""
    if state.paused == paused:
        return False
    batch.add(RecordType.PAUSE if paused else RecordType.RESUME, {TIME: now})
    if not paused:
        batch.wakes += max(1, state.pending)
    return True


def plan_requeue(state: QueueState, batch: Batch, now: float, job_id: str | None) -> int:
    """REQUEUE records: one dead job, or every dead job."""
    if job_id is not None:
        entry = state.jobs.get(job_id)
        if entry is None or entry.state is not JobState.DEAD:
            raise JobNotFoundError(job_id, "dead job")
        targets = [entry]
    else:
        targets = list(state.entries(JobState.DEAD))
    cleared: dict[str, list[str]] = {}
    for entry in targets:
        batch.add(RecordType.REQUEUE, {ID: entry.id, AT: now})
        if state.dormant:  # the dependents its death cancelled wait again
            plan_revivals(state, batch, now, entry.id, cleared)
    return len(targets)


def plan_purge(state: QueueState, batch: Batch, now: float) -> int:
    # Leases reclaimed earlier in this batch are pending by the time PURGE applies.
    reclaimed = sum(1 for rtype, record in batch.records()
                    if rtype == RecordType.EXPIRE
                    and state.jobs[record[ID]].attempts < state.jobs[record[ID]].max_attempts)
    count = state.pending + reclaimed
    if count:
        batch.add(RecordType.PURGE, {TIME: now})
        batch.finishes += 1  # a waiter for a purged job learns it is gone
        # Purged prerequisites settle their dependents as cancelled ones do (after
        # the PURGE: a dependent it releases stays, pending).
        for job_id in [job_id for job_id in state.waits.dependents
                       if (entry := state.jobs.get(job_id)) is not None
                       and entry.state is JobState.PENDING]:
            plan_dependents(state, batch, now, job_id, JobState.CANCELLED)
    return count
