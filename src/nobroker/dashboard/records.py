"""A job's raw records from the log, for the job page, where the backend has them.

The reading itself is `nobroker inspect`'s (inspection.read_records): this
module only asks whether the queue's backend offers inspection and picks one
job's records out of the current generation. It never takes the queue's lock
and never repairs anything, exactly like `inspect`.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from ..file.inspection import current_log_path, read_records
from ..queue import Queue

__all__ = ["available", "of_job", "RECORDS_MAX"]

RECORDS_MAX = 200  # records of one job returned at most (a job nacked forever has many)


def available(queue: Queue) -> bool:
    """True when the queue's backend keeps a log whose records can be listed."""
    caps = getattr(queue, "capabilities", None)
    if caps is not None:
        return bool(getattr(caps, "inspection", False))
    directory = getattr(queue, "directory", None)  # the file engine before capabilities
    return isinstance(directory, str) and os.path.isdir(directory)


def of_job(queue: Queue, job_id: str) -> tuple[str, list[dict[str, Any]], int]:
    """(log path, the job's records as dicts, records scanned) in the current generation."""
    path = current_log_path(queue.directory, queue.name)
    found: list[dict[str, Any]] = []
    scanned = 0
    for record in read_records(path):
        scanned += 1
        payload = record.payload
        if isinstance(payload, dict) and payload.get("id") == job_id and len(found) < RECORDS_MAX:
            found.append(dataclasses.asdict(record))
    return path, found, scanned
