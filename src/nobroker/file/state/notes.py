"""Progress and metadata of jobs (format 1.2): the replay's bookkeeping.

A running job's holder reports how far it got (`pg`: [fraction, note or
null]) and metadata (`m`: a JSON object) in PROGRESS records (type 20),
fenced by its lease token like an EXTEND. Each PROGRESS record carries the
job's whole note, not a change to it: the writer merges (the running job's
context holds the merged metadata), so replay only replaces, and a writer
that coalesces its reports loses nothing by skipping the ones in between.

A note lives as long as its job is kept: while the job table holds the job
(live, dead-lettered, or finished and kept with its outcome) or its key is
remembered (done_keys). The state drops it when neither holds the job any
more (`QueueState.settle_notes`); a snapshot's JOB, FINISHED and KEY records
carry it, and so does a checkpoint. Only jobs that have a note cost an entry.
Pure: no os, time, random or threads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from ..log.records import FRACTION, META, TIME, Record, ReplayError
from .fieldchecks import field

__all__ = ["Note", "Notes", "note_fields", "note_of", "apply_progress"]


@dataclass(frozen=True, slots=True)
class Note:
    """One job's progress ((fraction, note) or None) and metadata (never changed in place)."""

    progress: tuple[float, str | None] | None
    meta: dict[str, Any]

    def fields(self) -> Record:
        """The record fields that carry this note (those at their default left out)."""
        fields: Record = {}
        if self.progress is not None:
            fields[FRACTION] = list(self.progress)
        if self.meta:
            fields[META] = self.meta
        return fields


def note_of(rec: Record, offset: int) -> Note | None:
    """The note a record's `pg` and `m` carry (None: neither), checked; ReplayError
    naming what is wrong."""
    progress = rec.get(FRACTION)
    meta = rec.get(META)
    if progress is None and meta is None:
        return None
    if progress is not None:
        if (type(progress) is not list or len(progress) != 2
                or type(progress[0]) not in (int, float) or not 0 <= progress[0] <= 1
                or (progress[1] is not None and type(progress[1]) is not str)):
            raise ReplayError(offset, f"bad progress {progress!r:.60}")
        progress = (float(progress[0]), progress[1])
    if meta is not None and type(meta) is not dict:
        raise ReplayError(offset, f"field '{META}' must be an object, got {meta!r:.60}")
    return Note(progress, meta or {})


def note_fields(note: Note | None) -> Record:
    """A snapshot record's note fields (none without a note)."""
    return {} if note is None else note.fields()


class Notes:
    """The notes of the jobs that have one, by job id."""

    def __init__(self) -> None:
        self.by_job: dict[str, Note] = {}

    def __bool__(self) -> bool:
        return bool(self.by_job)

    def get(self, job_id: str) -> Note | None:
        return self.by_job.get(job_id)

    def set(self, job_id: str, note: Note | None) -> None:
        """`job_id`'s note is `note` (None: it has none)."""
        if note is None:
            self.by_job.pop(job_id, None)
        else:
            self.by_job[job_id] = note

    def items(self) -> list[list[Any]]:
        """[[id, progress or None, meta], ...]: what a checkpoint saves (JSON)."""
        return [[job_id, None if n.progress is None else list(n.progress), n.meta]
                for job_id, n in self.by_job.items()]

    def restore(self, items: object) -> None:
        """The notes `items()` gave; ValueError if they are not of its shape."""
        if type(items) is not list:
            raise ValueError("bad notes")
        for item in items:
            if type(item) is not list or len(item) != 3 or type(item[0]) is not str:
                raise ValueError("bad note")
            try:
                note = note_of({FRACTION: item[1], META: item[2] or None}, 0)
            except ReplayError as exc:
                raise ValueError(exc.reason) from None
            self.set(item[0], note)

    def fingerprint(self) -> tuple[object, ...]:
        return tuple(sorted((job_id, n.progress, repr(sorted(n.meta.items())))
                            for job_id, n in self.by_job.items()))


class NotedState(Protocol):
    """What apply_progress uses of the replay state (QueueState)."""

    notes: Notes


def apply_progress(state: NotedState, slot: int, job_id: str, rec: Record, offset: int,
                   size: int) -> None:
    """PROGRESS: the leased job's note is the record's (every field checked first)."""
    field(rec, TIME, float, offset)
    note = note_of(rec, offset)
    state.notes.set(job_id, note)
