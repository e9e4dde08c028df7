"""JSON text: the strict codec every payload, result and record goes through.

Both storage engines keep JSON text, and another reader (a later version, a
tool in another language) must be able to read it back. So this codec
refuses what Python's json module would otherwise let through: NaN and
Infinity, numbers that overflow a float, and nesting deep enough to blow the
stack. `encode_payload` is the Queue's: it turns a caller's value (a
payload, or a result) into the text a backend stores, or raises
SerializationError naming what is wrong with it.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from .errors import SerializationError

__all__ = ["dumps", "loads", "loads_object", "encode_payload", "encode_payloads", "metadata",
           "metadata_each", "MAX_DEPTH", "MAX_PAYLOAD_BYTES", "MAX_META_BYTES"]

# A payload the writer accepts must stay readable: replay decodes it from whatever
# stack depth the reader happens to be at, so nesting is capped far below the
# recursion limit; and its record must fit under the file log's 16 MiB record
# limit (framing.MAX_RECORD), with room for the fields a snapshot JOB record adds
# (an error text of up to 4000 escaped chars).
MAX_DEPTH: Final = 128
MAX_PAYLOAD_BYTES: Final = (16 << 20) - (64 << 10)
# A job's metadata (enqueue(meta=), set_meta) rides beside its payload in every
# snapshot record, inside those 64 KiB of room; its progress note is 1,000 chars.
MAX_META_BYTES: Final = 16 << 10


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


# Both are documented only in the json module's source; typeshed omits them.
_scan_once: Callable[[str, int], tuple[Any, int]] = _decoder.scan_once  # type: ignore[attr-defined]
_WHITESPACE: re.Pattern[str] = json.decoder.WHITESPACE  # type: ignore[attr-defined]
_SPACE: Final = frozenset(" \t\n\r")  # what _WHITESPACE matches


def _skip_whitespace(text: str, pos: int) -> int:
    found = _WHITESPACE.match(text, pos)  # matches the empty string too: never None
    return pos if found is None else found.end()


def loads(data: bytes | str) -> Any:
    """Parse strict JSON; raises ValueError for anything else (never RecursionError).

    The steps of JSONDecoder.decode, with its errors, but calling the C scanner
    directly: replay parses every record through here."""
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        # What we write has no whitespace around it: skip the regex unless there is.
        start = _skip_whitespace(text, 0) if text[:1] in _SPACE else 0
        value, end = _scan_once(text, start)
    except StopIteration as stop:
        raise json.JSONDecodeError("Expecting value", text, stop.value) from None
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    if end != len(text):
        end = _skip_whitespace(text, end)
        if end != len(text):
            raise json.JSONDecodeError("Extra data", text, end)
    return value


def loads_object(data: bytes) -> dict[str, Any] | None:
    """The JSON object `data` holds, or None if it holds anything else or is not
    strict JSON (what loads refuses). Replay decodes every record here: text as
    written (no whitespace before it) goes straight to the C scanner."""
    try:
        text = data.decode("utf-8")
        if text[:1] in _SPACE:
            value = loads(text)
        else:
            value, end = _scan_once(text, 0)
            if end != len(text):
                value = loads(text)  # whitespace after it, or extra data (refused)
    except (ValueError, StopIteration, RecursionError):
        return None
    return value if type(value) is dict else None


def encode_payload(payload: Any, what: str = "payload") -> str:
    """JSON text of a user payload (or of what `what` names: a result), or
    SerializationError (a ValueError) naming what is wrong with it."""
    try:
        text = dumps(payload)
    except RecursionError:
        raise SerializationError(f"{what} is nested too deeply (or contains itself)"
                                 ) from None
    except (TypeError, ValueError) as exc:
        raise SerializationError(f"{what} is not JSON: {exc}") from None
    if len(text) > MAX_PAYLOAD_BYTES:
        raise SerializationError(f"{what} is {len(text)} bytes of JSON; the limit is "
                                 f"{MAX_PAYLOAD_BYTES}")
    if _too_deep(text):
        raise SerializationError(f"{what} nests more than {MAX_DEPTH} levels deep")
    return text


def encode_payloads(payloads: Sequence[Any]) -> list[str]:
    """encode_payload of each payload; a SerializationError names the first bad one,
    by its index, as "payload INDEX: what is wrong"."""
    texts: list[str] = []
    if _c_encoder is not None:  # the usual case, enqueue_many's: one tight loop
        encode, join, append = _c_encoder, "".join, texts.append
        try:
            for payload in payloads:
                append(join(encode(payload, 0)))
        except (TypeError, ValueError, RecursionError):
            pass
        else:
            if not any(len(text) > _SHALLOW and (len(text) > MAX_PAYLOAD_BYTES
                                                 or _too_deep(text)) for text in texts):
                return texts
        texts = []
    for index, payload in enumerate(payloads):  # one at a time, to name the first bad one
        try:
            texts.append(encode_payload(payload))
        except SerializationError as exc:
            raise SerializationError(f"payload {index}: {exc}") from None
    return texts


_SHALLOW: Final = 2 * MAX_DEPTH  # JSON text this short cannot nest too deep (_too_deep)
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_BRACKET = re.compile(r"[\[\]{}]")


def _too_deep(text: str) -> bool:
    """Whether JSON `text` nests containers more than MAX_DEPTH deep."""
    if len(text) <= _SHALLOW or text.count("[") + text.count("{") <= MAX_DEPTH:
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


def metadata(value: object) -> dict[str, Any]:
    """A job's metadata: a mapping with string keys and JSON values, at most
    MAX_META_BYTES as JSON; returns a copy (the caller's objects may change later).
    TypeError for a wrong type, SerializationError (a ValueError) for what is not JSON."""
    if not isinstance(value, Mapping) or not all(isinstance(key, str) for key in value):
        raise TypeError("metadata must be a mapping with string keys")
    text = encode_payload(dict(value), "metadata")
    if len(text.encode()) > MAX_META_BYTES:
        raise ValueError(f"a job's metadata is limited to {MAX_META_BYTES} bytes of JSON, "
                         f"not {len(text.encode())}")
    copy: dict[str, Any] = loads(text)
    return copy


def metadata_each(value: object, count: int) -> list[dict[str, Any]] | None:
    """The metadata of each of `count` jobs enqueued together: None for none, one mapping
    for every job, or a sequence of one mapping (or None: none) per job; each checked
    and copied as `metadata`. TypeError for another type, ValueError for a wrong count."""
    if value is None:
        return None
    if isinstance(value, Mapping):
        text = dumps(metadata(value))
        return [loads(text) for _ in range(count)]  # each job's own, nested values too
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise TypeError("meta must be a mapping, or a sequence of one mapping (or None) "
                        f"per payload, not {type(value).__name__}")
    if len(value) != count:
        raise ValueError(f"meta has {len(value)} items for {count} payloads")
    return [{} if item is None else metadata(item) for item in value]
