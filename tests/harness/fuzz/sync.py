"""The NAME.sync fuzzer: write the slots a real last writer would leave, damage them, open.

The theory is in tests/file/test_fuzz_sync.py; tools/torture/run.py runs `fuzz_sync(count=...)`.
"""

from __future__ import annotations

import os
import random
import shutil
import struct
import time
import zlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from harness.support import FakeClock, file_queue, store_of
from nobroker import NobrokerError
from nobroker.file.disk.fs import FileSystem

from .cases import fuzz_root, materialise
from .corpus import (
    CURRENT,
    LOG0,
    LOG1,
    NAME,
    Corpus,
    frames,
)

SYNC = f"{NAME}.sync"
SLOT = 64
_BODY = struct.Struct("<4sHH16sQQQQ")  # docs/FORMAT.md, "Group commit across processes"
WRITTEN, DURABLE = 0, 1


def slot(which: int, boot: bytes, generation: int, dev: int, ino: int, offset: int, *,
         magic: bytes = b"NBSY", version: int = 1, kind: int | None = None) -> bytes:
    """One 64-byte slot with a valid CRC (every field may be given wrong on purpose)."""
    body = _BODY.pack(magic, version, which if kind is None else kind, boot, generation,
                      dev, ino, offset)
    return body + struct.pack("<I", zlib.crc32(body)) + bytes(SLOT - _BODY.size - 4)


class CountingFileSystem(FileSystem):
    """The real file system, counting fdatasyncs per file name."""

    def __init__(self) -> None:
        self.syncs: Counter[str] = Counter()

    def fdatasync(self, fd: int) -> None:
        super().fdatasync(fd)
        self.syncs[os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))] += 1


# --------------------------------------------------------------------------
# a case: the log, then NAME.sync


@dataclass
class Identity:
    boot: bytes
    generation: int
    dev: int
    ino: int
    end: int  # the log's end as the last writer left it (before any cut)

    def slots(self, written: int | None = None, durable: int | None = None, **wrong: Any
              ) -> bytes:
        fields = (self.boot, self.generation, self.dev, self.ino)
        return (slot(WRITTEN, *fields, self.end if written is None else written, **wrong)
                + slot(DURABLE, *fields, self.end if durable is None else durable, **wrong))


def _log_name(files: dict[str, bytes]) -> str:
    return LOG1 if CURRENT in files else LOG0


def cut_log(files: dict[str, bytes], rng: random.Random) -> str:
    name = _log_name(files)
    data = files[name]
    found = frames(data)
    choice = rng.choice(("none", "none", "boundary", "inside"))
    if choice == "none" or len(found) < 2:
        return "log as written"
    frame = rng.choice(found[1:])  # keep the first record: a log that still says something
    if choice == "boundary":
        files[name] = data[:frame.offset]
        return f"log cut at the record boundary {frame.offset}"
    at = rng.randrange(frame.offset + 1, frame.offset + frame.size)
    files[name] = data[:at]
    return f"log cut inside a record at {at}"


BEFORE_OPEN = ("valid", "torn", "foreign", "bitflip", "truncated", "garbage", "swapped",
               "beyond", "missing", "directory", "fifo")
# While a handle has the file open, a CRC-valid slot of this log could be a peer's
# real claim (nothing tells a lie from it); what must be refused is damage.
WHILE_OPEN = ("valid", "torn", "foreign", "bitflip", "offset", "offset", "truncated",
              "garbage", "swapped")


def damage_sync(directory: str, ident: Identity, rng: random.Random, *,
                kinds: tuple[str, ...] = BEFORE_OPEN) -> str:
    """Write NAME.sync as the last writer left it, then damage it; says how."""
    path = os.path.join(directory, SYNC)
    good = ident.slots()
    kind = rng.choice(kinds)
    data: bytes | None = good
    what = kind
    if kind == "torn":
        most = ident.end * 2 + 1 if kinds is BEFORE_OPEN else ident.end + 1
        other = ident.slots(written=rng.randrange(most), durable=rng.randrange(most))
        cut = rng.randrange(1, 2 * SLOT)
        data = other[:cut] + good[cut:] if rng.random() < 0.5 else good[:cut] + other[cut:]
        what = f"torn at byte {cut}"
    elif kind == "foreign":
        field_name = rng.choice(("boot", "generation", "dev", "ino", "kind", "version",
                                 "magic"))
        changed = Identity(**vars(ident))
        wrong: dict[str, Any] = {}
        if field_name == "boot":
            changed.boot = bytes(rng.randrange(256) for _ in range(16))
        elif field_name in ("generation", "dev", "ino"):
            setattr(changed, field_name, getattr(ident, field_name) + rng.randrange(1, 5))
        elif field_name == "kind":
            wrong["kind"] = rng.choice((2, 7, 65535))
        elif field_name == "version":
            wrong["version"] = rng.choice((0, 2, 65535))
        else:
            wrong["magic"] = b"NBSX"
        data = changed.slots(durable=ident.end + rng.randrange(10**6), **wrong)
        what = f"foreign {field_name}, claiming past the end"
    elif kind == "bitflip":
        flipped = bytearray(good)
        spots = [rng.randrange(len(flipped) * 8) for _ in range(rng.randint(1, 4))]
        for bit in spots:
            flipped[bit // 8] ^= 1 << (bit % 8)
        data = bytes(flipped)
        what = f"bits {spots} flipped"
    elif kind == "offset":  # a bit of the durable claim flipped, the CRC not fixed
        flipped = bytearray(good)
        bit = rng.randrange(64)
        flipped[SLOT + _BODY.size - 8 + bit // 8] ^= 1 << (bit % 8)
        data = bytes(flipped)
        what = f"durable offset bit {bit} flipped"
    elif kind == "truncated":
        size = rng.randrange(len(good))
        data = good[:size]
        what = f"truncated to {size} bytes"
    elif kind == "garbage":
        data = rng.randbytes(rng.randrange(300))
        what = f"{len(data)} bytes of garbage"
    elif kind == "swapped":
        data = good[SLOT:] + good[:SLOT]
    elif kind == "beyond":
        data = ident.slots(written=ident.end + rng.randrange(1, 10**9),
                           durable=ident.end + rng.randrange(1, 10**9))
        what = "CRC-valid claims past the end"
    elif kind == "missing":
        data = None
    elif kind == "directory":
        os.mkdir(path)
        data = None
    elif kind == "fifo":
        os.mkfifo(path)
        data = None
    if data is not None:
        with open(path, "r+b" if os.path.isfile(path) else "wb") as handle:
            handle.write(data)  # in place: an open handle keeps its descriptor on it
            handle.truncate()
    return f"NAME.sync {what}"


def identity(directory: str, files: dict[str, bytes], end: int) -> Identity | None:
    boot = FileSystem().boot_id()
    if boot is None:
        return None
    generation = int(files[CURRENT]) if CURRENT in files else 0
    st = os.stat(os.path.join(directory, _log_name(files)))
    return Identity(boot, generation, st.st_dev, st.st_ino, end)


# --------------------------------------------------------------------------
# running one case


def _open(directory: str, fs: FileSystem | None = None, **options: Any) -> Any:
    extra = {} if fs is None else {"fs": fs}
    return file_queue(directory, NAME, clock=FakeClock(2_000_000.0), auto_compact=None,
                      **extra, **options)


def _baseline(directory: str) -> tuple[object, bool] | str:
    """What the log alone opens as (state, repaired), or the error's type name."""
    try:
        with _open(directory) as q:
            return store_of(q).state.fingerprint(), q.recovery.clean
    except NobrokerError as exc:
        return type(exc).__name__


def exercise_sync(directory: str, baseline: tuple[object, bool], rng: random.Random,
                  steps: list[str]) -> tuple[str, str | None]:
    """Open with share_fsyncs=True, damage NAME.sync again if it is a file (as a torn
    or stray write would, while the handle runs), and use the queue. Returns
    (outcome, problem or None)."""
    fs = CountingFileSystem()

    def log_syncs() -> int:
        return fs.syncs[LOG0] + fs.syncs[LOG1]

    try:
        q = _open(directory, fs, share_fsyncs=True)
    except NobrokerError as exc:
        return "refused", None if SYNC in str(exc) else f"an error that names no file: {exc}"
    try:
        if (store_of(q).state.fingerprint(), q.recovery.clean) != baseline:
            q.close()
            return "differs", "opened unlike the log without NAME.sync"
        q.stats()
        q.list_jobs()
        if os.path.isfile(os.path.join(directory, SYNC)) and rng.random() < 0.5:
            store = store_of(q)
            log_path = os.path.join(directory, f"{NAME}.{store.generation:06d}.log")
            st = os.stat(log_path)
            now = Identity(FileSystem().boot_id() or bytes(16), store.generation,
                           st.st_dev, st.st_ino, store.log_bytes)
            steps.append("then, open, " + damage_sync(directory, now, rng, kinds=WHILE_OPEN))
        calls: list[tuple[str, Any]] = [("enqueue", lambda: q.enqueue({"fuzz": "sync"})),
                                        ("enqueue_many", lambda: q.enqueue_many([1, 2])),
                                        ("lease", lambda: q.lease(1))]
        leased: list[Any] = []
        for what, call in calls:
            before = log_syncs()
            result = call()
            if what == "lease":
                leased = result
                if not leased:
                    break  # paused (the log was cut before its resume): nothing written
            if log_syncs() == before:
                return "trusted", f"{what} returned without an fdatasync of the log"
        if leased:
            before = log_syncs()
            q.ack(leased[0])
            if log_syncs() == before:
                return "trusted", "ack returned without an fdatasync of the log"
        after = store_of(q).state.fingerprint()
    except NobrokerError as exc:
        q.close()
        return "used-then-error", None if SYNC in str(exc) else f"error naming no file: {exc}"
    q.close()
    with _open(directory) as again:
        if store_of(again).state.fingerprint() != after:
            return "reopened", "reopen gives a different state"
    return "ok", None


@dataclass
class SyncFuzzReport:
    cases: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def summary(self) -> str:
        kinds = ", ".join(f"{k} {v}" for k, v in self.outcomes.most_common())
        return (f"{self.cases} NAME.sync fuzz cases in {self.seconds:.1f}s ({kinds}); "
                f"failures: {len(self.failures)}")


def run_sync_case(corpus: Corpus, seed: int, index: int, scratch: str,
                  report: SyncFuzzReport) -> None:
    rng = random.Random(f"sync:{seed}:{index}")
    label = rng.choice(sorted(corpus.seeds))
    files = dict(corpus.seeds[label])
    end = len(files[_log_name(files)])
    steps = [f"from {label}", cut_log(files, rng)]
    base_dir = os.path.join(scratch, f"s{seed}-{index}-alone")
    directory = os.path.join(scratch, f"s{seed}-{index}")
    materialise(base_dir, files)
    materialise(directory, files)
    try:
        baseline = _baseline(base_dir)
        ident = identity(directory, files, end)
        if ident is None:
            report.outcomes["no boot id"] += 1
            return
        steps.append(damage_sync(directory, ident, rng))
        if isinstance(baseline, str):
            outcome, problem = "log refused", None  # the log's own fuzzer covers these
        else:
            outcome, problem = exercise_sync(directory, baseline, rng, steps)
        report.cases += 1
        report.outcomes[outcome] += 1
        if problem is not None:
            report.failures.append(f"sync case ({seed}, {index}): {'; '.join(steps)}: "
                                   f"{outcome}: {problem}")
    except Exception as exc:  # any other exception is a finding, with the case's id
        report.failures.append(f"sync case ({seed}, {index}): {'; '.join(steps)}: crash: "
                               f"{type(exc).__name__}: {exc}"[:500])
    finally:
        shutil.rmtree(base_dir, ignore_errors=True)
        shutil.rmtree(directory, ignore_errors=True)


def fuzz_sync(count: int, seed: int = 0, *, deadline: float | None = None) -> SyncFuzzReport:
    """Run `count` NAME.sync cases of `seed`, or until `deadline` (time.monotonic())."""
    report = SyncFuzzReport()
    started = time.perf_counter()
    with fuzz_root("nobroker-fuzz-sync-") as (root, corpus):
        for index in range(count):
            if deadline is not None and time.monotonic() > deadline:
                break
            run_sync_case(corpus, seed, index, root, report)
    report.seconds = time.perf_counter() - started
    return report
