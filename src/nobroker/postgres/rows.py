"""Jobs as rows: the state codes of the jobs table, and the conversions both ways.

A row is read in the order of sql/parts/job_columns.sql, the order
`job_from_row` unpacks. `import_params` turns jobs copied from another
backend into the arrays sql/queries/import_jobs.sql unnests. Pure: no
connection, no SQL text.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from typing import Any, Final

from ..errors import NotLeasedError
from ..models import Job, JobState, Progress, QueueStats

__all__ = ["STATE_CODES", "WAITING", "BLOCKED", "STATES", "CODES_OF", "job_from_row",
           "job_enqueued", "meta_texts", "lease_rows", "not_leased", "codes_listed",
           "stats_from_row", "import_params", "note_params", "enqueue_params"]

STATE_CODES: Final = {JobState.PENDING: 0, JobState.LEASED: 1, JobState.DEAD: 2,
                      JobState.DONE: 3, JobState.CANCELLED: 4}  # the jobs.state column
WAITING: Final = -1  # pending, not due when written (schema.py)
BLOCKED: Final = -2  # JobState.WAITING: waiting for prerequisites (migrations/0004)
STATES: Final = ({WAITING: JobState.PENDING, BLOCKED: JobState.WAITING}
                 | {code: state for state, code in STATE_CODES.items()})
CODES_OF: Final = {state: tuple(c for c, s in STATES.items() if s is state) for state in JobState}


def job_from_row(row: Sequence[Any]) -> Job:
    """The Job a row read in job_columns order describes (followed, where the query
    reads it, by parts/waiting_for.sql's column, and get.sql's: whether its payload is
    shown, and whether its result is gone: a keyed job's past result_until)."""
    (job_id, _seq, code, priority, available_at, enqueued_at, max_attempts, attempts,
     token, lease_until, last_error, payload, result, finished_at, progress, meta) = row[:16]
    waiting_for = row[16] if len(row) > 16 else None
    shown = row[17] if len(row) > 17 else True
    if len(row) > 18 and row[18]:
        result = None
    leased = code == 1
    noted: dict[str, Any] = {}  # its progress and metadata (migration 0005), if any
    if progress is not None:
        fraction, note = json.loads(progress)
        noted["progress"] = (float(fraction), note)
    if meta is not None:
        noted["meta"] = json.loads(meta)
    return Job(id=job_id, payload=json.loads(payload) if shown else None, priority=priority,
               attempts=attempts, max_attempts=max_attempts, state=STATES[code],
               available_at=available_at, enqueued_at=enqueued_at, last_error=last_error,
               token=token if leased else None,
               lease_expires_at=lease_until if leased else None,
               result=None if result is None else json.loads(result),
               finished_at=finished_at, waiting_for=tuple(waiting_for or ()), **noted)


def enqueue_params(job_id: str | None, priority: int, delay: float, max_attempts: int,
                   payload_text: str, meta: dict[str, Any] | None) -> dict[str, Any]:
    """The parameters of enqueue.sql: the job, and its metadata from the start."""
    return {"id": job_id, "pr": priority, "delay": delay, "ma": max_attempts,
            "p": payload_text, "m": note_params(None, meta or {})["m"]}


def note_params(progress: Progress | None, meta: dict[str, Any]) -> dict[str, str | None]:
    """The parameters of write_notes.sql: JSON text, NULL for what the job has not."""
    return {"pg": None if progress is None else json.dumps(list(progress)),
            "m": json.dumps(meta, ensure_ascii=False, allow_nan=False) if meta else None}


def lease_rows(rows: Sequence[tuple[Any, ...]]) -> tuple[list[tuple[Any, ...]], list[str]]:
    """lease.sql's or limited_lease.sql's rows split: the leased jobs' rows (job_columns),
    and the ids of the jobs its reclaim dead-lettered (every row's last column)."""
    dead = list(rows[0][-1] or ()) if rows else []
    return [row[:-1] for row in rows if row[0] is not None], dead


def meta_texts(metas: Sequence[dict[str, Any]] | None, count: int) -> list[str | None]:
    """enqueue_many.sql's `ms`: each job's metadata as JSON text, None for none."""
    if metas is None:
        return [None] * count
    return [note_params(None, meta)["m"] for meta in metas]


def job_enqueued(row: Sequence[Any], payload: Any, max_attempts: int,
                 meta: dict[str, Any] | None = None) -> Job:
    """The Job of one row enqueue_many.sql returned (id, seq, state, priority,
    available_at, enqueued_at), with the payload (and metadata) it was given."""
    return Job(id=row[0], payload=payload, priority=row[3], attempts=0,
               max_attempts=max_attempts, state=JobState.PENDING,
               available_at=row[4], enqueued_at=row[5], last_error=None,
               meta=copy.deepcopy(meta) if meta else {})


def not_leased(job: Job, row: Sequence[Any] | None) -> NotLeasedError:
    """Why a change under `job`'s lease found no row, from lease_of.sql's row."""
    if row is None:
        return NotLeasedError(job.id, "it is no longer in the queue")
    code, token = row
    if code != 1:
        return NotLeasedError(job.id, f"it is {STATES[code]}")
    return NotLeasedError(job.id, f"lease {job.token} was superseded by lease {token}")


def codes_listed(state: JobState | None) -> list[int]:
    """The state codes list_jobs.sql reads for `state` (None: the live ones and dead)."""
    states = ((JobState.PENDING, JobState.LEASED, JobState.DEAD, JobState.WAITING)
              if state is None else (state,))
    return [code for each in states for code in CODES_OF[each]]


def stats_from_row(row: Sequence[Any]) -> QueueStats:
    """The QueueStats of stats.sql's row: pending, leased, dead, done, paused, kept,
    waiting (counted in total, not in pending)."""
    pending, leased, dead, done = (int(v) for v in row[:4])
    waiting = int(row[6])
    return QueueStats(pending=pending, leased=leased, dead=dead, done=done,
                      total=pending + leased + dead + waiting, waiting=waiting,
                      generation=0, log_bytes=0, paused=bool(row[4]), kept=int(row[5]))


def import_params(jobs: Sequence[Job], keyed: Sequence[bool]) -> dict[str, list[Any]]:
    """The columns of jobs copied in (import_jobs.sql), one array each: ids,
    attempts and errors kept; a leased job arrives pending."""
    rows = [(j.id, STATE_CODES[JobState.DEAD if j.state is JobState.DEAD
                               else JobState.PENDING], j.priority, j.available_at,
             j.enqueued_at, j.max_attempts, j.attempts, k, j.last_error,
             json.dumps(j.payload, ensure_ascii=False, allow_nan=False))
            for j, k in zip(jobs, keyed, strict=True)]
    names = ("ids", "states", "prs", "ats", "ts", "mas", "atts", "ks", "errs", "ps")
    return {name: [row[i] for row in rows] for i, name in enumerate(names)}
