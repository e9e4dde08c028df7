"""The in-memory queue's jobs: one dict, a few lazy heaps, and the moves between states.

What it owns: every job a queue holds (pending, leased, dead, and finished ones
kept with their outcome), the ids of finished keyed jobs still remembered, the
fencing tokens, the paused flag and the counters. Each method is one move of the
state machine (the file engine's TRANSITIONS, as moves on objects instead of
records); those that check something (a lease, a dead job) raise before changing.

Rules: pure. No clock, no lock, no randomness: `now`, deadlines and retry
times come in as arguments (memory/backend.py decides them), so a fake
clock drives everything. The heaps (the due jobs': due.py; the kept jobs') are
lazy: an entry is valid only while its job still carries the entry's `stamp`,
which every move bumps.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator

from ..dependencies import SUCCESS, verdict
from ..errors import JobNotFoundError, NotLeasedError
from ..limits import JobKeys, KeyUse, Limits, key_use
from ..models import JobState
from ..result_deadlines import ResultDeadlines
from ..revivals import Dormant
from .due import DueHeaps
from .jobs import MemoryJob, Note
from .limited import LimitedReady, stored_caps

__all__ = ["MemoryJob", "MemoryTable", "FINISHED", "Note"]

FINISHED = (JobState.DONE, JobState.CANCELLED)  # kept with their outcome for a while
_LIVE = (JobState.PENDING, JobState.LEASED, JobState.DEAD, JobState.WAITING)


class MemoryTable:
    """The jobs of one in-memory queue (see the module doc)."""

    def __init__(self) -> None:
        self.jobs: dict[str, MemoryJob] = {}  # live and kept jobs, in enqueue order
        self.done_keys: dict[str, float] = {}  # finished keyed job -> when it finished
        self.key_notes: dict[str, Note] = {}  # a remembered key's job's note, if it had one
        self.paused = False
        self.counts = dict.fromkeys(JobState, 0)
        self.done = self.enqueued = self.retried = self.dead_lettered = 0
        # Ever-growing counts of the moves that wake someone: idle workers (a job
        # may be leasable) and result waiters (a job finished or vanished).
        self.wakes = self.finishes = 0
        self._next_token = 1
        self._next_seq = 1
        self.due = DueHeaps(self.jobs)  # pending jobs by time, ready ones, leases (due.py)
        self._kept: list[tuple[float, int, int, str]] = []  # (keep_until, seq, stamp, id)
        self._key_times: list[tuple[float, str]] = []  # (done_at, id)
        self.dependents: dict[str, dict[str, None]] = {}  # prerequisite -> waiting jobs
        self.dependent_keep = 0.0  # how long a dependent a failure cancels is kept
        self.limited = LimitedReady()  # ready limited jobs by key, holders, windows
        self.dormant = Dormant()  # cancelled dependents a requeue revives (revivals.py)
        self.result_ends = ResultDeadlines()  # kept keyed jobs whose result ends first

    # -- adding -------------------------------------------------------------

    def new_id(self) -> str:
        """The next sequence number's id (16 hex digits), skipping any id in use."""
        while True:
            job_id = f"{self._next_seq:016x}"
            self._next_seq += 1
            if job_id not in self.jobs and job_id not in self.done_keys:
                return job_id

    def add(self, job_id: str, keyed: bool, payload_text: str, priority: int,
            available_at: float, enqueued_at: float, max_attempts: int,
            waits_for: list[str] | None = None, mode: str = SUCCESS,
            keys: JobKeys | None = None, cap: int | None = None) -> MemoryJob:
        """A new pending job (its id is free: the caller checked), or with `waits_for`
        (prerequisites not finished yet) a waiting one; `keys`: its limit keys, `cap`:
        the holders its enqueuer declared for its concurrency key."""
        self.done_keys.pop(job_id, None)
        self.key_notes.pop(job_id, None)
        job = MemoryJob(job_id, self._next_seq, keyed, payload_text, priority, available_at,
                        enqueued_at, max_attempts, keys=keys, cap=cap)
        self._next_seq += 1
        self.jobs[job_id] = job
        self.enqueued += 1
        if waits_for:
            job.mode = mode
            self.counts[JobState.WAITING] += 1
            job.state = JobState.WAITING
            self.wait_again(job, waits_for)
            return job
        self.counts[JobState.PENDING] += 1
        self._enter_pending(job)
        return job

    def wait_again(self, job: MemoryJob, waits_for: list[str]) -> None:
        """Job `job` waits for `waits_for` (new, or a cancelled dependent revived)."""
        if job.state is not JobState.WAITING:
            self._move(job, JobState.WAITING)
        job.waiting_for = dict.fromkeys(waits_for)
        for prerequisite in waits_for:
            self.dependents.setdefault(prerequisite, {})[job.id] = None

    def add_copy(self, job_id: str, keyed: bool, payload_text: str, priority: int,
                 available_at: float, enqueued_at: float, max_attempts: int,
                 attempts: int, last_error: str | None, dead: bool,
                 keys: JobKeys | None = None, cap: int | None = None) -> None:
        """A job copied from another queue (import_jobs): pending, or dead as it was."""
        job = self.add(job_id, keyed, payload_text, priority, available_at, enqueued_at,
                       max_attempts, keys=keys, cap=cap)
        job.attempts, job.last_error = attempts, last_error
        if dead:
            job.finished_at = available_at
            self._move(job, JobState.DEAD)
        if len(job_id) == 16 and all(c in "0123456789abcdef" for c in job_id):
            self._next_seq = max(self._next_seq, int(job_id, 16) + 1)  # ours: never again

    # -- leases -------------------------------------------------------------

    def lease(self, now: float, count: int, until: float,
              limits: Limits | None = None) -> list[MemoryJob]:
        """Up to `count` ready jobs, highest priority first and FIFO within one, each
        leased until `until` under a new fencing token; none while paused or over
        the caller's `limits` (nobroker.limits)."""
        if self.paused:
            return []
        due = self.due
        due.promote(now, self.limited)
        limits = limits or Limits()
        leased = [self.jobs[item[3]] for item in
                  self.limited.choose(due.ready, count, limits, now, due.fresh)]
        for job in leased:
            job.attempts += 1
            job.token, self._next_token = self._next_token, self._next_token + 1
            self._move(job, JobState.LEASED)
            due.hold(job, until)
            if limits:  # its windows count the start
                self.limited.started(job.keys, limits, now)
        return leased

    def held(self, job_id: str, token: int | None) -> MemoryJob:
        """The job, if `token` is still its lease; else NotLeasedError."""
        job = self.jobs.get(job_id)
        state, lease = (None, None) if job is None else (job.state, job.token)
        NotLeasedError.unless_held(job_id, state, lease, token)
        assert job is not None  # unless_held raised otherwise
        return job

    def extend(self, job: MemoryJob, until: float) -> None:
        job.stamp += 1
        self.due.hold(job, until)

    # -- settling -----------------------------------------------------------

    def ack(self, job: MemoryJob, now: float, result_text: str | None, result_ttl: float,
            key_retention: float) -> None:
        """Finished: kept with its result for `result_ttl` (a keyed one `key_retention` if
        longer, its result still gone after result_ttl), or forgotten (a keyed id kept)."""
        self.done += 1
        if result_text is not None:
            job.result_text = result_text
            keyed = job.keyed and key_retention > result_ttl  # its id outlives its result
            job.result_until = now + result_ttl if keyed else None
            self.finish(job, JobState.DONE, now, key_retention if keyed else result_ttl)
            if keyed:  # kept without an outcome from then on (stats().kept)
                self.result_ends.add(job.id, now + result_ttl)
            return
        self._remove(job)
        if job.keyed:
            self.done_keys[job.id] = now
            if job.note is not None:  # kept with its key
                self.key_notes[job.id] = job.note
            heapq.heappush(self._key_times, (now, job.id))
        self._settle_dependents(job.id, JobState.DONE, now)

    def retry(self, job: MemoryJob, at: float, error: str | None,
              dead: bool = False) -> None:
        """A failed attempt (nack, expired lease): dead on its last attempt (or with
        `dead`), with `at` the time it died, else pending again from `at`."""
        job.last_error = error
        if dead or job.attempts >= job.max_attempts:
            job.available_at = job.finished_at = at
            self._move(job, JobState.DEAD)
            self.dead_lettered += 1
            self.finishes += 1
            self._settle_dependents(job.id, JobState.DEAD, now=at)
        else:
            self.retried += 1
            self._make_pending(job, at)

    def snooze(self, job: MemoryJob, at: float, error: str | None) -> None:
        """Pending again from `at`, with the attempts it had before this lease."""
        job.last_error = error
        job.attempts = max(0, job.attempts - 1)
        self._make_pending(job, at)

    def finish(self, job: MemoryJob, state: JobState, now: float, keep: float) -> None:
        """Done or cancelled: kept, without its payload, until now + `keep`; its
        dependents released or cancelled by the rules (docs/TASKS.md)."""
        if job.state is JobState.WAITING:
            self._detach(job)
        if job.id not in self.dormant.by_job:  # a revivable one keeps its payload
            job.payload_text = None
        job.finished_at = now
        job.keep_until = now + keep
        self._move(job, state)
        heapq.heappush(self._kept, (job.keep_until, job.seq, job.stamp, job.id))
        self.finishes += 1
        self._settle_dependents(job.id, state, now)

    def _settle_dependents(self, job_id: str, outcome: JobState, now: float) -> None:
        """Prerequisite `job_id` finished with `outcome`: each dependent released or
        cancelled by verdict() (its own dependents in turn, through finish)."""
        dependents = self.dependents.pop(job_id, None)
        failed = None if outcome is JobState.DONE else (job_id, outcome)
        if self.dormant:
            self.dormant.finished(job_id, ok=failed is None)
        for dependent_id in dependents or ():
            dependent = self.jobs[dependent_id]
            assert dependent.waiting_for is not None
            dependent.waiting_for.pop(job_id, None)
            released, error = verdict(dependent.mode, failed, outcome is JobState.DEAD,
                                      not dependent.waiting_for)
            if released:
                self._detach(dependent)  # FAILURE mode: others may be left to wait for
                self._make_pending(dependent, dependent.available_at)
            elif error is not None:
                dependent.last_error = error
                if dependent.mode == SUCCESS and (outcome is JobState.DEAD  # revivable
                                                  or job_id in self.dormant.by_job):
                    self.dormant.add(dependent_id, dependent.waiting_for, [job_id],
                                     dependent.keys)
                self.finish(dependent, JobState.CANCELLED, now, self.dependent_keep)

    def _detach(self, job: MemoryJob) -> None:
        """Waiting job `job` waits no more (cancelled): off its prerequisites' lists."""
        for prerequisite in job.waiting_for or ():
            others = self.dependents.get(prerequisite)
            if others is not None:
                others.pop(job.id, None)
                if not others:
                    del self.dependents[prerequisite]
        job.waiting_for = None

    # -- operating ----------------------------------------------------------

    def _dead(self, job_id: str | None) -> list[MemoryJob]:
        """The dead job `job_id` (JobNotFoundError if it is not dead), or every one."""
        if job_id is None:
            return list(self.entries(JobState.DEAD))
        job = self.jobs.get(job_id)
        if job is None or job.state is not JobState.DEAD:
            raise JobNotFoundError(job_id, "dead job")
        return [job]

    def requeue_dead(self, job_id: str | None, now: float) -> int:
        """One dead job (or all) pending again, with a fresh attempt budget; how many."""
        dead = self._dead(job_id)
        for job in dead:
            job.attempts = 0
            job.finished_at = None
            self._make_pending(job, now)
        return len(dead)

    def delete_dead(self, job_id: str | None) -> int:
        """One dead job (or all) gone; how many."""
        dead = self._dead(job_id)
        for job in dead:
            self.delete(job)
        return len(dead)

    def delete(self, job: MemoryJob) -> None:
        """A dead job, or a kept one before its time (a cancelled job whose key is
        enqueued again), gone."""
        self._remove(job)
        self.finishes += 1
        self._gone(job.id)

    def _gone(self, job_id: str) -> None:
        """Job `job_id` is gone: not revivable, and never done for what it cancelled."""
        if self.dormant:
            self.dormant.remove(job_id)
            self.dormant.gone(job_id)

    def purge(self, now: float) -> int:
        """Remove every pending job; how many."""
        pending = list(self.entries(JobState.PENDING))
        for job in pending:
            self._remove(job)
        self.finishes += len(pending)
        for job in pending:  # a released dependent stays, pending
            self._settle_dependents(job.id, JobState.CANCELLED, now)
            self._gone(job.id)
        return len(pending)

    def set_paused(self, paused: bool) -> None:
        if paused != self.paused:
            self.paused = paused
            self.wakes += not paused

    def sweep(self, now: float, key_retention: float) -> int:
        """Forget the kept jobs whose retention is over at `now`, and the keys
        remembered for `key_retention` seconds; how many of both."""
        forgotten = 0
        kept = self._kept
        while kept and kept[0][0] <= now:
            _, _, stamp, job_id = heapq.heappop(kept)
            job = self.jobs.get(job_id)
            if job is not None and job.stamp == stamp:
                self._remove(job)
                self._gone(job_id)
                forgotten += 1
        keys = self._key_times
        while keys and keys[0][0] <= now - key_retention:
            done_at, job_id = heapq.heappop(keys)
            if self.done_keys.get(job_id) == done_at:
                del self.done_keys[job_id]
                self.key_notes.pop(job_id, None)
                forgotten += 1
        return forgotten

    # -- questions ----------------------------------------------------------

    def entries(self, state: JobState | None = None) -> Iterator[MemoryJob]:
        """Jobs in enqueue order: of `state`, or the live ones (not the kept)."""
        wanted = _LIVE if state is None else (state,)
        return (job for job in self.jobs.values() if job.state in wanted)

    def limit_use(self, limits: Limits, now: float) -> list[KeyUse]:
        """Each limit key's use now (nobroker.limits.key_use), undeclared concurrency keys
        with the cap their latest unfinished job was enqueued with."""
        return key_use(limits, self.limited.windows, self.limited.in_use, now,
                       stored_caps(self.jobs.values()))

    def next_wakeup(self, limits: Limits | None = None, now: float = 0.0) -> float | None:
        """Earliest moment a job may become leasable: -inf if one is ready now (within
        `limits`, as of `now`), else the first delayed job's time or lease deadline, or None."""
        times = self.due.next_times()
        times += self.limited.next_ready(limits or Limits(), now, self.due.ready,
                                         self.due.fresh)
        return min(times) if times else None

    # -- the moves' common steps --------------------------------------------

    def _move(self, job: MemoryJob, state: JobState) -> None:
        if job.keys is not None and (job.state is JobState.LEASED) != (state is JobState.LEASED):
            self.wakes += self.limited.held(job.keys, 1 if state is JobState.LEASED else -1,
                                            job.cap)
        self.counts[job.state] -= 1
        self.counts[state] += 1
        job.state = state
        job.stamp += 1

    def _make_pending(self, job: MemoryJob, at: float) -> None:
        job.available_at = at
        self._move(job, JobState.PENDING)
        self._enter_pending(job)

    def _enter_pending(self, job: MemoryJob) -> None:
        self.due.enter(job)
        self.wakes += 1

    def _remove(self, job: MemoryJob) -> None:
        if job.keys is not None and job.state is JobState.LEASED:
            self.wakes += self.limited.held(job.keys, -1, job.cap)
        del self.jobs[job.id]
        self.counts[job.state] -= 1
        self.result_ends.discard(job.id)
        job.stamp += 1
