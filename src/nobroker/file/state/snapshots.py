"""A snapshot's records: the JOB, FINISHED and KEY records compaction writes, and
the SNAPSHOT record that ends them with the queue's counters.

A mixin of QueueState (state.py): `_apply_other` hands these records here.
Fields at their default value are left out of a snapshot record; a snapshot
written before a field existed (the next sequence number, the totals) lacks
it. Pure: no os, time, random or threads.
"""

from __future__ import annotations

from collections.abc import Sequence, Sized
from typing import Final

from ..log.records import Record, ReplayError
from .vocabulary import CANCELLED, CODES, DONE, PENDING, SEQ_MAX, JobState
from .fieldchecks import check_totals, field, max_attempts_field, opt_str
from .jobtable import JobTable

__all__ = ["SnapshotRecords"]

_SNAPSHOT_STATES: Final = {"pending": JobState.PENDING, "leased": JobState.LEASED,
                           "dead": JobState.DEAD}
_FINISHED_STATES: Final = {"done": DONE, "cancelled": CANCELLED}


class SnapshotRecords:
    """Replaying a snapshot into a QueueState (see the module doc)."""

    # The state's table and counters these methods change (QueueState defines them).
    _table: JobTable
    jobs: Sized
    pending: int
    kept: int
    done: int
    paused: bool
    next_token: int
    live_bytes: int
    snapshot_seen: bool

    @property
    def next_seq(self) -> int:
        raise NotImplementedError  # the state's

    def set_totals(self, totals: Sequence[int]) -> None:
        raise NotImplementedError

    def _count(self, code: int, delta: int) -> None:
        raise NotImplementedError

    def _apply_snapshot_job(self, job_id: str, rec: Record, offset: int, size: int) -> None:
        table = self._table
        if table.find(job_id) >= 0:
            raise ReplayError(offset, f"job {job_id!r} twice in a snapshot")
        if "p" not in rec:
            raise ReplayError(offset, f"snapshot of {job_id!r} has no payload")
        # Fields at their default value are left out of a snapshot record.
        code = rec.get("s", "pending")
        state = _SNAPSHOT_STATES.get(code) if type(code) is str else None
        if state is None:
            raise ReplayError(offset, f"bad snapshot state {rec.get('s')!r}")
        attempts = field(rec, "a", int, offset) if "a" in rec else 0
        token = field(rec, "tok", int, offset) if "tok" in rec else 0
        if attempts < 0 or token < 0 or (state is JobState.LEASED) != (token > 0):
            raise ReplayError(offset, "inconsistent attempts/token in snapshot job")
        keyed = rec.get("k", False)
        if type(keyed) is not bool:
            raise ReplayError(offset, "field 'k' must be a boolean")
        priority = field(rec, "pr", int, offset)
        at = field(rec, "at", float, offset)
        enqueued_at = field(rec, "t", float, offset)
        max_attempts = max_attempts_field(rec, offset)
        until = field(rec, "until", float, offset) if "until" in rec else 0.0
        error = opt_str(rec, "err", offset)
        job_code = CODES[state]
        slot = table.add(job_id, keyed, job_code, priority, at, enqueued_at,
                         max_attempts, attempts, offset, size)
        if job_code == PENDING:  # most snapshot jobs are
            self.pending += 1
        else:
            self._count(job_code, 1)
        self.live_bytes += size
        if error is not None:
            table.set_error(table.seqs[slot], error)
        if state is JobState.LEASED:
            table.hold(slot, job_id, token, until)
        self.next_token = max(self.next_token, token + 1)

    def _apply_snapshot_finished(self, job_id: str, rec: Record, offset: int,
                                 size: int) -> None:
        """A FINISHED record: a job kept with its outcome, its result (if any) in "r"."""
        table = self._table
        if table.find(job_id) >= 0:
            raise ReplayError(offset, f"job {job_id!r} twice in a snapshot")
        label = rec.get("s")
        code = _FINISHED_STATES.get(label) if type(label) is str else None
        if code is None:
            raise ReplayError(offset, f"bad finished state {rec.get('s')!r}")
        attempts = field(rec, "a", int, offset) if "a" in rec else 0
        keyed = rec.get("k", False)
        if attempts < 0 or type(keyed) is not bool:
            raise ReplayError(offset, "bad attempts or 'k' in a finished job")
        finished_at, keep = field(rec, "fin", float, offset), field(rec, "keep", float, offset)
        if keep < 0:
            raise ReplayError(offset, f"negative retention {keep!r}")
        error = opt_str(rec, "err", offset)
        slot = table.add(job_id, keyed, code, field(rec, "pr", int, offset), 0.0,
                         field(rec, "t", float, offset), max_attempts_field(rec, offset),
                         attempts, offset, size)
        table.finish(slot, job_id, code, keep, finished_at + keep, offset, size)
        if error is not None:
            table.set_error(table.seqs[slot], error)
        self.kept += 1
        self.live_bytes += size

    def _apply_snapshot_end(self, rec: Record, offset: int) -> None:
        jobs = field(rec, "jobs", int, offset)
        if jobs != len(self.jobs):
            raise ReplayError(offset, f"snapshot announces {jobs} jobs, holds {len(self.jobs)}")
        kept = field(rec, "kept", int, offset) if "kept" in rec else 0
        if kept != self.kept:
            raise ReplayError(offset, f"snapshot announces {kept} finished jobs, "
                                      f"holds {self.kept}")
        paused = rec.get("paused", False)
        if type(paused) is not bool:
            raise ReplayError(offset, "field 'paused' must be a boolean")
        self.paused = paused
        if "seq" in rec:  # absent in snapshots written before ids were sequence numbers
            next_seq = field(rec, "seq", int, offset)
            if not 0 <= next_seq <= SEQ_MAX:
                raise ReplayError(offset, f"bad next sequence number {next_seq}")
            self._table.set_next_seq(max(self.next_seq, next_seq))
        self.next_token = max(self.next_token, field(rec, "tok", int, offset))
        self.done = field(rec, "done", int, offset)
        if "tot" in rec:  # absent in snapshots written before the totals were counted
            self.set_totals(check_totals(rec["tot"], offset))
        self.snapshot_seen = True
