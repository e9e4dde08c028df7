"""The file engine's views: a job as the `Job` the API hands out (`entry_view`; as
just enqueued, `new_view`; as `get` finds it, `found_view`; as just leased,
`leased_views`), and its parts that are not in the state's columns.

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
from ..errors import CorruptLogError, JobNotFoundError
from ..models import Job, JobState
from .log.logfile import LogFile
from .log.readback import finished_outcome, payload_texts
from .log.records import loads
from .state.notes import Notes
from .state.state import Entry, QueueState

__all__ = ["entry_view", "new_view", "done_view", "found_view", "leased_views", "read_payload",
           "read_payloads", "note_view", "dormant_views", "MISSING"]

MISSING: Any = object()  # entry_view's payload when the caller has none: read it
_KEPT = (JobState.DONE, JobState.CANCELLED)  # kept with their outcome until retention ends

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


def new_view(job_id: str, payload: Any, priority: int, max_attempts: int,
             available_at: float, now: float) -> Job:
    """The Job of a job just enqueued, as its ENQUEUE makes it."""
    return Job(job_id, payload, priority, 0, max_attempts, JobState.PENDING,
               available_at, now, None)


def done_view(notes: Notes, job_id: str, done_at: float) -> Job:
    """A finished keyed job acked without a result: only its id, time and note are known."""
    return Job(id=job_id, payload=None, priority=0, attempts=0, max_attempts=0,
               state=JobState.DONE, available_at=done_at, enqueued_at=done_at,
               last_error=None, finished_at=done_at, **note_view(notes, job_id))


def found_view(state: QueueState, job_id: str, now: float, key_retention: float,
               view: Callable[[Entry], Job]) -> Job:
    """The Job `get` returns for `job_id` at `now` (`view` makes a job's from its entry),
    or a done key's; JobNotFoundError if the state holds neither."""
    entry = state.jobs.get(job_id)
    if entry is not None:
        # Past its retention (the next write's FORGET drops it): not returned.
        if entry.state in _KEPT and entry.available_at <= now:
            raise JobNotFoundError(job_id)
        return view(entry)
    done_at = state.done_keys.get(job_id)
    if done_at is not None and done_at + key_retention > now:
        return done_view(state.notes, job_id, done_at)
    raise JobNotFoundError(job_id)


def leased_views(view: Callable[..., Job], entries: list[Entry]
                 ) -> Callable[[LogFile], list[Job]]:
    """Under the lock: what builds the views of jobs just leased once it is released
    (QueueHandle.write_then_read): decoding payloads is most of a view's cost, and
    the lock bounds the queue's throughput. Read from the generation it keeps open.
    `view(entry, payload, source)` is the backend's entry_view."""
    if len(entries) < 2:
        return lambda source: [view(entry, source=source) for entry in entries]
    # Several: their payloads in one pass (read ahead: most often one pread for all).
    return lambda source: [view(entry, payload) for entry, payload
                           in zip(entries, read_payloads(source, entries), strict=True)]


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
