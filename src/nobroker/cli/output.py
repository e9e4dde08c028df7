"""How the command line prints: jobs as JSON or as rows, aligned columns, and
the one stderr line a failure gets.

Results go to stdout; complaints, one line each, to stderr.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from typing import Any

from ..models import Job, JobState

PAYLOAD_WIDTH = 60  # characters of payload shown per row by `list` and `dlq`


def job_dict(job: Job) -> dict[str, Any]:
    found = {"id": job.id, "state": str(job.state), "priority": job.priority,
             "attempts": job.attempts, "max_attempts": job.max_attempts,
             "available_at": job.available_at, "enqueued_at": job.enqueued_at,
             "lease_expires_at": job.lease_expires_at, "last_error": job.last_error,
             "payload": job.payload}
    if job.state is JobState.WAITING:  # what it waits for (depends_on=)
        found["waiting_for"] = list(job.waiting_for)
    if job.progress is not None:  # what its holder reported (current_job().progress)
        found["progress"] = {"fraction": job.progress[0], "note": job.progress[1]}
    if job.meta:
        found["meta"] = job.meta
    if job.finished_at is not None:  # done, dead or cancelled: say so, and when
        found.update(finished_at=job.finished_at, result=job.result,
                     finished=_finished_line(job))
    if _key_only(job):  # nothing but its key and finish time is known: say so, not 0
        found.update(attempts=None, max_attempts=None, payload=None,
                     note="only the idempotency key of this finished job is remembered; "
                          "ack with result= to keep its result and attempts")
    return found


def _key_only(job: Job) -> bool:
    """A keyed job acked without a result: the queue remembers only its key and when
    it finished (max_attempts is at least 1 for every job the queue still knows)."""
    return job.state is JobState.DONE and job.max_attempts == 0


def _finished_line(job: Job) -> str:
    """'done at 2026-12-01 09:30:00 UTC after 1 of 5 attempts', as far as it is known."""
    assert job.finished_at is not None
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(job.finished_at))
    if _key_only(job):
        return f"{job.state} at {when}"
    return f"{job.state} at {when} after {job.attempts} of {job.max_attempts} attempts"


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, ensure_ascii=False))


def short(value: Any, width: int = PAYLOAD_WIDTH) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text if len(text) <= width else text[:width - 3] + "..."


def due_text(job: Job, now: float) -> str:
    if job.state is JobState.LEASED and job.lease_expires_at is not None:
        if job.lease_expires_at <= now:  # recorded as expired by the next write
            return f"lease expired {_ago(now - job.lease_expires_at)} ago"
        return f"lease ends in {_ago(job.lease_expires_at - now)}"
    if job.state is JobState.PENDING:
        return "ready" if job.available_at <= now else f"in {_ago(job.available_at - now)}"
    if job.state is JobState.WAITING:
        return f"after {len(job.waiting_for)} job(s): {', '.join(job.waiting_for)}"
    return "-"


def _ago(seconds: float) -> str:
    seconds = max(seconds, 0.0)
    if seconds < 60:
        return f"{seconds:.1f}s"
    if seconds < 3600:
        return f"{seconds / 60:.1f}m"
    return f"{seconds / 3600:.1f}h"


def table(rows: Sequence[tuple[str, ...]]) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row[:-1], widths, strict=True)]
        print("  ".join([*cells, row[-1]]).rstrip())


def complain(message: str) -> None:
    print(f"nobroker: {message}", file=sys.stderr)
