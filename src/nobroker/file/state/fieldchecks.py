"""The shape of a record's fields: each check a ReplayError when a field is off.

Replay (state.py, transitions.py, snapshots.py) and the checkpoint reader
take every number, string and flag of a record through these, so that a log
or a checkpoint that no writer could have written is refused with its offset,
never half applied. The field names are log/records.py's.
Pure: no os, time, random or threads.
"""

from __future__ import annotations

from typing import Any, Final

from ..log.records import (
    MAX_ATTEMPTS,
    RESULT,
    RESULT_KEEP,
    Record,
    ReplayError,
)

__all__ = ["INT64", "field", "opt_str", "max_attempts_field", "check_totals",
           "check_result_keep"]

INT64: Final = 2**63


def field(rec: Record, key: str, kind: type, offset: int) -> Any:
    value = rec.get(key)
    if type(value) is not kind and not (kind is float and type(value) is int):
        raise ReplayError(offset, f"field {key!r} must be {kind.__name__}, got {value!r:.60}")
    if type(value) is int:
        if not -INT64 <= value < INT64:  # no writer stores these, and checkpoints cannot
            raise ReplayError(offset, f"field {key!r} is out of range")
        if kind is float:  # as a checkpoint would give it back: replay and checkpoint agree
            return float(value)
    return value


def opt_str(rec: Record, key: str, offset: int) -> str | None:
    value = rec.get(key)
    if value is not None and type(value) is not str:
        raise ReplayError(offset, f"field {key!r} must be a string or null")
    return value


def max_attempts_field(rec: Record, offset: int) -> int:
    value = field(rec, MAX_ATTEMPTS, int, offset)
    if value < 1:
        raise ReplayError(offset, f"max_attempts {value} < 1")
    return int(value)


def check_result_keep(rec: Record, keep: float, offset: int) -> float | None:
    """An ACK's or FINISHED record's optional "rkeep" (1.2): with a result, a number
    from 0 up to (not including) the record's "keep", or ReplayError; None if absent."""
    if RESULT_KEEP not in rec:
        return None
    value = field(rec, RESULT_KEEP, float, offset)
    if RESULT not in rec or not 0 <= value < keep:
        raise ReplayError(offset, f"bad result retention {value!r} (keep {keep!r})")
    return float(value)


def check_totals(value: object, offset: int) -> tuple[int, int, int]:
    """A snapshot's or checkpoint's `tot`: three integers >= 0, or ReplayError."""
    if (type(value) is not list or len(value) != 3
            or any(type(n) is not int or not 0 <= n < INT64 for n in value)):
        raise ReplayError(offset, f"bad totals {value!r:.60}")
    return value[0], value[1], value[2]
