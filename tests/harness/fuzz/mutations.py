"""Mutations of a corpus: each damages the files and says how; make_case draws one case.
"""

from __future__ import annotations

import json
import random
import struct
import zlib
from collections.abc import Callable
from typing import Any

from nobroker.file.log.framing import (
    FILE_HEADER,
    MAX_RECORD,
    MORE,
    RECORD_HEADER,
)

from .corpus import CKPT1, CURRENT, LOG1, NAME, Corpus, Files, Frame, boundaries, frames, reframe

# --------------------------------------------------------------------------
# mutations: each takes (files, rng, corpus) and returns a description


RAW_TOKENS = ["NaN", "Infinity", "-Infinity", "1e400", "-1e400", "9" * 5000,
              '"\\ud800"', '"\\udfff\\ud800"', "[" * 100_000 + "]" * 100_000,
              '{"a":' * 50_000 + "1" + "}" * 50_000, "1.0e-400", "-0", "true"]
BAD_VALUES: list[Any] = [None, True, False, -1, 0, 2**53 + 1, 2**63, 2**64, -(2**63) - 1,
                         1.5, -0.0, 1e308, "", "x", "\ud800", [], {}, [1], {"a": 1},
                         "pending", "leased", "dead", 10**30]
BAD_PAYLOADS = [b"{", b"\xff", b"[]", b"1", b"null", b'"s"', b'{"b":1', b'{"b":1}garbage',
                b"\xef\xbb\xbf{}", b'{"b":1}\x00', b"{}", b'{"b":null}', b'{"b":-5}',
                b'{"b":1,"b":2}', b" " * 100]


def _pick_log(files: Files, rng: random.Random) -> str | None:
    logs = [n for n in files if n.endswith(".log")]
    return rng.choice(logs) if logs else None


def _data_range(data: bytes) -> tuple[int, int]:
    return (0, len(data)) if len(data) <= FILE_HEADER.size else (FILE_HEADER.size, len(data))


def m_bitflip(files: Files, rng: random.Random, corpus: Corpus) -> str:
    name = rng.choice([n for n in files])
    data = bytearray(files[name])
    if not data:
        return "bitflip: empty file"
    spots = []
    for _ in range(rng.choice((1, 1, 1, 2, 4, 8))):
        lo, hi = (0, len(data)) if rng.random() < 0.15 else _data_range(bytes(data))
        pos = rng.randrange(lo, hi) if hi > lo else 0
        bit = rng.randrange(8)
        data[pos] ^= 1 << bit
        spots.append(f"{pos}.{bit}")
    files[name] = bytes(data)
    return f"bitflip {name} at {','.join(spots)}"


def m_truncate(files: Files, rng: random.Random, corpus: Corpus) -> str:
    name = _pick_log(files, rng) or rng.choice(list(files))
    data = files[name]
    cut = rng.randrange(len(data) + 1)
    tail = rng.choice((b"", b"", b"\0" * 512, b"\0" * 4096, b"\0" * rng.randrange(1, 40)))
    files[name] = data[:cut] + tail
    return f"truncate {name} at {cut} + {len(tail)} zeros"


def m_zero_range(files: Files, rng: random.Random, corpus: Corpus) -> str:
    name = _pick_log(files, rng)
    if name is None:
        return "zero: no log"
    data = bytearray(files[name])
    start = rng.randrange(len(data))
    size = rng.choice((1, 9, 64, 512, rng.randrange(1, 2000)))
    if rng.random() < 0.5:
        start -= start % 512
    data[start:start + size] = bytes(len(data[start:start + size]))
    files[name] = bytes(data)
    return f"zero {name} [{start}, +{size})"


def m_garbage_tail(files: Files, rng: random.Random, corpus: Corpus) -> str:
    name = _pick_log(files, rng)
    if name is None:
        return "garbage: no log"
    size = rng.choice((1, 8, 9, 100, 4096, rng.randrange(1, 70_000)))
    junk = rng.randbytes(size)
    if rng.random() < 0.3:  # garbage that starts like a record: a plausible length field
        junk = struct.pack("<IB", rng.randrange(1, 200), rng.randrange(1, 12)) + junk
    files[name] += junk
    return f"garbage tail {name} +{len(junk)}"


def m_splice(files: Files, rng: random.Random, corpus: Corpus) -> str:
    name = _pick_log(files, rng)
    if name is None:
        return "splice: no log"
    other = rng.choice(corpus.logs())
    mine = files[name]
    if rng.random() < 0.6:
        i = rng.choice(boundaries(mine))
        j = rng.choice(boundaries(other))
    else:
        i, j = rng.randrange(len(mine) + 1), rng.randrange(len(other) + 1)
    files[name] = mine[:i] + other[j:]
    return f"splice {name}[:{i}] + other[{j}:]"


def m_length(files: Files, rng: random.Random, corpus: Corpus) -> str:
    name = _pick_log(files, rng)
    found = frames(files[name]) if name else []
    if not name or not found:
        return "length: no record"
    frame = rng.choice(found)
    data = bytearray(files[name])
    remaining = len(data) - frame.offset - RECORD_HEADER.size
    length = rng.choice((0xFFFFFFFF, MAX_RECORD + 1, MAX_RECORD, remaining + 1, 0,
                         len(frame.payload) + 1, len(frame.payload) - 1, 0x80000000))
    struct.pack_into("<I", data, frame.offset, length)
    fixed = rng.random() < 0.5
    if fixed:
        crc = zlib.crc32(bytes(data[frame.offset + RECORD_HEADER.size:
                                    frame.offset + RECORD_HEADER.size + min(length, MAX_RECORD)]),
                         zlib.crc32(bytes(data[frame.offset:frame.offset + 5])))
        struct.pack_into("<I", data, frame.offset + 5, crc)
    files[name] = bytes(data)
    return f"length {length} at {name}@{frame.offset} (crc {'fixed' if fixed else 'stale'})"


def _obj(payload: bytes) -> dict[str, Any]:
    """A frame's payload as a dict, or {} when an earlier mutation made it something else."""
    try:
        value = json.loads(payload)
    except (ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def _replace_frame(files: Files, name: str, frame: Frame, new: bytes) -> None:
    data = files[name]
    files[name] = data[:frame.offset] + new + data[frame.offset + frame.size:]


def m_crafted(files: Files, rng: random.Random, corpus: Corpus) -> str:
    """A CRC-valid record whose payload is bad JSON or JSON of the wrong shape."""
    name = _pick_log(files, rng)
    found = frames(files[name]) if name else []
    if not name or not found:
        return "crafted: no record"
    frame = rng.choice(found[-3:] if rng.random() < 0.4 else found)  # tail or anywhere
    kind = rng.random()
    if kind < 0.2:
        payload = rng.choice(BAD_PAYLOADS)
        what = f"payload {payload[:20]!r}"
    else:
        record = _obj(frame.payload)
        keys = list(record)
        action = rng.random()
        if action < 0.25 and keys:
            key = rng.choice(keys)
            del record[key]
            what = f"without {key!r}"
        elif action < 0.6 and keys:
            key = rng.choice(keys)
            record[key] = rng.choice(BAD_VALUES)
            what = f"{key!r}={record[key]!r:.30}"
        elif action < 0.75:
            others = [_obj(f.payload).get("id") for f in found]
            record["id"] = rng.choice([o for o in others if o] or ["nobody"])
            what = f"id={record['id']!r}"
        elif action < 0.85:
            number = record.get("b")
            record["b"] = (number if type(number) is int else 1) + rng.choice(
                (-1, 1, 2, -100, 10**6))
            what = f"b={record['b']}"
        else:
            key = rng.choice(keys) if keys else "b"
            record[key] = "__RAW__"
            what = f"{key!r}=<raw>"
        text = json.dumps(record, separators=(",", ":"), ensure_ascii=True)
        if "__RAW__" in text:
            token = rng.choice(RAW_TOKENS)
            text = text.replace('"__RAW__"', token)
            what = what.replace("<raw>", token[:20])
        payload = text.encode("ascii")
    _replace_frame(files, name, frame, reframe(frame.type_byte, payload))
    return f"crafted {name}@{frame.offset}: {what}"


def m_type(files: Files, rng: random.Random, corpus: Corpus) -> str:
    name = _pick_log(files, rng)
    found = frames(files[name]) if name else []
    if not name or not found:
        return "type: no record"
    frame = rng.choice(found)
    new_type = rng.choice((0, 12, 50, 127, 128, 200, 255, frame.type_byte ^ MORE,
                           rng.randrange(256)))
    _replace_frame(files, name, frame, reframe(new_type, frame.payload))
    return f"type {frame.type_byte}->{new_type} at {name}@{frame.offset}"


def m_header(files: Files, rng: random.Random, corpus: Corpus) -> str:
    name = _pick_log(files, rng)
    if name is None or len(files[name]) < FILE_HEADER.size:
        return "header: none"
    data = bytearray(files[name])
    field_ = rng.choice(("magic", "version", "generation", "reserved"))
    if field_ == "magic":
        data[rng.randrange(8)] ^= 0x20
    elif field_ == "version":
        struct.pack_into("<H", data, 8, rng.choice((0, 2, 999, 0xFFFF)))
    elif field_ == "generation":
        struct.pack_into("<I", data, 10, rng.choice((0, 1, 2, 0xFFFFFFFF)))
    else:
        struct.pack_into("<H", data, 14, rng.choice((1, 0xFFFF)))
    files[name] = bytes(data)
    return f"header {field_} of {name}"


def m_records(files: Files, rng: random.Random, corpus: Corpus) -> str:
    """Duplicate, drop, swap or insert whole records."""
    name = _pick_log(files, rng)
    found = frames(files[name]) if name else []
    if not name or len(found) < 2:
        return "records: too few"
    data = files[name]
    pieces = [data[f.offset:f.offset + f.size] for f in found]
    head, rest = data[:found[0].offset], data[found[-1].offset + found[-1].size:]
    op = rng.choice(("dup", "drop", "swap", "insert"))
    i = rng.randrange(len(pieces))
    if op == "dup":
        j = rng.randrange(i, min(len(pieces), i + 4))
        pieces[j + 1:j + 1] = pieces[i:j + 1]
    elif op == "drop":
        del pieces[i]
    elif op == "swap":
        j = rng.randrange(len(pieces))
        pieces[i], pieces[j] = pieces[j], pieces[i]
    else:
        obj = {"b": rng.randrange(1, 40), "id": rng.choice(["x", "key-0", "key-2"]),
               "pr": 0, "at": 0.0, "t": 0.0, "ma": 3, "tok": rng.randrange(1, 9),
               "until": 1e9, "p": None, "done": 0, "jobs": 0}
        for key in rng.sample(list(obj), rng.randrange(len(obj))):
            del obj[key]
        pieces.insert(i, reframe(rng.randrange(1, 12) | rng.choice((0, MORE)),
                                 json.dumps(obj, separators=(",", ":")).encode()))
    files[name] = head + b"".join(pieces) + rest
    return f"records {op} at {i} in {name}"


CURRENT_TEXTS = [b"", b"\n", b" 1\n", b"-1\n", b"01\n", b"1\n\n", b"999999999\n",
                 b"4294967296\n", b"1 \n", b"\x001\n", b"0\n", b"2\n", b"1\r\n", b"one\n",
                 b"1", b"+1\n", b"1.0\n", b"\xff\xfe", b"1\n" * 40, b"0x1\n"]


def m_current(files: Files, rng: random.Random, corpus: Corpus) -> str:
    choice = rng.random()
    if choice < 0.15:
        files.pop(CURRENT, None)
        return "current removed"
    if choice < 0.3:
        files[CURRENT] = rng.randbytes(rng.randrange(0, 80))
        return "current random bytes"
    text = rng.choice(CURRENT_TEXTS)
    files[CURRENT] = text
    return f"current {text[:20]!r}"


def m_checkpoint(files: Files, rng: random.Random, corpus: Corpus) -> str:
    ckpts = [n for n in files if n.endswith(".ckpt")]
    if not ckpts:
        # plant one from another seed: it describes another log
        donor = corpus.seeds["compacted"].get(CKPT1)
        if donor is None:
            return "checkpoint: none"
        files[CKPT1 if LOG1 in files else f"{NAME}.000000.ckpt"] = donor
        return "checkpoint planted from another log"
    name = rng.choice(ckpts)
    data = bytearray(files[name])
    op = rng.random()
    if op < 0.3:
        data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        what = "bit flip"
    elif op < 0.45:
        data = data[:rng.randrange(len(data))]
        what = "truncated"
    else:  # forge: change the body, then recompute its CRC so it is "trusted"
        body = bytearray(data[12:])
        if body:
            for _ in range(rng.choice((1, 2, 8))):
                pos = rng.randrange(len(body))
                body[pos] = rng.choice((0, 0xFF, rng.randrange(256), body[pos] ^ 1))
        data = bytearray(data[:8] + struct.pack("<I", zlib.crc32(bytes(body))) + body)
        what = "forged with a valid crc"
    files[name] = bytes(data)
    return f"checkpoint {name} {what}"


MUTATIONS: list[tuple[float, Callable[[Files, random.Random, Corpus], str]]] = [
    (3, m_bitflip), (2, m_truncate), (1, m_zero_range), (1, m_garbage_tail), (2, m_splice),
    (1.5, m_length), (4, m_crafted), (1, m_type), (0.7, m_header), (2, m_records),
    (1, m_current), (1.5, m_checkpoint),
]


def make_case(corpus: Corpus, seed: int, index: int) -> tuple[Files, list[str]]:
    """Case `index` of `seed`: a damaged copy of one corpus entry and what was done."""
    rng = random.Random(f"{seed}:{index}")
    label = rng.choice(sorted(corpus.seeds))
    files = dict(corpus.seeds[label])
    steps = [f"from {label}"]
    weights = [w for w, _ in MUTATIONS]
    for _ in range(rng.choice((1, 1, 1, 2, 2, 3))):
        (_, mutate), = rng.choices(MUTATIONS, weights=weights)
        steps.append(mutate(files, rng, corpus))
    return files, steps
