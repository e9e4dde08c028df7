"""The file engine's views of a job's parts that are not in the state's columns.

A job's payload, and a kept finished job's result and finishing time, stay on
disk in the record that holds them: these read them back (under the lock, or
from the generation pinned when the entry was taken). A job's progress and
metadata (format 1.2) are in the replay state's notes, and go into a Job as a
copy, so that a caller changing a Job's `meta` changes nothing here.
"""

from __future__ import annotations

from typing import Any, Final

from ..errors import CorruptLogError
from .log.logfile import LogFile
from .log.records import FINISHED_AT, ID, RESULT, TIME, RecordType, loads
from .state.notes import Notes
from .state.state import Entry

__all__ = ["read_payload", "read_outcome", "note_view"]

# Record type holding a kept finished job's outcome -> its field for the finishing time.
_OUTCOME_FIELD: Final[dict[int, str]] = {RecordType.ACK: TIME, RecordType.CANCEL: TIME,
                                         RecordType.FINISHED: FINISHED_AT}


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


def read_outcome(current: LogFile, entry: Entry) -> tuple[float, Any]:
    """A kept finished job's (finished_at, result), read from the record that holds
    them (an ACK, CANCEL or FINISHED record); under the lock."""
    found = current.record_at(entry.loc)
    if found is None or found[0] not in _OUTCOME_FIELD or found[1].get(ID) != entry.id:
        raise CorruptLogError(current.path, entry.loc, "finished job's record unreadable")
    record = found[1]
    return float(record[_OUTCOME_FIELD[found[0]]]), record.get(RESULT)
