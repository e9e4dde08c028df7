"""A seeded, reproducible fuzzer that damages real queue files and opens them.

Theory. `build_corpus` runs a few real workloads (fake clock, seeded job
ids) and keeps their files: a generation-0 log, a compacted generation with
`NAME.current` and its checkpoint, and a second log to splice with. Case
number `i` of seed `s` draws one to three mutations from its own
`random.Random(f"{s}:{i}")`, so any case can be replayed alone:

    bit flips; truncation (with or without a zero tail); zeroed ranges;
    garbage tails; splices of two logs at record boundaries or anywhere;
    huge or zero length fields (CRC fixed or not); CRC-valid records whose
    JSON is invalid or wrongly shaped (missing keys, wrong types, NaN,
    1e400, 5000-digit ints, lone surrogates, duplicate keys, 100 000-deep
    nesting, other batch numbers, other jobs' ids); unknown record types and
    file-format versions; duplicated, dropped and swapped records; garbage,
    odd or missing `NAME.current`; damaged or forged checkpoints.

Each case is opened (under a watchdog) and must end in one of:

- a clean open -- then the queue must work: stats, list (every payload is
  read), lease and ack, enqueue, compact, close; and it must reopen with
  the same state and nothing left to repair;
- `CorruptLogError` naming a path and offset, with no file changed.

Anything else -- another exception type at any step, a hang, a file
changed by a refused open, tracemalloc peak beyond MAX_RECORD on the
sampled cases -- is a failure, reported with the case's id. Every case that
ever failed is kept in REGRESSIONS and replayed on every run.

tools/torture.py calls `fuzz(count=...)` with tens of thousands of cases.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import logging
import os
import random
import shutil
import signal
import struct
import tempfile
import time
import tracemalloc
import unittest
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from harness.support import FakeClock, TempDirTestCase, scratch_root, store_of

from nobroker import BackoffPolicy, CorruptLogError, NobrokerError, Queue
from nobroker.file.log.framing import (
    FILE_HEADER,
    MAX_RECORD,
    MORE,
    RECORD,
    RECORD_HEADER,
    decode_record,
    encode_record,
)

__all__ = ["Corpus", "FuzzReport", "build_corpus", "fuzz", "fuzz_root", "run_case", "REGRESSIONS"]

NAME = "default"
LOG0, LOG1 = f"{NAME}.000000.log", f"{NAME}.000001.log"
# The compacted seed's checkpoint is the one its compaction published at the switch.
CURRENT, CKPT1 = f"{NAME}.current", f"{NAME}.000001.switch.ckpt"
IGNORED = (f"{NAME}.lock", f"{NAME}.wake", f"{NAME}.sync")  # created by any open; not data
CASE_SECONDS = 10  # a case that takes longer is a hang
MEMORY_SAMPLE = 17  # every 17th case runs under tracemalloc
MEMORY_LIMIT = MAX_RECORD + (1 << 20)  # one record read at the size limit, plus change

# (seed, case) pairs that once failed. Replayed on every run, forever.
REGRESSIONS: list[tuple[int, int]] = [
    (2, 3166),  # JOB record with attempts 10**30: compaction raised OverflowError
    (2, 10312),  # forged CRC-valid checkpoint without "jobs": KeyError from Queue()
    (2, 16589),  # forged checkpoint with state code 255: IndexError from Queue()
    (2, 18971),  # forged checkpoint without "next_token": KeyError from Queue()
    (3, 12896),  # forged checkpoint with a job at offset < 0: raw OSError reading it
    (3, 33528),  # JOB record whose state "s" is {}: TypeError (unhashable) from replay
    (3, 33605),  # JOB record whose state "s" is [1]: the same
    (10007, 0),  # ENQUEUE with "at" 10**30 (an int): accepted by the fast replay path,
    (10007, 1300),  # ... then a checkpoint gave it back as a float: another state
    (10007, 2788),  # "until" 2**53 + 1: int in replay, float from a checkpoint
    (750974, 7700),  # KEY record twice in a snapshot: two FORGETs planned for one key,
    (750974, 20514),  # ... the second failed to apply: a raw ReplayError from enqueue
]


# --------------------------------------------------------------------------
# the corpus: real files from real workloads


Files = dict[str, bytes]


@dataclass
class Corpus:
    seeds: dict[str, Files]

    def logs(self) -> list[bytes]:
        return [files[name] for files in self.seeds.values()
                for name in (LOG0, LOG1) if name in files]


def _trim(data: bytes) -> bytes:
    """A log without its preallocated zero tail (most mutations aim at real bytes)."""
    return data.rstrip(b"\0") if len(data) > FILE_HEADER.size else data


def _workload(q: Queue, clock: FakeClock, flavour: int) -> None:
    q.enqueue({"n": 1, "text": "hello"}, priority=flavour)
    q.enqueue({"n": 2, "nested": {"a": [1, 2, {"b": None}]}}, job_id=f"key-{flavour}")
    q.enqueue_many([{"n": 3}, {"n": 4, "s": "\u00e9\ud800"}, {"n": 5}])
    q.enqueue("delayed", delay=50.0)
    doomed = q.enqueue({"n": 6}, max_attempts=1)
    jobs = q.lease(3)
    clock.advance(1)
    q.ack(jobs[0])
    q.nack(jobs[1], error="boom", delay=0.0)
    q.extend(jobs[2], 60.0)
    clock.advance(100)  # expire what is left, make the delayed job ready
    for job in q.lease(10):
        if job.id == doomed.id:
            q.nack(job, error="dead")
        else:
            q.ack(job)
    q.requeue_dead()
    q.enqueue({"n": 7, "last": True})
    if flavour:
        q.lease(1)
    if flavour == 2:  # kept results and cancels, a deleted dead job, a pause: compacted next
        q.enqueue_many([{"n": 8}, {"n": 9}])
        for index, job in enumerate(q.lease(2)):
            q.ack(job, result={"index": index, "text": "d\u00e9j\u00e0"} if index else None)
        q.cancel(q.list_jobs("pending")[0].id)
        for job in q.lease(1):
            q.cancel(job.id)
        doomed = q.enqueue({"n": 11}, max_attempts=1, priority=100)
        for job in q.lease(1):
            q.nack(job, error="dead too")
        q.delete_dead(doomed.id)
        q.pause()


def _job_control(q: Queue) -> None:
    """CANCEL, DELETE, PAUSE/RESUME, SNOOZE and an ACK with a result, in a generation's
    own log."""
    q.enqueue_many([{"n": 20}, {"n": 21}, {"n": 22}], max_attempts=1, priority=200)
    first, second = q.lease(2)
    q.snooze(first, 0.0, error="later")  # its only attempt, given back untried
    (first,) = q.lease(1)
    q.cancel(first.id)
    q.ack(second, result={"ok": [1, 2]}, result_ttl=3600.0)
    for job in q.lease(1):
        q.nack(job, error="dead")
        q.delete_dead(job.id)
    q.pause()
    q.resume()


def build_corpus(root: str, seed: int = 0) -> Corpus:
    """Real queue files from three workloads (deterministic for a given seed)."""
    seeds: dict[str, Files] = {}
    options: dict[str, Any] = {"visibility_timeout": 30.0, "auto_compact": None,
                               "backoff": BackoffPolicy(base=1.0, jitter=0.0)}
    for label, flavour, compacted in (("gen0", 0, False), ("other", 1, False),
                                      ("compacted", 2, True)):
        directory = os.path.join(root, label)
        clock = FakeClock(1_000_000.0 + flavour * 1000)
        # Job ids and jitter come from the queue's rng: seeded, the files are the same.
        with Queue(directory, clock=clock, rng=random.Random(seed * 100 + flavour),
                   **options) as q:
            _workload(q, clock, flavour)
            if compacted:
                q.compact()
                q.enqueue({"after": "compaction"})
                q.resume()
                q.lease(1)
                _job_control(q)
        files: Files = {}
        for entry in sorted(os.listdir(directory)):
            if entry in IGNORED or ".torn-" in entry:
                continue
            with open(os.path.join(directory, entry), "rb") as handle:
                data = handle.read()
            files[entry] = _trim(data) if entry.endswith(".log") else data
        seeds[label] = files
    return Corpus(seeds)


# --------------------------------------------------------------------------
# frames


@dataclass
class Frame:
    offset: int
    size: int  # header + payload
    type_byte: int
    payload: bytes


def frames(data: bytes) -> list[Frame]:
    found = []
    pos = FILE_HEADER.size
    while True:
        outcome, type_byte, payload, nxt = decode_record(data, pos)
        if outcome != RECORD:
            return found
        found.append(Frame(pos, nxt - pos, type_byte, payload))
        pos = nxt


def boundaries(data: bytes) -> list[int]:
    found = frames(data)
    return [FILE_HEADER.size] + [f.offset + f.size for f in found]


def reframe(type_byte: int, payload: bytes) -> bytes:
    """A frame with a correct CRC for any type byte (MORE bit included)."""
    return encode_record(type_byte & 0x7F, payload, more=bool(type_byte & MORE))


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


# --------------------------------------------------------------------------
# running one case


class Hang(Exception):
    pass


@contextlib.contextmanager
def watchdog(seconds: float) -> Iterator[None]:
    """Raise Hang in the main thread after `seconds` (POSIX main thread only)."""
    usable = hasattr(signal, "setitimer") and _in_main_thread()
    if not usable:
        yield
        return

    def fire(signum: int, frame: object) -> None:
        raise Hang(f"no answer within {seconds}s")

    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _in_main_thread() -> bool:
    import threading
    return threading.current_thread() is threading.main_thread()


def digest(directory: str) -> dict[str, str]:
    found = {}
    for entry in sorted(os.listdir(directory)):
        if entry in IGNORED:
            continue
        path = os.path.join(directory, entry)
        if os.path.isfile(path):
            with open(path, "rb") as handle:
                found[entry] = hashlib.sha256(handle.read()).hexdigest()
        else:
            found[entry] = "dir"
    return found


def materialise(directory: str, files: Files) -> None:
    os.makedirs(directory, mode=0o700)
    for name, data in files.items():
        fd = os.open(os.path.join(directory, name), os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)


def exercise(directory: str, clock: FakeClock) -> tuple[str, str | None]:
    """Open and use the queue. Returns (outcome, problem or None)."""
    try:
        q = Queue(directory, clock=clock, auto_compact=None)
    except CorruptLogError as exc:
        if not isinstance(exc.offset, int) or exc.offset < 0 or not exc.reason:
            return "corrupt", f"CorruptLogError without a usable offset/reason: {exc!r}"
        return "corrupt", None
    problem = None
    try:
        repaired = not q.recovery.clean
        stats = q.stats()
        jobs = q.list_jobs()
        if len(jobs) != stats.total:
            problem = f"stats say {stats.total} jobs, list gives {len(jobs)}"
        clock.advance(1e6)  # every lease expires, every delay is due
        for job in q.lease(5):
            q.ack(job)
        q.enqueue({"fuzz": "after"})
        q.compact()
        before = store_of(q).state.fingerprint()
    except NobrokerError as exc:
        # Typed and honest (e.g. a payload record found unreadable later): allowed.
        q.close()
        return f"used-then-{type(exc).__name__}", None
    q.close()
    with Queue(directory, clock=clock, auto_compact=None) as again:
        if not again.recovery.clean:
            problem = f"reopen still repairs: {again.recovery.describe()}"
        elif store_of(again).state.fingerprint() != before:
            problem = "reopen gives a different state"
    return ("repaired" if repaired else "clean"), problem


@dataclass
class FuzzReport:
    cases: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)
    peak_memory: int = 0
    memory_samples: int = 0
    seconds: float = 0.0

    def summary(self) -> str:
        kinds = ", ".join(f"{k} {v}" for k, v in self.outcomes.most_common())
        return (f"{self.cases} fuzz cases in {self.seconds:.1f}s ({kinds}); "
                f"peak traced memory {self.peak_memory / 1e6:.1f} MB over "
                f"{self.memory_samples} sampled cases; failures: {len(self.failures)}")


def run_case(corpus: Corpus, seed: int, index: int, scratch: str,
             report: FuzzReport) -> None:
    files, steps = make_case(corpus, seed, index)
    directory = os.path.join(scratch, f"c{seed}-{index}")
    case_id = f"case ({seed}, {index}): {'; '.join(steps)}"
    materialise(directory, files)
    before = digest(directory)
    traced = index % MEMORY_SAMPLE == 0
    if traced:
        tracemalloc.start()
    try:
        with watchdog(CASE_SECONDS):
            outcome, problem = exercise(directory, FakeClock(2_000_000.0))
    except Hang as exc:
        outcome, problem = "hang", str(exc)
    except Exception as exc:
        outcome, problem = "crash", f"{type(exc).__name__}: {exc}"[:500]
    finally:
        if traced:
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            report.memory_samples += 1
            report.peak_memory = max(report.peak_memory, peak)
            if peak > MEMORY_LIMIT:
                report.failures.append(f"{case_id}: traced peak {peak} bytes > {MEMORY_LIMIT}")
    if outcome == "corrupt" and problem is None and digest(directory) != before:
        problem = "CorruptLogError, yet files changed"
    report.cases += 1
    report.outcomes[outcome] += 1
    if problem is not None:
        report.failures.append(f"{case_id}: {outcome}: {problem}")
    shutil.rmtree(directory, ignore_errors=True)


@contextlib.contextmanager
def fuzz_root(prefix: str) -> Iterator[tuple[str, Corpus]]:
    """A scratch directory holding the corpus (seed 0), removed afterwards; the
    nobroker logger is silenced meanwhile (repairs log warnings, and thousands of
    them say nothing here)."""
    root = tempfile.mkdtemp(prefix=prefix, dir=scratch_root())
    logger = logging.getLogger("nobroker")
    saved = logger.disabled
    logger.disabled = True
    try:
        yield root, build_corpus(os.path.join(root, "corpus"), seed=0)
    finally:
        logger.disabled = saved
        shutil.rmtree(root, ignore_errors=True)


def fuzz(count: int, seed: int = 0, *, deadline: float | None = None,
         regressions: bool = True) -> FuzzReport:
    """Run `count` cases of `seed` (and the regression cases), or until `deadline`."""
    report = FuzzReport()
    started = time.perf_counter()
    with fuzz_root("nobroker-fuzz-") as (root, corpus):
        fixed = list(REGRESSIONS) if regressions else []
        cases = itertools.chain(fixed, ((seed, i) for i in range(count)))
        for case_seed, index in cases:
            if deadline is not None and time.monotonic() > deadline:
                break
            run_case(corpus, case_seed, index, root, report)
    report.seconds = time.perf_counter() - started
    return report


# --------------------------------------------------------------------------
# the tests


class CorpusTest(TempDirTestCase):
    def test_corpus_is_deterministic_and_opens_clean(self) -> None:
        one = build_corpus(str(self.tmp / "a"))
        two = build_corpus(str(self.tmp / "b"))
        self.assertEqual(one.seeds, two.seeds)
        self.assertIn(CURRENT, one.seeds["compacted"])
        self.assertIn(CKPT1, one.seeds["compacted"])
        for label, files in one.seeds.items():
            directory = str(self.tmp / "open" / label)
            materialise(directory, files)
            report = FuzzReport()
            outcome, problem = exercise(directory, FakeClock(2_000_000.0))
            self.assertEqual((outcome, problem), ("clean", None), label)
            self.assertFalse(report.failures)

    def test_a_zeroed_durable_sector_is_refused_however_many_zeros_follow(self) -> None:
        # The corpus is written by one handle with fsync on, so each batch was on disk
        # before the next was written: zeroing a sector that a whole later batch
        # follows loses acknowledged jobs. Opening must refuse and change nothing,
        # never cut the rest as a torn tail (a lost or misdirected write looks so).
        corpus = build_corpus(str(self.tmp / "z"))
        probed = 0
        for label, files in corpus.seeds.items():
            name = LOG1 if CURRENT in files else LOG0
            data = _trim(files[name])
            starts = [f.offset for f in frames(data)]
            for sector in range(0, len(data), 512):
                if sector + 512 > starts[-1] or sector + 512 <= FILE_HEADER.size:
                    continue  # no whole record after it, or only the file header in it
                damaged = {n: d for n, d in files.items() if not n.endswith(".ckpt")}
                zeroed = bytearray(files[name])
                zeroed[max(sector, FILE_HEADER.size):sector + 512] = bytes(
                    sector + 512 - max(sector, FILE_HEADER.size))
                damaged[name] = bytes(zeroed)
                directory = str(self.tmp / "zopen" / f"{label}-{sector}")
                materialise(directory, damaged)
                before = digest(directory)
                outcome, problem = exercise(directory, FakeClock(2_000_000.0))
                self.assertEqual((outcome, problem), ("corrupt", None),
                                 f"{label}: {name} with sector {sector} zeroed")
                self.assertEqual(digest(directory), before)
                probed += 1
        self.assertGreater(probed, 0)

    def test_cases_are_reproducible_one_by_one(self) -> None:
        corpus = build_corpus(str(self.tmp / "c"))
        for index in (0, 7, 123):
            self.assertEqual(make_case(corpus, 5, index), make_case(corpus, 5, index))


class FuzzTest(unittest.TestCase):
    def test_a_fixed_sample_of_damaged_queues_opens_clean_or_is_refused(self) -> None:
        report = fuzz(400, seed=1)
        self.assertEqual(report.failures, [], report.summary())
        self.assertGreaterEqual(report.cases, 400)
        self.assertGreater(report.outcomes["corrupt"], 20, report.summary())
        self.assertGreater(report.outcomes["clean"] + report.outcomes["repaired"], 20,
                           report.summary())
        self.assertLess(report.peak_memory, MEMORY_LIMIT)


if __name__ == "__main__":
    unittest.main()
