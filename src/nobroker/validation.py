"""Argument checks: every number, id and name a caller hands the public API.

Each check returns the value it accepts (seconds as a float) or raises with
one line naming the argument and what is wrong with it. The Queue, the
Worker, BackoffPolicy and the CLI all check through here, so that one
argument gets one answer wherever it is given. Nothing here knows how jobs
are stored.

Two kinds of error, as the Python builtins use them: a value of the wrong
type is a TypeError (integers, and the Worker's seconds), a value out of
range a ValueError. The Queue's numbers (delays, timeouts) have always been
ValueError for both, and stay so: `number` is that check.
"""

from __future__ import annotations

import math
import re
from typing import Any, Final

__all__ = ["number", "seconds", "integer", "flag", "job_options", "fraction", "job_id",
           "queue_name", "error_text", "progress", "INT_LIMIT", "MAX_ID_LENGTH",
           "MAX_ERROR_LENGTH", "MAX_NOTE_LENGTH"]

INT_LIMIT: Final = 2**53  # larger integers do not survive a round trip through most JSON readers
MAX_ID_LENGTH: Final = 256
MAX_ERROR_LENGTH: Final = 4000  # a nack's error text is cut to this many characters
MAX_NOTE_LENGTH: Final = 1000  # a progress note is cut to this many characters
_QUEUE_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,99}")


def _is_real(value: object) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float))


def number(name: str, value: object, *, minimum: float | None = None,
           maximum: float | None = None, positive: bool = False) -> float:
    """A finite real number (bool refused), at least `minimum`, at most `maximum`,
    above 0 when `positive`; ValueError otherwise, a wrong type included."""
    if not _is_real(value):
        raise ValueError(f"{name} must be a number, not {type(value).__name__}")
    assert isinstance(value, (int, float))
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, not {value!r}")
    if maximum is not None and minimum is not None and not minimum <= value <= maximum:
        raise ValueError(f"{name} must be between {minimum:g} and {maximum:g}, not {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum:g}, not {value!r}")
    if positive and value <= 0:
        raise ValueError(f"{name} must be > 0, not {value!r}")
    return float(value)


def seconds(name: str, value: object, *, positive: bool = False) -> float:
    """A finite number of seconds, >= 0 (> 0 when `positive`); TypeError for a value
    that is not a number at all (the Worker's arguments)."""
    if not _is_real(value):
        raise TypeError(f"{name} must be a number of seconds, not {type(value).__name__}")
    return number(name, value, minimum=0, positive=positive)


def flag(name: str, value: object) -> bool:
    """A bool (an int or None refused: a typo must not flip a job's fate)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, not {type(value).__name__}")
    return value


def integer(name: str, value: object, minimum: int, maximum: int | None = None) -> int:
    """An int (bool refused) in [minimum, maximum]."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if value < minimum or (maximum is not None and value > maximum):
        bound = f"between {minimum} and {maximum}" if maximum is not None else f">= {minimum}"
        raise ValueError(f"{name} must be {bound}, not {value}")
    return value


def job_options(priority: object, delay: object, max_attempts: object,
                default_attempts: int) -> tuple[int, float, int]:
    """An enqueue's priority, delay and max_attempts (None: `default_attempts`), checked."""
    return (integer("priority", priority, -INT_LIMIT, INT_LIMIT),
            number("delay", delay, minimum=0),
            default_attempts if max_attempts is None
            else integer("max_attempts", max_attempts, 1, INT_LIMIT))


def fraction(name: str, value: object) -> float:
    """A number strictly between 0 and 1."""
    checked = number(name, value, minimum=0)
    if not 0 < checked < 1:
        raise ValueError(f"{name} must be between 0 and 1 (or None), not {value!r}")
    return checked


def progress(fraction: object, note: object) -> tuple[float, str | None]:
    """A running job's progress: a fraction from 0 to 1, and a note (text, cut to
    MAX_NOTE_LENGTH characters) or None."""
    checked = number("fraction", fraction, minimum=0, maximum=1)
    if note is not None and not isinstance(note, str):
        raise ValueError(f"note must be a string or None, not {type(note).__name__}")
    return checked, None if note is None else note[:MAX_NOTE_LENGTH]


def job_id(value: object) -> str:
    """A job id: a non-empty string without control characters."""
    return _identifier("job_id", value)


def lock_key(value: object) -> str:
    """A named lock's key: as a job id, a non-empty string without control characters."""
    return _identifier("lock key", value)


def _identifier(name: str, value: object) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a string, not {type(value).__name__}")
    if not value or len(value) > MAX_ID_LENGTH:
        raise ValueError(f"{name} must be 1 to {MAX_ID_LENGTH} characters")
    if not value.isprintable():
        raise ValueError(f"{name} {value!r} contains control characters")
    return value


def queue_name(value: object) -> str:
    """A queue's name: 1-100 letters, digits, '_' or '-', not starting with '_' or '-'."""
    if not isinstance(value, str) or not _QUEUE_NAME.fullmatch(value):
        raise ValueError(f"queue name {value!r} must be 1-100 letters, digits, '_' or '-'")
    return value


def error_text(error: Any) -> str | None:
    """A nack's error as stored: text, cut to MAX_ERROR_LENGTH characters."""
    return None if error is None else str(error)[:MAX_ERROR_LENGTH]
