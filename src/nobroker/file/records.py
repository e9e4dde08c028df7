"""Record types and the strict JSON codec for record payloads.

A record payload is a JSON object. Its first key is always "b", the batch
number of the API call that wrote it (see framing.RESYNC_MARKER). The other
keys depend on the type; docs/FORMAT.md lists them. The codec refuses what
Python's json module would otherwise let through and another reader would
not: NaN and Infinity, and nesting deep enough to blow the stack.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from enum import IntEnum
from typing import Any, Final

from .framing import MAX_RECORD

__all__ = [
    "RecordType",
    "Record",
    "dumps",
    "enqueue_text",
    "loads",
    "encode_payload",
    "check_id",
    "check_number",
    "MAX_ID_LENGTH",
    "MAX_DEPTH",
    "MAX_PAYLOAD_BYTES",
]

Record = dict[str, Any]
MAX_ID_LENGTH: Final = 256
# A payload the writer accepts must stay readable: replay decodes it from whatever
# stack depth the reader happens to be at, so nesting is capped far below the
# recursion limit; and its record must fit under MAX_RECORD, with room for the
# fields a snapshot JOB record adds (an error text of up to 4000 escaped chars).
MAX_DEPTH: Final = 128
MAX_PAYLOAD_BYTES: Final = MAX_RECORD - (64 << 10)


class RecordType(IntEnum):
    ENQUEUE = 1  # a new job
    LEASE = 2  # a job handed to a holder until a deadline, under a fencing token
    ACK = 3  # the holder finished the job
    NACK = 4  # the holder failed; retry later or dead-letter
    EXTEND = 5  # the holder moved its deadline
    EXPIRE = 6  # a lease ran out: counts as a failed attempt
    REQUEUE = 7  # a dead job revived
    PURGE = 8  # every pending job removed
    JOB = 9  # snapshot: one live job, written by compaction
    KEY = 10  # snapshot: an idempotency key of a finished job, still remembered
    SNAPSHOT = 11  # snapshot: end marker with the queue's counters
    FORGET = 12  # an idempotency key's retention ran out


class _Rejected(ValueError):
    pass


def _reject_constant(name: str) -> Any:
    raise _Rejected(f"{name} is not valid JSON")


_encoder = json.JSONEncoder(ensure_ascii=True, allow_nan=False, separators=(",", ":"))


def _not_json(value: object) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


# JSONEncoder.encode builds a new C encoder on every call; building it once
# makes a small payload about 2.5x cheaper to encode. Same output, same errors
# (NaN refused, non-JSON types refused); no circular-reference bookkeeping, so
# a cycle surfaces as RecursionError, which encode_payload reports.
_make_c_encoder = getattr(json.encoder, "c_make_encoder", None)
_c_encoder = _make_c_encoder(
    None, _not_json, json.encoder.encode_basestring_ascii, None, ":", ",",
    False, False, False) if _make_c_encoder is not None else None


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # "1e400" parses to inf without ever spelling Infinity
        raise _Rejected(f"{text[:20]} is out of a float's range")
    return value


# The finiteness hook costs about as much per record as the regex that tried to
# decide when it was needed did, so it always runs.
_decoder = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_finite_float)


def dumps(value: Any) -> str:
    """Strict JSON text for `value`; raises ValueError/TypeError/RecursionError."""
    if _c_encoder is not None:
        return "".join(_c_encoder(value, 0))
    return _encoder.encode(value)


_quote: Final = json.encoder.encode_basestring_ascii


def enqueue_text(number: int, job_id: str, priority: int, at: float, t: float,
                 max_attempts: int, keyed: bool, payload_text: str, durable: int = 0) -> str:
    """An ENQUEUE record's JSON text, the text `dumps` gives its fields followed by
    the payload, built without a dict: this is every enqueue's path."""
    key = ',"k":true' if keyed else ""
    known = f',"d":{durable:d}' if durable else ""
    return (f'{{"b":{number:d}{known},"id":{_quote(job_id)},"pr":{priority:d},"at":{at!r},'
            f'"t":{t!r},"ma":{max_attempts:d}{key},"p":{payload_text}}}')


# Both are documented only in the json module's source; typeshed omits them.
_scan_once: Callable[[str, int], tuple[Any, int]] = _decoder.scan_once  # type: ignore[attr-defined]
_WHITESPACE: re.Pattern[str] = json.decoder.WHITESPACE  # type: ignore[attr-defined]


def _skip_whitespace(text: str, pos: int) -> int:
    found = _WHITESPACE.match(text, pos)  # matches the empty string too: never None
    return pos if found is None else found.end()


def loads(data: bytes | str) -> Any:
    """Parse strict JSON; raises ValueError for anything else (never RecursionError).

    The steps of JSONDecoder.decode, with its errors, but calling the C scanner
    directly: replay parses every record through here."""
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        value, end = _scan_once(text, _skip_whitespace(text, 0))
    except StopIteration as stop:
        raise json.JSONDecodeError("Expecting value", text, stop.value) from None
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    end = _skip_whitespace(text, end)
    if end != len(text):
        raise json.JSONDecodeError("Extra data", text, end)
    return value


def encode_payload(payload: Any) -> str:
    """JSON text of a user payload, or ValueError naming what is wrong with it."""
    try:
        text = dumps(payload)
    except RecursionError:
        raise ValueError("payload is nested too deeply (or contains itself)") from None
    except (TypeError, ValueError) as exc:
        raise ValueError(f"payload is not JSON: {exc}") from None
    if len(text) > MAX_PAYLOAD_BYTES:
        raise ValueError(f"payload is {len(text)} bytes of JSON; the limit is "
                         f"{MAX_PAYLOAD_BYTES}")
    if _too_deep(text):
        raise ValueError(f"payload nests more than {MAX_DEPTH} levels deep")
    return text


_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_BRACKET = re.compile(r"[\[\]{}]")


def _too_deep(text: str) -> bool:
    """Whether JSON `text` nests containers more than MAX_DEPTH deep."""
    if len(text) <= 2 * MAX_DEPTH or text.count("[") + text.count("{") <= MAX_DEPTH:
        # The usual case: too few brackets (each one opened is closed) to be that deep.
        return False
    depth = 0
    for bracket in _BRACKET.findall(_STRING.sub("", text)):
        if bracket in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return True
        else:
            depth -= 1
    return False


def check_id(job_id: object) -> str:
    """A job id: a non-empty string without control characters."""
    if not isinstance(job_id, str):
        raise ValueError(f"job_id must be a string, not {type(job_id).__name__}")
    if not job_id or len(job_id) > MAX_ID_LENGTH:
        raise ValueError(f"job_id must be 1 to {MAX_ID_LENGTH} characters")
    if not job_id.isprintable():
        raise ValueError(f"job_id {job_id!r} contains control characters")
    return job_id


def check_number(name: str, value: object, *, minimum: float | None = None) -> float:
    """A finite real number (bool refused), optionally at least `minimum`."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number, not {type(value).__name__}")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, not {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum:g}, not {value!r}")
    return float(value)
