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

from collections.abc import Iterator, Sequence
from itertools import accumulate
from typing import Any, Final

from ...backoff import BackoffPolicy, Rng
from ...errors import JobNotFoundError, NotLeasedError
from ..log import framing
from ..log.records import (
    AT,
    BATCH,
    DURABLE,
    ERROR,
    ID,
    IS_KEY,
    KEEP,
    MAX_ATTEMPTS,
    PAYLOAD,
    PAYLOAD_KEY_TEXT,
    PRIORITY,
    RESULT,
    RESULT_KEY_TEXT,
    TIME,
    TOKEN,
    UNTIL,
    Record,
    RecordType,
    ack_text,
    dumps,
    enqueue_text,
    lease_text,
)
from .state import Applied, Entry, JobIndex, JobState, QueueState

__all__ = ["Batch", "new_job_id", "new_job_ids", "new_nonce", "plan_reclaim", "plan_enqueue",
           "plan_enqueue_many", "plan_lease", "check_lease", "plan_settle", "plan_ack",
           "plan_nack", "plan_snooze", "plan_requeue", "plan_purge", "plan_cancel",
           "plan_delete_dead", "plan_pause", "LEASE_EXPIRED"]

LEASE_EXPIRED: Final = "lease expired"
_WAKING: Final = frozenset({RecordType.ENQUEUE, RecordType.NACK, RecordType.EXPIRE,
                            RecordType.REQUEUE, RecordType.SNOOZE})


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


class Batch:
    """The records of one API call, framed so that they commit or vanish together."""

    def __init__(self, number: int, durable: int = 0) -> None:
        self.number = number
        # The first record carries "d": how far the log was known to be on disk when
        # the batch was planned (an fsync that covered it had returned). Damage before
        # that offset was durable, so reading refuses it rather than cutting it as a
        # torn tail, however many zeros lie between (docs/FORMAT.md, "Recovery").
        self.durable = durable
        # (type, JSON text, what replay will see: the record without its payload text)
        self._items: list[tuple[int, str, Record]] = []
        self.wakes = 0  # records that may make a job leasable: idle workers are poked
        self.finishes = 0  # records that finish a job: result waiters are poked

    def __len__(self) -> int:
        return len(self._items)

    def records(self) -> Iterator[tuple[int, Record]]:
        """(type, record) of every record added so far."""
        return ((rtype, record) for rtype, _, record in self._items)

    def last_id(self) -> str:
        """The job id of the record added last."""
        return str(self._items[-1][2][ID])

    def add(self, rtype: RecordType, fields: Record) -> Record:
        if rtype in _WAKING:
            self.wakes += 1
        record = {**self._head(), **fields}
        self._items.append((rtype, dumps(record), record))
        return record

    def _head(self) -> Record:
        """The fields every record starts with: the batch number, and "d" on the first."""
        if self.durable and not self._items:
            return {BATCH: self.number, DURABLE: self.durable}
        return {BATCH: self.number}

    def add_payload(self, rtype: RecordType, fields: Record, payload_text: str) -> Record:
        """A record carrying a job payload that is already JSON text (not encoded twice)."""
        if rtype in _WAKING:
            self.wakes += 1
        record = {**self._head(), **fields}
        head = dumps(record)
        record[PAYLOAD] = None  # replay checks the payload is there; memory never keeps it
        self._items.append((rtype, f'{head[:-1]}{PAYLOAD_KEY_TEXT}{payload_text}}}', record))
        return record

    def add_result(self, rtype: RecordType, fields: Record, result_text: str) -> Record:
        """A record carrying a job's result as JSON text, under "r", its last key (read
        back by key, like payloads); replay sees "r" as None and memory never keeps it."""
        record = {**self._head(), **fields}
        head = dumps(record)
        record[RESULT] = None
        self._items.append((rtype, f'{head[:-1]}{RESULT_KEY_TEXT}{result_text}}}', record))
        return record

    def add_enqueue(self, job_id: str, priority: int, at: float, t: float,
                    max_attempts: int, keyed: bool, payload_text: str) -> None:
        """An ENQUEUE record (the common case of add_payload, without a dumps call)."""
        self.wakes += 1
        durable = 0 if self._items else self.durable
        record = self._head()
        record.update({ID: job_id, PRIORITY: priority, AT: at, TIME: t, MAX_ATTEMPTS: max_attempts})
        if keyed:
            record[IS_KEY] = True
        record[PAYLOAD] = None
        self._items.append((RecordType.ENQUEUE, enqueue_text(
            self.number, job_id, priority, at, t, max_attempts, keyed, payload_text,
            durable), record))

    def add_ack(self, job_id: str, token: int, t: float) -> None:
        """An ACK record without a result (add()'s text, without a dumps call)."""
        number, durable = self.number, 0 if self._items else self.durable
        record: Record = {BATCH: number, DURABLE: durable, ID: job_id, TOKEN: token, TIME: t} \
            if durable else {BATCH: number, ID: job_id, TOKEN: token, TIME: t}
        self._items.append((RecordType.ACK, ack_text(number, job_id, token, t, durable),
                            record))

    def add_lease(self, job_id: str, token: int, until: float, t: float) -> Record:
        """A LEASE record (add()'s text, without a dumps call); returns the record."""
        number, durable = self.number, 0 if self._items else self.durable
        record: Record = {BATCH: number, DURABLE: durable, ID: job_id, TOKEN: token,
                          UNTIL: until, TIME: t} if durable else \
            {BATCH: number, ID: job_id, TOKEN: token, UNTIL: until, TIME: t}
        self._items.append((RecordType.LEASE,
                            lease_text(number, job_id, token, until, t, durable), record))
        return record

    def add_enqueues(self, ids: Sequence[str], priority: int, at: float, t: float,
                     max_attempts: int, payload_texts: Sequence[str]) -> None:
        """ENQUEUE records of new unkeyed jobs alike but for id and payload (what
        add_enqueue writes, each): the fields they share are formatted once."""
        items = self._items
        number = self.number
        shared = enqueue_text(number, "", priority, at, t, max_attempts, False, "")
        cut = shared.index(f',"{PRIORITY}":')
        head, tail = shared[:cut - 2], shared[cut:-1]  # the text around `"id":""` and "p"
        base: Record = {BATCH: number, ID: "", PRIORITY: priority, AT: at, TIME: t,
                        MAX_ATTEMPTS: max_attempts, PAYLOAD: None}
        rtype = RecordType.ENQUEUE
        start = 0
        if self.durable and not items:  # the first record of the batch carries "d"
            self.add_enqueue(ids[0], priority, at, t, max_attempts, False, payload_texts[0])
            start = 1
        self.wakes += len(ids) - start
        append, copy = items.append, base.copy
        for job_id, text in zip(ids[start:], payload_texts[start:], strict=True):
            # new_job_id's ids are hex digits: nothing in them needs JSON escaping.
            record = copy()
            record[ID] = job_id
            append((rtype, f'{head}"{job_id}"{tail}{text}}}', record))

    def encode(self, start: int) -> tuple[bytes, list[Applied]]:
        """The framed bytes to write at offset `start`, and what replay will apply."""
        items = self._items
        if len(items) == 1:  # most calls: skip the loop's bookkeeping
            rtype, text, record = items[0]
            frame = framing.encode_record(rtype, text.encode("utf-8"))
            return frame, [Applied(rtype, record, start, len(frame))]
        data, sizes = framing.encode_batch([(rtype, text.encode("utf-8"))
                                            for rtype, text, _ in items])
        rtypes, _, records = zip(*items, strict=True)
        # map() over the columns: about a third of the time of a loop that unpacks them.
        return data, list(map(Applied, rtypes, records, accumulate(sizes, initial=start),
                              sizes))


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
        if entry.attempts >= entry.max_attempts:  # dead-lettered: `at` says when it died
            batch.finishes += 1
            at = now
        else:
            at = now + backoff.delay(entry.attempts, rng)
        batch.add(RecordType.EXPIRE, {ID: entry.id, TOKEN: entry.token, AT: at})


def plan_enqueue(state: QueueState, batch: Batch, now: float, payload_text: str, *,
                 priority: int, delay: float, max_attempts: int, job_id: str | None,
                 key_retention: float, rng: Rng) -> Entry | float | None:
    """Add an ENQUEUE record, unless `job_id` is already known.

    Returns the existing Entry, or the done time (float) of a finished keyed
    job still remembered, or None when a record was added. A cancelled job
    does not hold its key: it is forgotten, in the same batch, and the key
    enqueued anew.
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
    batch.add_enqueue(job_id or new_job_id(state.jobs, rng), priority, now + delay, now,
                      max_attempts, job_id is not None, payload_text)
    return None


def plan_enqueue_many(state: QueueState, batch: Batch, now: float,
                      payload_texts: Sequence[str], *, priority: int, delay: float,
                      max_attempts: int, rng: Rng) -> list[str]:
    """ENQUEUE records for new unkeyed jobs (plan_enqueue in a loop, without its
    per-job checks for keys); returns their ids."""
    ids = new_job_ids(state.jobs, len(payload_texts), rng)
    batch.add_enqueues(ids, priority, now + delay, now, max_attempts, payload_texts)
    return ids


def plan_lease(state: QueueState, batch: Batch, now: float, count: int,
               visibility_timeout: float) -> list[Record]:
    """LEASE records for up to `count` ready jobs, each under a new fencing token;
    none while the queue is paused."""
    if state.paused:
        return []
    token = state.next_token
    leased: list[Record] = []
    until = now + visibility_timeout
    for entry in state.ready(now, count):
        leased.append(batch.add_lease(entry.id, token, until, now))
        token += 1
    return leased


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
             key_retention: float = 0.0) -> Entry:
    """ACK for a job the caller holds; with `result_text`, the job is kept with its
    result for `result_ttl` seconds (a keyed one at least `key_retention`, so that
    its id is remembered as long as a plain ack would remember it)."""
    entry = check_lease(state, job_id, token)
    batch.finishes += 1
    if result_text is None:
        batch.add_ack(job_id, entry.token, now)  # the token: check_lease found it equal
        return entry
    keep = max(result_ttl, key_retention) if entry.keyed else result_ttl
    batch.add_result(RecordType.ACK, {ID: job_id, TOKEN: token, TIME: now, KEEP: keep},
                     result_text)
    return entry


def plan_nack(state: QueueState, batch: Batch, now: float, job_id: str, token: int | None,
              error: str | None, delay: float | None, backoff: BackoffPolicy,
              rng: Rng) -> Entry:
    """NACK for a job the caller holds: pending again after `delay` (None: the backoff
    policy's), or dead-lettered on its last attempt, with `at` the time it died."""
    entry = check_lease(state, job_id, token)
    if entry.attempts >= entry.max_attempts:
        batch.finishes += 1
        at = now
    else:
        at = now + (delay if delay is not None else backoff.delay(entry.attempts, rng))
    batch.add(RecordType.NACK, {ID: job_id, TOKEN: token, AT: at, ERROR: error})
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
    """CANCEL a pending or leased job, kept as cancelled for `keep` seconds; False
    (nothing written) for a finished, dead or unknown job."""
    entry = state.jobs.get(job_id)
    if entry is None or entry.state not in (JobState.PENDING, JobState.LEASED):
        return False
    batch.finishes += 1
    batch.add(RecordType.CANCEL, {ID: job_id, TIME: now, KEEP: keep})
    return True


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
    for entry in targets:
        batch.add(RecordType.REQUEUE, {ID: entry.id, AT: now})
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
    return count
