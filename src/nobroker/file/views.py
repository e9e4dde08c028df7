"""The file engine's views: a job as the `Job` the API hands out (`entry_view`), and its
parts that are not in the state's columns.

A job's payload stays on disk in the record that holds it: read_payload reads it
back (under the lock, or from the generation pinned when the entry was taken); a
kept finished job's result and finishing time are log/readback.py's. A job's
progress and metadata (format 1.2) are in the replay state's notes, and go into a
Job as a copy, so that a caller changing a Job's `meta` changes nothing here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any, Final

from ..backend import DormantJob
from ..errors import CorruptLogError
from ..models import Job, JobState
from .log.logfile import LogFile
from .log.readback import finished_outcome, payload_texts
from .log.records import loads
from .state.notes import Notes
from .state.state import Entry, QueueState

__all__ = ["entry_view", "read_payload", "read_payloads", "note_view", "dormant_views", "MISSING"]

MISSING: Any = object()  # entry_view's payload when the caller has none: read it

def entry_view(state: QueueState, live_log: Callable[[], LogFile], entry: Entry,
               payload: Any = MISSING, source: LogFile | None = None,
               clock: Callable[[], float] | None = None) -> Job:
    """The Job of `entry`: its payload read from `source` (else the live log) unless
    given, a kept finished job's outcome from the live log as of `clock()` (a keyed
    job's result may be gone before it is; None: state.latest_time), its note from
    `state`."""
    code = entry.state
    if code is JobState.DONE or code is JobState.CANCELLED:
        # Kept with its outcome: no payload; the result and the finishing time are
        # read from the record that holds them.
        log = live_log()
        now = state.latest_time if clock is None else clock()
        finished_at, result = finished_outcome(log.record_at(entry.loc), log.path,
                                               entry.loc, entry.id, now)
        return Job(id=entry.id, payload=None, priority=entry.priority,
                   attempts=entry.attempts, max_attempts=entry.max_attempts, state=code,
                   available_at=finished_at, enqueued_at=entry.enqueued_at,
                   last_error=entry.last_error, result=result, finished_at=finished_at,
                   **note_view(state.notes, entry.id))
    leased = code is JobState.LEASED
    waits = state.waits
    return Job(
        id=entry.id,
        payload=(read_payload(live_log() if source is None else source, entry)
                 if payload is MISSING else payload),
        priority=entry.priority, attempts=entry.attempts, max_attempts=entry.max_attempts,
        state=code, available_at=entry.available_at, enqueued_at=entry.enqueued_at,
        last_error=entry.last_error, token=entry.token if leased else None,
        lease_expires_at=entry.lease_until if leased else None,
        finished_at=entry.available_at if code is JobState.DEAD else None,
        waiting_for=waits.waiting_for(entry.id) if waits else (),
        **note_view(state.notes, entry.id))


def note_view(notes: Notes, job_id: str) -> dict[str, Any]:
    """The Job fields `progress` and `meta` of `job_id` (none if it has no note)."""
    note = notes.get(job_id) if notes.by_job else None
    return {} if note is None else {"progress": note.progress, "meta": dict(note.meta)}


def read_payload(source: LogFile, entry: Entry) -> Any:
    """The payload of a job in the state, decoded, from its generation: the live log
    under the lock, or the one pinned when `entry` was taken (write_then_read)."""
    try:
        return loads(source.read_payload(entry.loc))
    except ValueError:  # UnicodeDecodeError too: the CRC matched, so a writer bug
        raise CorruptLogError(source.path, entry.loc, "payload is not JSON") from None


# read_payloads reads ahead this far at most; jobs further apart are read one by one.
_SPAN_READ: Final = 64 << 10


def read_payloads(source: LogFile, entries: list[Entry]) -> list[Any]:
    """read_payload of each of `entries` (from one generation), reading ahead: jobs
    leased together were most often enqueued together, so one read holds them all."""
    # In log order (a lease takes higher priorities first), so that one read serves.
    locs = sorted({entry.loc for entry in entries})
    span = locs[-1] - locs[0] + 4096  # the last one's record in a 4 KiB read, mostly
    texts = (payload_texts(source.fs, source.fd, source.path, locs, chunk=span)
             if span <= _SPAN_READ else (source.read_payload(loc) for loc in locs))
    by_loc: dict[int, Any] = {}
    for loc, text in zip(locs, texts, strict=True):
        try:
            by_loc[loc] = loads(text)
        except ValueError:  # as read_payload's
            raise CorruptLogError(source.path, loc, "payload is not JSON") from None
    return [by_loc[entry.loc] for entry in entries]


def dormant_views(state: QueueState, live_log: Callable[[], LogFile]) -> list[DormantJob]:
    """The revivable cancelled dependents (QueueState.dormant), in enqueue order, each
    Job with the payload its CANCEL (or FINISHED) record kept."""
    by_job, log = state.dormant.by_job, live_log()
    entries = sorted((state.jobs[job_id] for job_id in by_job), key=lambda e: e.seq)
    return [DormantJob(replace(entry_view(state, live_log, e), payload=read_payload(log, e)),
                       e.keyed, by_job[e.id].keys, tuple(by_job[e.id].unmet),
                       tuple(by_job[e.id].failed), by_job[e.id].cap) for e in entries]
