"""The file engine's views of a job's parts that are not in the state's columns.

A job's payload stays on disk in the record that holds it: read_payload reads it
back (under the lock, or from the generation pinned when the entry was taken); a
kept finished job's result and finishing time are log/readback.py's. A job's
progress and metadata (format 1.2) are in the replay state's notes, and go into a
Job as a copy, so that a caller changing a Job's `meta` changes nothing here.
"""

from __future__ import annotations

from typing import Any

from ..errors import CorruptLogError
from .log.logfile import LogFile
from .log.records import loads
from .state.notes import Notes
from .state.state import Entry

__all__ = ["read_payload", "note_view"]

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
