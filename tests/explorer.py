"""A crash-state explorer for nobroker: record a workload, build every crash state, check each.

Theory of operation (research note reliability.md, sections 3, 4 and 9):

1. **Record.** A workload (a function of a `Driver`) runs the real `Queue`
   in one process, in a scratch directory, with an injected fake clock and
   a seeded rng (one `random.Random` shared by the workload's handles). Every
   file operation of the storage layer goes through `RecordingFS`, a
   `nobroker.file.disk.fs.FileSystem` that performs the call on the real OS and
   appends an `Event` (with its bytes,
   a synthetic inode id, and the source lines that issued it) to a trace.
   The driver adds BEGIN and END (returned / raised / crashed) markers
   around every API call. Before and after every call a *shadow check*
   compares the recorder's mirror of the directory with the real one, so a
   write that bypassed the seam fails the run instead of being missed.

   The oracle is exact and needs no model of its own: after each call the
   driver replays every log file it wrote (its complete batches, with
   `nobroker.file.state.state.QueueState.apply_batch`) and keeps the fingerprint after
   *each* batch, keyed by position (batch, generation). Positions order by
   batch first, so a generation that lost batches copied into it sorts below
   them, and at equal batch the newer generation (a compaction's snapshot)
   is the later one. The handle's own memory is cross-checked against that
   replay after every call (memory must be the replay of its log).

2. **Build crash states.** `_Model` replays the trace event by event under a
   disk model (a *profile*) and keeps, per inode, the bytes durable as of its
   last fsync (the *floor*) and every later version of each 512-byte sector
   and of the size; per directory, the entries durable as of the last
   directory fsync and the directory operations since. A crash state is a
   choice, per unit, of how far it got:

   - `process` (kill -9, the OS survives): everything issued persists, in
     order; the write in flight at the crash may be any byte prefix.
   - `ext4ish`: per inode, any subset of the un-fsynced sector versions,
     and any un-fsynced size (a grown file may show zeros where its data did
     not land); directory operations persist as an in-order prefix; rename
     is atomic and "safe" (a renamed file's earlier data lands no later than
     the rename: ext4's auto_da_alloc, modelled for every rename). No "safe
     file flush": fsync of a file does not persist its name.
   - `weak` (ALICE's default model): as ext4ish, but directory operations
     persist as any subset, a rename is three independent micro-ops (drop
     the target entry, add it, drop the source), nothing orders data before
     a rename, and the un-written part of a grown file may hold garbage
     (random bytes) rather than zeros, a file that never had a durable byte
     included (`new_file_garbage`, on by default; off, such a file shows
     zeros). That case once hid a bug: generation 0 was created in place, so
     a crash could leave a 16-byte NAME.000000.log of junk, which opening
     refuses forever (it cannot tell junk from someone else's file) although
     no call had returned. With the option off by default the explorer never
     built that state; now generation 0 is created under a temporary name and
     renamed once its header is durable, and test_explorer_teeth plants the
     old creation back to show the explorer catches it.
   - `windows`: as ext4ish, but `fsync_dir` does nothing (there is none on
     Windows) and, as NTFS's ordered metadata journal does, a file's fsync
     persists every directory operation issued before it. The spec's
     Windows caveat follows: a compaction's flip (and the rescue an open
     may do) is durable only at the next fsync, so under `windows` a
     returned `compact`/`open` promises nothing about generations; every
     other call's durability is still checked.

   An fsync that failed (`RecordingFS.arm(..., "eio")`) follows the Linux
   "fsyncgate" behaviour: the pages stay in the cache, readable, but are
   marked clean and never reach the disk unless written again.

   The state space is bounded by strategies (reliability.md section 9.4);
   each crash point gets E1 floor, E2 ceiling, E3 every unit rolled back
   alone (and every unit alone on the floor), E4 every data write torn in
   order / with one sector missing / as a size change without its data
   (and, in `process`, byte cuts in each record header, at 1/3 and 2/3 of
   the payload and at its last byte; every byte with `byte_exhaustive`),
   E5 every subset (weak) or prefix (ext4ish) of the pending directory
   micro-ops when there are at most `max_dir_subset` of them (else
   prefixes, single omissions and random subsets), E6 = E4 x E5 when both
   are pending (compaction), E7 `random_subsets` seeded random choices;
   E3/E4/E6 are sampled down to `max_unit_variants` per crash point. A
   unit is the size of an inode, one 512-byte sector (a run of sectors
   that only ever held zeros, such as log preallocation, is one unit) or
   one directory micro-op. With an fsync per call at most one call's bytes
   are pending, so the count grows linearly with the workload (the 50-call
   workload: about 180 crash points, 1,000-4,000 states per profile, a few
   seconds). Identical states are opened once (content hash) and the
   outcome is checked against every crash point that produced it.

3. **Check** each unique state: materialise it in a scratch directory (on
   /dev/shm when present), open `Queue` on it, compare with the oracle:

   - I1 the recovered state is `history[L]` with `lo <= L <= hi`: `hi` is
     the last position whose bytes were issued before the crash, `lo` the
     last position written by a call that RETURNED (so a torn batch never
     shows, nothing never written appears, and the state is the replay of
     a batch-aligned prefix of the history);
   - I2 at a persistence point (just after a RETURNED marker) `L == hi`;
   - I3 no update of a returned call is lost (`L >= lo`; reported with the
     lost calls and their writes and fsyncs named; an acked job that is
     back is I4);
   - P2 `enqueue_many` all-or-nothing: of a batch's jobs, none or all show;
   - I5 after recovery a job leased with a live deadline is not handed out
     again, a wrong token cannot ack it (checked on sampled states, I9);
   - I6 opening raises nothing (every state here is one a crash produces);
   - I7 opening twice gives the same state and the second open writes
     nothing (the second open runs whenever the first one wrote anything;
     otherwise it would read the same files); I10 no file outside `NAME.*`;
   - I8 (compound) the recovery of sampled repaired states is itself
     recorded and crashed (weak model); every state of it recovers to the
     same state;
   - I9 (continuation, sampled; always at persistence points) after
     recovery: lease every ready job, enqueue X, lease and ack it, enqueue
     Y, reopen: X gone, Y present;
   - E8 (rot, a corruption probe, not a crash state): bits of the type,
     length and CRC fields of sampled records of the final log flipped, with
     the log ending at that record's batch or one batch later; opening must
     raise `CorruptLogError` and modify nothing, or give a state of the
     history (damage in the last batch reads as a torn tail). And each
     512-byte sector holding a sampled record zeroed (a lost or misdirected
     write) where the call that wrote the first damaged batch had returned,
     fsynced, before its handle wrote a batch that lies wholly after the
     sector: opening must refuse and modify nothing.

   nobroker's network-file-system probe is stubbed while exploring (it
   reads /proc on every open and has nothing to do with crash states).

4. **Report** figures and violations; each violation names the crash point,
   the strategy, the operations the state dropped and the nobroker source
   lines that issued them (as ALICE does).

Public API (tools/torture.py calls these with bigger bounds):

    explore(workload, profile="weak", bounds=None, *, name=None) -> Report
        workload: a name in WORKLOADS or a callable taking a Driver;
        profile: "process" | "ext4ish" | "weak" | "windows", or a sequence
        of them (the workload is recorded once and explored per profile);
        bounds: a Bounds (strategies, random_subsets, max_dir_subset,
        max_unit_variants, byte_exhaustive, continuation, compound,
        compound_states, rot, rot_records, new_file_garbage, seed).
        Report: .ok, .total_violations, .violations (the first 50),
        .stats[profile] (crash_points, states, unique, violations,
        seconds), .compound_states, .continued_states, .rot_states,
        .merge(other), .summary().
    WORKLOADS: dict name -> workload; random_workload(seed, length);
    ace_workloads(length) -> {name: workload}; Bounds.torture(), Bounds.quick().
    long_run(seed=0, ace_length=3, random_workloads=8, random_length=300,
             profiles=PROFILES, deadline=None, progress=print) -> Report:
        the long run for `make.py torture`: every scenario under
        Bounds.torture(), every ACE sequence up to ace_length, and long random
        workloads; report.summary() prints the figures to quote.
    crash_states(events, profile) -> [ {name: bytes} ]: the states of a
        hand-written trace (for unit tests of the disk models).
    save_fixture / load_fixture / check_fixture / iter_fixtures: the
        regression corpus in tests/crash_corpus.

    (tests/ must be on sys.path: the module imports tests/support.py.)

What it does not model: lying devices and bit rot in data that was once
durable (only the E8 probe); reads of not-yet-durable data reported to a
caller (P8); true concurrency (handles are serialised in one process, so
group commit's overlapping batches are exercised through a writer that died
before its fsync and through fsync=False, not through racing threads;
group commit across processes through `before_next_claim`, which lets one
handle's whole call run just before another takes NAME.sync's flock, whose
exclusion itself is not modelled: tests/file/test_shared_sync.py's real
processes own it); NAME.sync after a power cut only as another boot's (a
crash state opens with RECOVERY_BOOT, so the recording's slots prove
nothing, as the boot id makes them on a real reboot); the lock file's
identity (the concurrency tests own that); a crash in the
middle of an fsync; Linux's per-descriptor fsync error reporting (errseq: an
injected EIO reaches only the failing call); sector sizes other than 512
(a 4096-byte device tears less finely, so 512 is the stricter case); the
queue directory's own creation (it exists beforehand); and, being bounded,
a state that only a specific large subset of pending units produces (the
torture run's random subsets lower, not remove, that risk).
"""

from __future__ import annotations

import contextlib
import errno as errno_mod
import hashlib
import json
import logging
import os
import random
import re
import shutil
import struct
import sys
import tempfile
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import support  # noqa: F401  (puts src/ on sys.path)
from support import FakeClock, file_queue, store_of

from nobroker import CorruptLogError, Job, JobState, NobrokerError, NotLeasedError, Queue
from nobroker.file.disk.fs import FileSystem

__all__ = [
    "PROFILES", "SECTOR", "WORKLOADS", "Bounds", "Driver", "Event", "RecordingFS",
    "Report", "SimulatedCrash", "Violation", "ace_workloads", "explore", "random_workload",
    "record", "load_fixture", "check_fixture", "crash_states", "iter_fixtures", "long_run",
]

SECTOR = 512
RECORDING_BOOT = b"explorer-record!"  # what FileSystem.boot_id says while recording
RECOVERY_BOOT = b"explorer-reboot!"  # ... and in the boot after the crash
PROFILES = ("process", "ext4ish", "weak", "windows")
QUEUE = "q"
_HERE = os.path.abspath(__file__)
_LOG_NAME = re.compile(r"[A-Za-z0-9_-]+\.(\d{6,})\.log")
_SKIP_FRAMES = ("unittest/mock.py", "contextlib.py", "functools.py")


class SimulatedCrash(BaseException):
    """The process 'died' here (a BaseException, so library cleanup code cannot eat it)."""


# ==========================================================================
# 1. Recording


@dataclass(slots=True)
class Event:
    """One recorded file-system call or API marker."""

    index: int
    kind: str  # create write trunc fsync fsync_failed dirsync rename unlink | begin end
    ino: int = -1
    name: str = ""
    name2: str = ""
    offset: int = 0
    data: bytes = b""
    call: int = -1
    where: tuple[str, ...] = ()
    detail: str = ""

    def describe(self) -> str:
        what = {"write": f"pwrite {len(self.data)}B @{self.offset} to {self.name}",
                "trunc": f"ftruncate {self.name} to {self.offset}",
                "fsync": f"fsync {self.name}", "fsync_failed": f"fsync {self.name} -> EIO",
                "create": f"create {self.name}", "unlink": f"unlink {self.name}",
                "rename": f"rename {self.name} -> {self.name2}", "dirsync": "fsync(dir)",
                }.get(self.kind, f"{self.kind} {self.detail}")
        where = f"  [{' <- '.join(self.where[:3])}]" if self.where else ""
        return f"#{self.index} {what}{where}"


@dataclass
class _Fault:
    kind: str  # "write" (pwrite) | "fsync" (fsync or fdatasync) | "dirsync" | "trunc" | ...
    skip: int
    action: str  # "eio" | "enospc" | "crash"
    keep: int | None = None  # for writes: bytes written before the fault strikes


class RecordingFS(FileSystem):
    """A FileSystem that does the real call and records it, for files in `root`.

    Calls on other paths pass through unrecorded. `arm()` injects a fault
    (EIO, ENOSPC, or a SimulatedCrash after writing a prefix) at the n-th
    later call of a kind. After a SimulatedCrash the recorder is frozen:
    every further mutating call raises SimulatedCrash again (a dead process
    writes nothing) until the driver thaws it.
    """

    def __init__(self, root: str, *, adopt: bool = False) -> None:
        self.root = os.path.abspath(root)
        self.events: list[Event] = []
        self.names: dict[str, int] = {}  # mirror of the directory: name -> inode
        self.files: dict[int, bytearray] = {}  # mirror of each inode's bytes
        self.fds: dict[int, int] = {}
        self.initial: dict[str, int] = {}
        self.call = -1
        self.frozen = False
        self._faults: list[_Fault] = []
        self._before_sync: list[Callable[[], None]] = []  # run just before the next fsync
        self._before_claim: list[Callable[[], None]] = []  # ... the next NAME.sync flock
        self._next_ino = 1
        if adopt:  # every file already present is durable: the start of a compound trace
            for name in sorted(os.listdir(self.root)):
                path = os.path.join(self.root, name)
                if os.path.isfile(path) and not os.path.islink(path):
                    ino = self._new_inode()
                    with open(path, "rb") as f:
                        self.files[ino] = bytearray(f.read())
                    self.names[name] = ino
            self.initial = dict(self.names)

    # -- bookkeeping --------------------------------------------------------

    def _new_inode(self) -> int:
        ino = self._next_ino
        self._next_ino += 1
        self.files[ino] = bytearray()
        return ino

    def _name(self, path: str) -> str | None:
        path = os.path.abspath(path)
        return os.path.basename(path) if os.path.dirname(path) == self.root else None

    def _emit(self, kind: str, **fields: Any) -> Event:
        event = Event(len(self.events), kind, call=self.call, where=_where(), **fields)
        self.events.append(event)
        return event

    def _ino_name(self, ino: int) -> str:
        for name, number in self.names.items():
            if number == ino:
                return name
        return f"<inode {ino}>"

    def mark(self, kind: str, detail: str) -> Event:
        event = Event(len(self.events), kind, call=self.call, detail=detail)
        self.events.append(event)
        return event

    # -- faults -------------------------------------------------------------

    def arm(self, kind: str, action: str, *, skip: int = 0, keep: int | None = None) -> None:
        """Fail the (skip+1)-th later `kind` call with `action` ("eio", "enospc", "crash")."""
        self._faults.append(_Fault(kind, skip, action, keep))

    def _fault(self, kind: str) -> _Fault | None:
        if self.frozen:
            raise SimulatedCrash("the process is dead")
        for fault in self._faults:
            if fault.kind == kind:
                if fault.skip:
                    fault.skip -= 1
                    return None
                self._faults.remove(fault)
                return fault
        return None

    @staticmethod
    def _raise(action: str) -> None:
        if action == "crash":
            raise SimulatedCrash("crash injected")
        code = errno_mod.ENOSPC if action == "enospc" else errno_mod.EIO
        raise OSError(code, os.strerror(code))

    # -- the FileSystem seam ------------------------------------------------

    def open(self, path: str, flags: int, mode: int = 0o600) -> int:
        name = self._name(path)
        if name is None or not flags & (os.O_CREAT | os.O_TRUNC | os.O_WRONLY | os.O_RDWR):
            fd = super().open(path, flags, mode)
            if name is not None and name in self.names:
                self.fds[fd] = self.names[name]
            return fd
        fault = self._fault("open")
        if fault:
            self._raise(fault.action)
        existed = name in self.names
        fd = super().open(path, flags, mode)
        if not existed:
            ino = self._new_inode()
            self.names[name] = ino
            self._emit("create", ino=ino, name=name)
        else:
            ino = self.names[name]
            if flags & os.O_TRUNC and self.files[ino]:
                del self.files[ino][:]
                self._emit("trunc", ino=ino, name=name, offset=0)
        self.fds[fd] = ino
        return fd

    def close(self, fd: int) -> None:
        self.fds.pop(fd, None)
        super().close(fd)

    def pwrite(self, fd: int, data: bytes, offset: int) -> int:
        ino = self.fds.get(fd)
        if ino is None:
            return super().pwrite(fd, data, offset)
        fault = self._fault("write")
        if fault is not None:
            if fault.keep:
                self._write(fd, ino, data[:fault.keep], offset)
            if fault.action == "crash":
                self.frozen = True
            self._raise(fault.action)
        return self._write(fd, ino, data, offset)

    def _write(self, fd: int, ino: int, data: bytes, offset: int) -> int:
        written = super().pwrite(fd, data, offset)
        data = bytes(data[:written])
        buf = self.files[ino]
        if len(buf) < offset:
            buf.extend(bytes(offset - len(buf)))
        buf[offset:offset + len(data)] = data
        self._emit("write", ino=ino, name=self._ino_name(ino), offset=offset, data=data)
        return written

    def _sync(self, fd: int) -> None:
        ino = self.fds.get(fd)
        if ino is None:
            super().fsync(fd)
            return
        if self._before_sync:  # another writer gets in between this write and its fsync
            self._before_sync.pop(0)()
        fault = self._fault("fsync")
        if fault is not None:
            if fault.action == "crash":
                self.frozen = True
            else:
                self._emit("fsync_failed", ino=ino, name=self._ino_name(ino))
            self._raise(fault.action)
        # No real fsync: the trace is the durability model; the scratch is tmpfs anyway.
        self._emit("fsync", ino=ino, name=self._ino_name(ino))

    def fsync(self, fd: int) -> None:
        self._sync(fd)

    def fdatasync(self, fd: int) -> None:
        self._sync(fd)

    def fsync_dir(self, path: str) -> None:
        if os.path.abspath(path) != self.root:
            return
        fault = self._fault("dirsync")
        if fault is not None:
            if fault.action == "crash":
                self.frozen = True
            self._raise(fault.action)
        self._emit("dirsync")

    def ftruncate(self, fd: int, length: int) -> None:
        ino = self.fds.get(fd)
        if ino is None:
            super().ftruncate(fd, length)
            return
        fault = self._fault("trunc")
        if fault is not None:
            self._raise(fault.action)
        super().ftruncate(fd, length)
        buf = self.files[ino]
        if length < len(buf):
            del buf[length:]
        else:
            buf.extend(bytes(length - len(buf)))
        self._emit("trunc", ino=ino, name=self._ino_name(ino), offset=length)

    def replace(self, src: str, dst: str) -> None:
        a, b = self._name(src), self._name(dst)
        if a is None or b is None:
            super().replace(src, dst)
            return
        fault = self._fault("rename")
        if fault is not None:
            self._raise(fault.action)
        super().replace(src, dst)
        self.names[b] = self.names.pop(a)
        self._emit("rename", ino=self.names[b], name=a, name2=b)

    def unlink(self, path: str) -> None:
        name = self._name(path)
        if name is None:
            super().unlink(path)
            return
        fault = self._fault("unlink")
        if fault is not None:
            self._raise(fault.action)
        super().unlink(path)
        ino = self.names.pop(name)
        self._emit("unlink", ino=ino, name=name)

    def mkdir(self, path: str, mode: int = 0o700) -> None:
        if self.frozen:
            raise SimulatedCrash("the process is dead")
        super().mkdir(path, mode)

    def lock(self, fd: int) -> None:
        # NAME.sync's flock. Handles run serialised in one thread, so a real flock
        # would only deadlock a call made from inside another's claim; there is
        # nothing to exclude. The hooks let another handle's call in just before.
        if self._before_claim:
            self._before_claim.pop(0)()
        if self.frozen:
            raise SimulatedCrash("the process is dead")

    def unlock(self, fd: int) -> None:
        pass  # a dead process's flock is dropped by the kernel: never refused

    def boot_id(self) -> bytes | None:
        return RECORDING_BOOT  # the same on every run: a trace's bytes stay reproducible

    # -- the shadow check ---------------------------------------------------

    def shadow_check(self, ignore: Callable[[str], bool]) -> str | None:
        """None if the mirror equals the real directory, else what differs."""
        real = {n for n in os.listdir(self.root) if not ignore(n)}
        mine = {n for n in self.names if not ignore(n)}
        if real != mine:
            return f"names differ: only on disk {sorted(real - mine)}, only recorded " \
                   f"{sorted(mine - real)}"
        for name in sorted(real):
            with open(os.path.join(self.root, name), "rb") as f:
                if f.read() != self.files[self.names[name]]:
                    return f"bytes of {name} differ from what was recorded"
        return None


def _where() -> tuple[str, ...]:
    """The source lines (outside this module) that led to the current call."""
    frame = sys._getframe(2)
    out: list[str] = []
    while frame is not None and len(out) < 6:
        filename = frame.f_code.co_filename
        if filename == _HERE:
            if out:
                break
        elif not filename.endswith(_SKIP_FRAMES):
            out.append(f"{os.path.basename(filename)}:{frame.f_lineno} "
                       f"{frame.f_code.co_qualname}")
        frame = frame.f_back  # type: ignore[assignment]
    return tuple(out)


def _log_inodes(events: Iterable[Event]) -> set[int]:
    """Inodes that are, at some point, named like a log generation (NAME.NNNNNN.log)."""
    out = set()
    for event in events:
        if (event.kind == "create" and _LOG_NAME.fullmatch(event.name)) or \
                (event.kind == "rename" and _LOG_NAME.fullmatch(event.name2)):
            out.add(event.ino)
    return out


def _frames(data: bytes, start: int) -> Iterator[tuple[int, int, int, dict[str, Any]]]:
    """(type byte, offset, size, record) of each well-formed frame from `start` on."""
    pos = start
    while pos + 9 <= len(data):
        length, type_byte, _ = struct.unpack_from("<IBI", data, pos)
        if not length or not type_byte & 0x7F or pos + 9 + length > len(data):
            return
        try:
            record = json.loads(data[pos + 9:pos + 9 + length])
        except ValueError:
            return
        if not isinstance(record, dict) or type(record.get("b")) is not int:
            return
        yield type_byte, pos, 9 + length, record
        pos += 9 + length


def _complete_batches(data: bytes, start: int) -> Iterator[tuple[int, list[tuple[int, dict[
        str, Any], int, int]]]]:
    """(end offset, records) of each complete batch from `start` on, as replay takes them."""
    batch: list[tuple[int, dict[str, Any], int, int]] = []
    for type_byte, pos, size, record in _frames(data, start):
        batch.append((type_byte & 0x7F, record, pos, size))
        if not type_byte & 0x80:
            yield pos + size, batch
            batch = []


def _generation(data: bytes | bytearray) -> int | None:
    if len(data) < 16 or data[:8] != b"NOBROKER":
        return None
    return int(struct.unpack_from("<I", data, 10)[0])


def _scan_frames(data: bytes) -> list[tuple[int, int, dict[str, Any]]]:
    """(type, offset, record) of each whole frame at the start of `data` (no CRC check).

    Independent of nobroker.file.log.framing on purpose: mutation tests patch that.
    """
    out = []
    pos = 0
    while pos + 9 <= len(data):
        length, type_byte, _ = struct.unpack_from("<IBI", data, pos)
        if not length or pos + 9 + length > len(data):
            break
        try:
            record = json.loads(data[pos + 9:pos + 9 + length])
        except ValueError:
            break
        if isinstance(record, dict) and type(record.get("b")) is int:
            out.append((type_byte & 0x7F, pos, record))
        pos += 9 + length
    return out


# ==========================================================================
# 2. Driving a workload


EPOCH = 1_700_000_000.0  # where a workload's fake clock starts


@dataclass
class Call:
    """One API call of the workload and what the oracle needs to know about it."""

    index: int
    handle: int
    op: str
    args: str
    begin: int  # event index of its BEGIN marker
    end: int = -1
    outcome: str = ""  # returned | raised | crashed
    result: str = ""
    batches: tuple[tuple[int, int], ...] = ()  # positions (batch, generation) it wrote
    enqueued: tuple[str, ...] = ()  # job ids its ENQUEUE records carried
    acked: tuple[str, ...] = ()
    durable: bool = True  # the handle fsyncs before returning
    now: float = 0.0

    def describe(self) -> str:
        return f"call {self.index} h{self.handle}.{self.op}({self.args}) -> {self.outcome}" \
               f"{' ' + self.result if self.result else ''}"


class Driver:
    """What a workload talks to: opens handles, makes calls, moves the clock, arms faults."""

    def __init__(self, fs: RecordingFS, directory: str, **queue_kwargs: Any) -> None:
        self.fs = fs
        self.directory = directory
        self.clock = FakeClock(EPOCH)
        # One rng for every handle, as one process has (job ids, jitter, nonces): record()
        # seeds it, so that a workload writes the same bytes every time.
        self.rng = random.Random(0)
        self.queue_kwargs = {"auto_compact": None, **queue_kwargs}
        self.handles: list[Queue | None] = []
        self.dead: set[int] = set()  # crashed (a SimulatedCrash) or closed: unusable
        self.closed: set[int] = set()  # closed by the workload: nothing left to clean up
        self.calls: list[Call] = []
        # The oracle: position (batch, generation) -> fingerprints of the replay there.
        # Positions order by batch first: a new generation that lost batches copied into
        # it sorts below them; at equal batch, the newer generation is the later one.
        self.history: dict[tuple[int, int], set[tuple[object, ...]]] = {
            (0, 0): {_EMPTY_FINGERPRINT}}
        self.problems: list[str] = []
        self._replays: dict[int, tuple[bytes, int, Any]] = {}

    # -- the workload's vocabulary -------------------------------------------

    def open(self, **kwargs: Any) -> int:
        """Open a new handle; returns its number (or -1 if opening raised)."""
        options = {**self.queue_kwargs, **kwargs}
        handle = len(self.handles)
        self.handles.append(None)
        queue = self._run(handle, "open", (), options,
                          lambda: file_queue(self.directory, QUEUE, clock=self.clock,
                                             rng=self.rng, fs=self.fs, **options))
        if isinstance(queue, Queue):
            self.handles[handle] = queue
            self._observe(self.calls[-1], queue)
            return handle
        return -1

    def call(self, handle: int, op: str, *args: Any, **kwargs: Any) -> Any:
        """Call `op` on a handle; returns its result, or the exception it raised."""
        queue = self.handles[handle]
        if queue is None or handle in self.dead:
            return QueueClosedErrorStub()
        result = self._run(handle, op, args, kwargs, lambda: getattr(queue, op)(*args, **kwargs))
        self._observe(self.calls[-1], queue)
        return result

    def advance(self, seconds: float) -> None:
        self.clock.now += seconds

    def close(self, handle: int) -> None:
        queue = self.handles[handle]
        if queue is not None and handle not in self.dead:
            self._run(handle, "close", (), {}, queue.close)
            self.closed.add(handle)
        self.dead.add(handle)

    def crash_next(self, kind: str, *, skip: int = 0, keep: int | None = None) -> None:
        """The next `kind` call ("write", "fsync", ...) kills the process (keep: bytes first)."""
        self.fs.arm(kind, "crash", skip=skip, keep=keep)

    def fail_next(self, kind: str, *, skip: int = 0, error: str = "eio",
                  keep: int | None = None) -> None:
        self.fs.arm(kind, error, skip=skip, keep=keep)

    def before_next_fsync(self, action: Callable[[], None]) -> None:
        """Run `action` (other calls) when the next fsync is about to start: group commit."""
        self.fs._before_sync.append(action)

    def before_next_claim(self, action: Callable[[], None]) -> None:
        """Run `action` (other calls) when a handle is about to take NAME.sync's flock,
        after its batch was written: group commit across processes."""
        self.fs._before_claim.append(action)

    # -- internals ------------------------------------------------------------

    def _run(self, handle: int, op: str, args: Sequence[Any], kwargs: dict[str, Any],
             thunk: Callable[[], Any]) -> Any:
        self.clock.now += 0.001  # every call at its own instant
        index = len(self.calls)
        text = ", ".join([_short(a) for a in args] + [f"{k}={_short(v)}" for k, v in
                                                      kwargs.items()])
        problem = self.fs.shadow_check(_ignored_name)
        if problem:
            self.problems.append(f"before call {index} ({op}): {problem}")
        outer = self.fs.call  # a call made from inside another's fsync (group commit)
        self.fs.call = index
        begin = self.fs.mark("begin", f"call {index} {op}")
        call = Call(index, handle, op, text, begin.index, now=self.clock.now)
        queue = self.handles[handle] if handle < len(self.handles) else None
        call.durable = bool(queue.fsync) if queue is not None else bool(
            kwargs.get("fsync", self.queue_kwargs.get("fsync", True)))
        self.calls.append(call)
        try:
            result = thunk()
            call.outcome = "returned"
        except SimulatedCrash:
            self.fs.frozen = False
            self.fs._faults.clear()
            self.dead.add(handle)
            call.outcome = "crashed"
            result = SimulatedCrash()
        except (NobrokerError, ValueError, TypeError, OSError) as exc:
            call.outcome = "raised"
            call.result = type(exc).__name__
            result = exc
        call.end = self.fs.mark("end", f"call {index} {call.outcome}").index
        self.fs.call = outer
        self._classify(call)
        problem = self.fs.shadow_check(_ignored_name)
        if problem:
            self.problems.append(f"after {call.describe()}: {problem}")
        return result

    def _classify(self, call: Call) -> None:
        batches: set[tuple[int, int]] = set()
        enqueued: list[str] = []
        acked: list[str] = []
        logs = _log_inodes(self.fs.events)
        touched = set()
        for event in self.fs.events[call.begin:call.end]:
            if event.kind in ("write", "trunc") and event.ino in logs:
                touched.add(event.ino)
            if event.kind != "write" or event.ino not in logs or event.offset < 16 or \
                    event.call != call.index:  # not a call made from inside this one
                continue
            generation = _generation(self.fs.files[event.ino])
            for rtype, _, record in _scan_frames(event.data):
                batches.add((record["b"], generation or 0))
                if rtype == 1 and isinstance(record.get("id"), str):
                    enqueued.append(record["id"])
                elif rtype == 3 and isinstance(record.get("id"), str):
                    acked.append(record["id"])
        call.batches = tuple(sorted(batches))
        call.enqueued = tuple(enqueued)
        call.acked = tuple(acked)
        for ino in sorted(touched):
            self._replay(ino)

    def _replay(self, ino: int) -> None:
        """Apply the log's new complete batches to the oracle's own replay of it."""
        from nobroker.file.state.state import QueueState
        data = bytes(self.fs.files[ino])
        generation = _generation(data)
        if generation is None:
            return
        prefix, offset, state = self._replays.get(ino, (b"", 16, None))
        if state is None or data[:offset] != prefix:  # new, or cut and rewritten
            offset, state = 16, QueueState()
        for end, batch in _complete_batches(data, offset):
            try:
                state.apply_batch(batch)
            except ValueError as exc:
                self.problems.append(f"the log holds a batch replay rejects at {offset}: {exc}")
                break
            self.history.setdefault((batch[0][1]["b"], generation), set()).add(
                state.fingerprint())
            offset = end
        self._replays[ino] = (data[:offset], offset, state)

    def _observe(self, call: Call, queue: Queue) -> None:
        """Cross-check: the handle's memory must be the replay of what it read and wrote."""
        store = store_of(queue)
        state, log = store.state, store.log
        if log is None or call.outcome != "returned" or store.poisoned:
            return
        position = (state.last_batch, log.generation)
        known = self.history.get(position)
        if known is not None and state.fingerprint() not in known:
            self.problems.append(f"after {call.describe()}: the handle's memory is not the "
                                 f"replay of its log at {position}")

    def finish(self) -> None:
        for handle, queue in enumerate(self.handles):
            if queue is not None and handle not in self.closed:
                with contextlib.suppress(Exception):
                    if handle in self.dead:
                        store = store_of(queue)
                        store.close(checkpoint=False)  # a dead process saves no checkpoint
                    else:
                        queue.close()


class QueueClosedErrorStub(Exception):
    """Returned for calls on a handle the workload already lost."""


def _short(value: Any) -> str:
    if isinstance(value, Job):
        return f"Job({value.id[:6]},tok={value.token})"
    if isinstance(value, list):
        return f"[{len(value)} items]"
    text = repr(value)
    return text if len(text) <= 24 else text[:21] + "..."


def _ignored_name(name: str) -> bool:
    return name.endswith(".wake")


def _empty_fingerprint() -> tuple[object, ...]:
    from nobroker.file.state.state import QueueState
    return QueueState().fingerprint()


_EMPTY_FINGERPRINT = _empty_fingerprint()


@dataclass
class Trace:
    """A recorded workload: the events, the calls and the oracle's history."""

    name: str
    events: list[Event]
    calls: list[Call]
    history: dict[tuple[int, int], set[tuple[object, ...]]]
    initial: dict[str, bytes] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0
    queue_kwargs: dict[str, Any] = field(default_factory=dict)


Workload = Callable[[Driver], None]


def record(workload: Workload, directory: str, *, seed: int = 0, name: str = "") -> Trace:
    """Run `workload` in `directory` (created if missing) and return its trace."""
    os.makedirs(directory, exist_ok=True)
    started = time.perf_counter()
    fs = RecordingFS(directory)
    driver = Driver(fs, directory)
    driver.rng.seed(seed)
    try:
        workload(driver)
    finally:
        driver.finish()
    return Trace(name or getattr(workload, "__name__", "workload"), fs.events, driver.calls,
                 driver.history, problems=driver.problems,
                 seconds=time.perf_counter() - started, queue_kwargs=driver.queue_kwargs)


# ==========================================================================
# 3. Disk models


@dataclass(slots=True)
class _Version:
    event: int
    size: int
    sectors: dict[int, bytes]
    zero: bool  # wrote only zero bytes (preallocation)


@dataclass(slots=True)
class _DirOp:
    kind: str  # link | unlink | rename (rename only in atomic profiles)
    name: str
    ino: int
    event: int
    name2: str = ""


@dataclass(frozen=True, slots=True)
class _Unit:
    """Something that can independently be persisted or not at a crash point."""

    kind: str  # size | data | dir | dirprefix
    ino: int
    key: int  # group index (data), micro-op index (dir)
    options: tuple[int, ...]  # version indices (-1 = floor); the last is the ceiling
    sectors: tuple[int, ...] = ()


@dataclass(slots=True)
class _Choice:
    """A crash state as a choice per unit; anything absent is at its ceiling."""

    label: str
    picks: dict[tuple[str, int, int], int] = field(default_factory=dict)
    fill: str = "zero"
    cut: tuple[int, int, bytes] | None = None  # (ino, offset, partial data): a byte-torn write


class _Model:
    """The disk under one profile after a prefix of the trace."""

    def __init__(self, profile: str, initial: dict[str, int], files: dict[int, bytes]) -> None:
        self.profile = profile
        self.cache: dict[int, bytearray] = {ino: bytearray(data) for ino, data in files.items()}
        self.floor: dict[int, bytes] = dict(files)
        self.versions: dict[int, list[_Version]] = {}
        self.dcache: dict[str, int] = dict(initial)
        self.durable: dict[str, int] = dict(initial)
        self.pending: list[_DirOp] = []
        self.stamp = 0  # bumps whenever the set of possible states may change
        self.new_file_garbage = False

    def apply(self, event: Event) -> None:
        kind = event.kind
        if kind in ("begin", "end"):
            return
        self.stamp += 1
        if kind == "create":
            self.cache[event.ino] = bytearray()
            self.floor.setdefault(event.ino, b"")
            self.dcache[event.name] = event.ino
            self.pending.append(_DirOp("link", event.name, event.ino, event.index))
        elif kind == "write":
            self._write(event)
        elif kind == "trunc":
            buf = self.cache[event.ino]
            old = len(buf)
            touched: dict[int, bytes] = {}
            if event.offset < old:
                del buf[event.offset:]
                if event.offset % SECTOR:
                    s = event.offset // SECTOR
                    touched[s] = bytes(buf[s * SECTOR:]).ljust(SECTOR, b"\0")
            else:
                buf.extend(bytes(event.offset - old))
            self.versions.setdefault(event.ino, []).append(
                _Version(event.index, event.offset, touched, True))
        elif kind == "fsync":
            self._persist(event.ino)
            if self.profile == "windows":  # NTFS: the journal flush carries earlier dir ops
                self._dirsync()
        elif kind == "fsync_failed":
            self.versions.pop(event.ino, None)  # marked clean, never written: lost
        elif kind == "dirsync":
            if self.profile != "windows":
                self._dirsync()
        elif kind == "rename":
            ino = self.dcache.pop(event.name)
            replaced = self.dcache.get(event.name2)
            self.dcache[event.name2] = ino
            if self.profile == "weak":
                if replaced is not None:
                    self.pending.append(_DirOp("unlink", event.name2, replaced, event.index))
                self.pending.append(_DirOp("link", event.name2, ino, event.index))
                self.pending.append(_DirOp("unlink", event.name, ino, event.index))
            else:
                self.pending.append(_DirOp("rename", event.name, ino, event.index, event.name2))
        elif kind == "unlink":
            self.dcache.pop(event.name, None)
            self.pending.append(_DirOp("unlink", event.name, event.ino, event.index))

    def _write(self, event: Event) -> None:
        buf = self.cache[event.ino]
        end = event.offset + len(event.data)
        if len(buf) < end:
            buf.extend(bytes(end - len(buf)))
        buf[event.offset:end] = event.data
        touched = {}
        if event.data:
            for s in range(event.offset // SECTOR, (end - 1) // SECTOR + 1):
                touched[s] = bytes(buf[s * SECTOR:(s + 1) * SECTOR]).ljust(SECTOR, b"\0")
        self.versions.setdefault(event.ino, []).append(
            _Version(event.index, len(buf), touched, not any(event.data)))

    def _persist(self, ino: int, before: int | None = None) -> None:
        """Move the inode's pending versions (issued before event `before`) to its floor."""
        versions = self.versions.pop(ino, [])
        if before is not None:
            kept = [v for v in versions if v.event >= before]
            versions = [v for v in versions if v.event < before]
            if kept:
                self.versions[ino] = kept
            if not versions:
                return
            size = versions[-1].size
        else:
            size = len(self.cache[ino])
        floor = bytearray(self.floor.get(ino, b"")[:size])
        floor.extend(bytes(size - len(floor)))
        for version in versions:
            for s, content in version.sectors.items():
                start = s * SECTOR
                if start < size:
                    floor[start:min(start + SECTOR, size)] = content[:min(SECTOR, size - start)]
        self.floor[ino] = bytes(floor)

    def _dirsync(self) -> None:
        if self.profile in ("ext4ish", "windows"):  # safe rename: the data goes first
            for op in self.pending:
                if op.kind == "rename":
                    self._persist(op.ino, before=op.event)
        self.durable = dict(self.dcache)
        self.pending = []

    # -- units and states ---------------------------------------------------

    def live_inodes(self) -> set[int]:
        inodes = set(self.durable.values()) | set(self.dcache.values())
        inodes.update(op.ino for op in self.pending)
        return inodes

    def units(self) -> list[_Unit]:
        units: list[_Unit] = []
        live = self.live_inodes()
        for ino, versions in sorted(self.versions.items()):
            if not versions or ino not in live:
                continue
            sizes = [-1]
            last = len(self.floor.get(ino, b""))
            for i, version in enumerate(versions):
                if version.size != last:
                    sizes.append(i)
                    last = version.size
            if len(sizes) > 1:
                units.append(_Unit("size", ino, 0, tuple(sizes)))
            touching: dict[int, list[int]] = {}
            zero_only: dict[int, bool] = {}
            for i, version in enumerate(versions):
                for s, content in version.sectors.items():
                    touching.setdefault(s, []).append(i)
                    zero_only[s] = zero_only.get(s, True) and not any(content)
            groups: list[tuple[list[int], tuple[int, ...]]] = []
            for s in sorted(touching):
                options = (-1, *touching[s])
                if (zero_only[s] and groups and groups[-1][1] == options
                        and zero_only.get(groups[-1][0][-1], False)
                        and groups[-1][0][-1] == s - 1):
                    groups[-1][0].append(s)
                else:
                    groups.append(([s], options))
            for key, (sectors, options) in enumerate(groups):
                units.append(_Unit("data", ino, key, options, tuple(sectors)))
        if self.profile in ("ext4ish", "windows"):
            if self.pending:
                units.append(_Unit("dirprefix", 0, 0, tuple(range(-1, len(self.pending)))))
        elif self.profile == "weak":
            for i in range(len(self.pending)):
                units.append(_Unit("dir", 0, i, (-1, 0)))
        return units

    def build(self, choice: _Choice, units: Sequence[_Unit], seed: int) -> _State:
        picks = choice.picks
        if self.profile == "process":
            directory = dict(self.dcache)
        elif self.profile == "weak":
            directory = dict(self.durable)
            for i, op in enumerate(self.pending):
                if picks.get(("dir", 0, i), 0) >= 0:
                    _apply_dir(directory, op)
        else:
            directory = dict(self.durable)
            upto = picks.get(("dirprefix", 0, 0), len(self.pending) - 1)
            for op in self.pending[:upto + 1]:
                _apply_dir(directory, op)
        forced: dict[int, int] = {}
        if self.profile in ("ext4ish", "windows"):  # safe rename: data before the rename lands
            upto = picks.get(("dirprefix", 0, 0), len(self.pending) - 1)
            for op in self.pending[:upto + 1]:
                if op.kind == "rename":
                    versions = self.versions.get(op.ino, [])
                    before = [i for i, v in enumerate(versions) if v.event < op.event]
                    if before:
                        forced[op.ino] = max(forced.get(op.ino, -1), before[-1])
        contents: dict[int, bytes] = {}
        by_ino: dict[int, list[_Unit]] = {}
        for unit in units:
            if unit.kind in ("size", "data"):
                by_ino.setdefault(unit.ino, []).append(unit)
        for ino in set(directory.values()):
            contents[ino] = self._content(ino, by_ino.get(ino, []), picks, forced.get(ino, -1),
                                          choice.fill, seed)
            if choice.cut is not None and choice.cut[0] == ino:
                _, offset, partial = choice.cut
                buf = bytearray(contents[ino])
                if len(buf) < offset + len(partial):
                    buf.extend(bytes(offset + len(partial) - len(buf)))
                buf[offset:offset + len(partial)] = partial
                contents[ino] = bytes(buf)
        return _State.make(directory, contents)

    def _content(self, ino: int, units: list[_Unit], picks: dict[tuple[str, int, int], int],
                 forced: int, fill: str, seed: int) -> bytes:
        versions = self.versions.get(ino)
        if not versions or self.profile == "process":
            return bytes(self.cache[ino]) if self.profile == "process" else \
                self.floor.get(ino, b"")
        floor = self.floor.get(ino, b"")
        ceiling = len(versions) - 1

        def pick(unit: _Unit) -> int:
            chosen = picks.get((unit.kind, unit.ino, unit.key), ceiling)
            return max(chosen, forced)

        size_version = ceiling
        for unit in units:
            if unit.kind == "size":
                size_version = pick(unit)
        size = len(floor) if size_version < 0 else versions[size_version].size
        buf = bytearray(floor[:size])
        if size > len(buf):
            if not floor and not self.new_file_garbage:
                fill = "zero"
            buf.extend(_fill(size - len(buf), fill, seed * 7919 + ino))
        for unit in units:
            if unit.kind != "data":
                continue
            upto = pick(unit)
            if upto < 0:
                continue
            for s in unit.sectors:
                start = s * SECTOR
                if start >= size:
                    continue
                content = None
                for i in range(min(upto, ceiling), -1, -1):
                    content = versions[i].sectors.get(s)
                    if content is not None:
                        break
                if content is not None:
                    stop = min(start + SECTOR, size)
                    buf[start:stop] = content[:stop - start]
        return bytes(buf)

    def dropped(self, choice: _Choice, units: Sequence[_Unit]) -> list[int]:
        """Event indices of the operations this state did not persist."""
        out: set[int] = set()
        for unit in units:
            chosen = choice.picks.get((unit.kind, unit.ino, unit.key))
            if chosen is None or chosen == unit.options[-1]:
                continue
            if unit.kind in ("size", "data"):
                versions = self.versions[unit.ino]
                for i in unit.options:
                    if i > chosen:
                        out.add(versions[i].event)
            elif unit.kind == "dir":
                out.add(self.pending[unit.key].event)
            else:
                out.update(op.event for op in self.pending[chosen + 1:])
        return sorted(out)


def _apply_dir(directory: dict[str, int], op: _DirOp) -> None:
    if op.kind == "link":
        directory[op.name] = op.ino
    elif op.kind == "unlink":
        if directory.get(op.name) == op.ino:
            del directory[op.name]
    elif op.kind == "rename":
        if directory.get(op.name) == op.ino:
            del directory[op.name]
        directory[op.name2] = op.ino


def _fill(n: int, kind: str, seed: int) -> bytes:
    if kind == "zero":
        return bytes(n)
    return random.Random(seed).randbytes(n)


@dataclass(frozen=True, slots=True)
class _State:
    """A crash state: names -> bytes, plus the names that share an inode."""

    files: tuple[tuple[str, bytes], ...]
    links: tuple[tuple[str, ...], ...]
    digest: bytes

    @classmethod
    def make(cls, directory: dict[str, int], contents: dict[int, bytes]) -> _State:
        files = tuple(sorted((name, contents[ino]) for name, ino in directory.items()))
        groups: dict[int, list[str]] = {}
        for name, ino in directory.items():
            groups.setdefault(ino, []).append(name)
        links = tuple(sorted(tuple(sorted(g)) for g in groups.values() if len(g) > 1))
        h = hashlib.blake2b(digest_size=20)
        for name, data in files:  # length + bytes up to the last non-zero one say it all
            h.update(name.encode() + b"\0" + len(data).to_bytes(8, "little"))
            h.update(data.rstrip(b"\0"))
        h.update(repr(links).encode())
        return cls(files, links, h.digest())

    def listing(self) -> str:
        return ", ".join(f"{name} ({len(data)}B)" for name, data in self.files)


# ==========================================================================
# 4. Strategies


@dataclass(frozen=True)
class Bounds:
    """How much of the state space to explore (section 9.4 of the research note)."""

    strategies: frozenset[str] = frozenset({"E1", "E2", "E3", "E4", "E5", "E6", "E7"})
    random_subsets: int = 8  # E7: seeded random states per crash point
    max_dir_subset: int = 5  # E5: all 2^k subsets of pending dir micro-ops up to this k
    max_unit_variants: int = 48  # E3/E4: cap on per-unit variants per crash point (sampled)
    byte_exhaustive: bool = False  # process profile: every byte cut, not just the telling ones
    continuation: float = 0.05  # I9: share of unique states continued (persistence points: all)
    compound: int = 4  # I8: repaired states whose own recovery is crashed
    rot: bool = True  # E8: header bit flips in the final log
    rot_records: int = 8  # E8: records damaged (sampled when the log holds more)
    compound_states: int = 40  # I8: crash states of one recovery checked (sampled)
    # weak: may a file that never had a durable byte show garbage (not just zeros) where
    # its data did not land? On: that is what exposed the in-place creation of
    # generation 0 (see the module docstring and test_explorer_teeth).
    new_file_garbage: bool = True
    seed: int = 0

    @classmethod
    def torture(cls, seed: int = 0) -> Bounds:
        """The long run's bounds: byte-exhaustive, many random subsets, more compound states."""
        return cls(random_subsets=64, max_dir_subset=7, max_unit_variants=512,
                   byte_exhaustive=True, continuation=0.2, compound=32, rot_records=64,
                   compound_states=400, seed=seed)

    @classmethod
    def quick(cls, seed: int = 0) -> Bounds:
        return cls(random_subsets=2, max_unit_variants=16, continuation=0.0, compound=0,
                   rot=False, seed=seed)


def _choices(model: _Model, units: list[_Unit], bounds: Bounds, rng: random.Random,
             weak: bool) -> Iterator[_Choice]:
    strategies = bounds.strategies
    fills = ("zero", "garbage") if weak else ("zero",)
    floor = {(u.kind, u.ino, u.key): -1 for u in units}
    if "E2" in strategies or not units:
        yield _Choice("E2 ceiling")
    if not units:
        return
    if "E1" in strategies:
        for fill in fills:
            yield _Choice("E1 floor", dict(floor), fill)
    if "E3" in strategies:
        variants = []
        for u in units:
            for option in u.options[:-1]:
                variants.append(_Choice(f"E3 all but {u.kind}{u.ino}.{u.key}@{option}",
                                        {(u.kind, u.ino, u.key): option}))
            variants.append(_Choice(f"E3 only {u.kind}{u.ino}.{u.key}",
                                    {**floor, (u.kind, u.ino, u.key): u.options[-1]},
                                    fills[-1]))
        yield from _sample(variants, bounds.max_unit_variants, rng)
    data_units = [u for u in units if u.kind in ("size", "data")]
    dir_units = [u for u in units if u.kind in ("dir", "dirprefix")]
    torn: list[_Choice] = []
    if "E4" in strategies:
        torn = list(_torn_writes(model, data_units))
        yield from _sample(torn, bounds.max_unit_variants, rng)
    if "E5" in strategies and dir_units:
        dir_choices = list(_dir_choices(dir_units, bounds, rng))
        for picks in dir_choices:
            yield _Choice("E5 dir " + _dir_label(picks), dict(picks))
            yield _Choice("E5 dir+data floor " + _dir_label(picks), {
                **{k: v for k, v in floor.items() if k[0] in ("size", "data")}, **picks},
                fills[-1])
        if "E6" in strategies and data_units and torn:
            combos = [_Choice(f"E6 {t.label} x dir {_dir_label(p)}", {**t.picks, **p}, t.fill)
                      for t in torn for p in dir_choices]
            yield from _sample(combos, bounds.max_unit_variants * 2, rng)
    if "E7" in strategies:
        for i in range(bounds.random_subsets):
            picks = {(u.kind, u.ino, u.key): rng.choice(u.options) for u in units}
            yield _Choice(f"E7 random #{i}", picks, rng.choice(fills))


def _sample(items: list[_Choice], limit: int, rng: random.Random) -> list[_Choice]:
    if len(items) <= limit:
        return items
    return rng.sample(items, limit)


def _dir_label(picks: dict[tuple[str, int, int], int]) -> str:
    if ("dirprefix", 0, 0) in picks:
        return f"prefix {picks[('dirprefix', 0, 0)] + 1}"
    return "{" + ",".join(str(k[2]) for k, v in sorted(picks.items()) if v >= 0) + "}"


def _dir_choices(units: list[_Unit], bounds: Bounds,
                 rng: random.Random) -> Iterator[dict[tuple[str, int, int], int]]:
    if units[0].kind == "dirprefix":
        for option in units[0].options:
            yield {("dirprefix", 0, 0): option}
        return
    k = len(units)
    keys = [("dir", 0, u.key) for u in units]
    if k <= bounds.max_dir_subset:
        for mask in range(1 << k):
            yield {key: (0 if mask >> i & 1 else -1) for i, key in enumerate(keys)}
        return
    seen: set[tuple[int, ...]] = set()
    candidates = []
    for j in range(k + 1):  # prefixes
        candidates.append(tuple(1 if i < j else 0 for i in range(k)))
    for j in range(k):  # all but one, and one alone
        candidates.append(tuple(0 if i == j else 1 for i in range(k)))
        candidates.append(tuple(1 if i == j else 0 for i in range(k)))
    for _ in range(bounds.random_subsets * 2):
        candidates.append(tuple(rng.randint(0, 1) for _ in range(k)))
    for bits in candidates:
        if bits not in seen:
            seen.add(bits)
            yield {key: (0 if bit else -1) for key, bit in zip(keys, bits, strict=True)}


def _torn_writes(model: _Model, units: list[_Unit]) -> Iterator[_Choice]:
    """E4: each pending write torn in order, with one sector missing, or as size only."""
    by_ino: dict[int, list[_Unit]] = {}
    for unit in units:
        by_ino.setdefault(unit.ino, []).append(unit)
    for ino, inode_units in by_ino.items():
        versions = model.versions[ino]
        for w, version in enumerate(versions):
            if not version.sectors or version.zero:
                continue
            base = {(u.kind, u.ino, u.key): _before(u, w) for u in inode_units}
            mine = [u for u in inode_units
                    if u.kind == "data" and w in u.options and
                    any(s in version.sectors for s in u.sectors)]
            sizes = [u for u in inode_units if u.kind == "size"]
            size_now = {(u.kind, u.ino, u.key): _at(u, w) for u in sizes}
            for j in range(len(mine) + 1):
                picks = dict(base)
                picks.update(size_now)
                for u in mine[:j]:
                    picks[(u.kind, u.ino, u.key)] = w
                label = "size only" if j == 0 else f"first {j}/{len(mine)} sectors"
                yield _Choice(f"E4 write #{version.event} {label}", picks)
                if j == 0 and model.profile == "weak":
                    yield _Choice(f"E4 write #{version.event} size+garbage", dict(picks),
                                  "garbage")
            if len(mine) > 1:
                for hole in mine:
                    picks = dict(base)
                    picks.update(size_now)
                    for u in mine:
                        if u is not hole:
                            picks[(u.kind, u.ino, u.key)] = w
                    yield _Choice(f"E4 write #{version.event} hole at sector {hole.sectors[0]}",
                                  picks)


def _before(unit: _Unit, w: int) -> int:
    earlier = [o for o in unit.options if o < w]
    return earlier[-1] if earlier else -1


def _at(unit: _Unit, w: int) -> int:
    upto = [o for o in unit.options if o <= w]
    return upto[-1] if upto else -1


def _byte_cuts(data: bytes, exhaustive: bool) -> list[int]:
    if not any(data):  # zeros (preallocation): where it stops hardly matters
        return sorted({0, len(data) // 2}) if data else []
    if exhaustive:
        return list(range(len(data)))
    frames = _scan_frames(data)
    if not frames:
        return sorted({0, len(data) // 3, 2 * len(data) // 3, len(data) - 1})
    cuts: set[int] = set()
    for _, pos, _ in frames:
        length = struct.unpack_from("<I", data, pos)[0]
        cuts.update(range(pos, pos + 9))
        cuts.update((pos + 9 + length // 3, pos + 9 + 2 * length // 3, pos + 8 + length))
    return sorted(c for c in cuts if 0 <= c < len(data))


# ==========================================================================
# 5. Checking


@dataclass
class Violation:
    """One broken invariant, with enough to reproduce and to find the source line."""

    check: str
    workload: str
    profile: str
    crash_point: int
    strategy: str
    message: str
    state: str = ""
    sources: tuple[str, ...] = ()
    context: tuple[str, ...] = ()
    files: dict[str, bytes] = field(default_factory=dict, repr=False)

    def __str__(self) -> str:
        lines = [f"[{self.check}] {self.workload}/{self.profile} crash point "
                 f"{self.crash_point} ({self.strategy}): {self.message}"]
        if self.state:
            lines.append(f"    state: {self.state}")
        lines.extend(f"    {line}" for line in self.context)
        lines.extend(f"    dropped {line}" for line in self.sources)
        return "\n".join(lines)


@dataclass
class _Outcome:
    """What opening one state gave."""

    error: str | None = None
    corrupt: bool = False
    modified_on_error: bool = False
    fingerprint: tuple[object, ...] | None = None
    last_batch: int = -1
    generation: int = 0
    repaired: bool = False
    problems: list[tuple[str, str]] = field(default_factory=list)
    jobs: dict[str, tuple[str, int, float]] = field(default_factory=dict)


@dataclass
class ProfileStats:
    crash_points: int = 0
    states: int = 0  # (crash point, state) pairs checked
    unique: int = 0  # states opened
    violations: int = 0
    seconds: float = 0.0


@dataclass
class Report:
    """What one explore() call found."""

    workloads: list[str] = field(default_factory=list)
    calls: int = 0
    events: int = 0
    stats: dict[str, ProfileStats] = field(default_factory=dict)
    violations: list[Violation] = field(default_factory=list)
    compound_states: int = 0
    continued_states: int = 0
    rot_states: int = 0
    seconds: float = 0.0
    total_violations: int = 0

    @property
    def ok(self) -> bool:
        return self.total_violations == 0

    def merge(self, other: Report) -> Report:
        self.workloads += other.workloads
        self.calls += other.calls
        self.events += other.events
        for name, stats in other.stats.items():
            mine = self.stats.setdefault(name, ProfileStats())
            for attr in ("crash_points", "states", "unique", "violations", "seconds"):
                setattr(mine, attr, getattr(mine, attr) + getattr(stats, attr))
        self.violations += other.violations[:max(0, 50 - len(self.violations))]
        self.compound_states += other.compound_states
        self.continued_states += other.continued_states
        self.rot_states += other.rot_states
        self.seconds += other.seconds
        self.total_violations += other.total_violations
        return self

    def summary(self) -> str:
        lines = [f"explored {len(self.workloads)} workload(s), {self.calls} calls, "
                 f"{self.events} recorded events in {self.seconds:.1f}s"]
        for name, s in self.stats.items():
            lines.append(f"  {name:<8} {s.crash_points:6d} crash points  {s.states:7d} states "
                         f"checked  {s.unique:6d} unique opened  {s.violations:4d} violations"
                         f"  {s.seconds:6.1f}s")
        lines.append(f"  compound (I8) states {self.compound_states}, continued (I9) "
                     f"{self.continued_states}, rot (E8) {self.rot_states}; "
                     f"violations: {self.total_violations}")
        for violation in self.violations[:10]:
            lines.append(str(violation))
        return "\n".join(lines)


class _Opener:
    """Materialises states in a scratch directory and opens a Queue on them."""

    def __init__(self, root: str, queue_kwargs: dict[str, Any]) -> None:
        self.dir = os.path.join(root, "state")
        os.makedirs(self.dir, exist_ok=True)
        self.kwargs = {k: v for k, v in queue_kwargs.items() if k not in ("fsync",)}
        self.fs = _FastFS()

    def materialise(self, state: _State) -> None:
        for name in os.listdir(self.dir):
            os.unlink(os.path.join(self.dir, name))
        linked = {name: group[0] for group in state.links for name in group[1:]}
        for name, data in state.files:
            path = os.path.join(self.dir, name)
            if name in linked:
                os.link(os.path.join(self.dir, linked[name]), path)
                continue
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
            finally:
                os.close(fd)

    def snapshot(self) -> dict[str, tuple[int, int, int]]:
        """Each file's (inode, size, mtime): any write, rename or unlink changes it."""
        out = {}
        for name in sorted(os.listdir(self.dir)):
            if not _ignored_name(name):
                st = os.stat(os.path.join(self.dir, name))
                out[name] = (st.st_ino, st.st_size, st.st_mtime_ns)
        return out

    def queue(self, clock: Callable[[], float] | None = None,
              fs: FileSystem | None = None) -> Queue:
        queue: Queue = file_queue(self.dir, QUEUE, clock=clock or FakeClock(EPOCH),
                                  fs=fs or self.fs, **self.kwargs)
        return queue

    def open(self, state: _State, now: float, continue_: bool) -> _Outcome:
        self.materialise(state)
        before = self.snapshot()
        outcome = _Outcome()
        try:
            queue = self.queue()
        except CorruptLogError as exc:
            outcome.error = f"CorruptLogError: {exc}"
            outcome.corrupt = True
            outcome.modified_on_error = self.snapshot() != before
            return outcome
        except Exception as exc:
            outcome.error = f"{type(exc).__name__}: {exc}"
            return outcome
        try:
            state_ = store_of(queue).state
            outcome.fingerprint = state_.fingerprint()
            outcome.last_batch = state_.last_batch
            outcome.generation = queue.generation
            outcome.repaired = queue.recovery.repaired or bool(queue.recovery.notes)
            outcome.jobs = {e.id: (str(e.state), e.token, e.lease_until)
                            for e in state_.jobs.values()}
        finally:
            queue.close()
        middle = self.snapshot()
        strays = [n for n in middle if not n.startswith(QUEUE + ".")]
        if strays:
            outcome.problems.append(("I10", f"files outside {QUEUE}.*: {strays}"))
        if middle == before and not continue_:
            # I7 holds trivially: the second open would read exactly the same files
            # (opening is deterministic); it matters where the first open wrote.
            return outcome
        try:
            again = self.queue()
            second = (store_of(again).state.fingerprint(), store_of(again).state.last_batch)
            again.close()
        except Exception as exc:
            outcome.problems.append(("I7", f"second open raised {type(exc).__name__}: {exc}"))
        else:
            if second != (outcome.fingerprint, outcome.last_batch):
                outcome.problems.append(("I7", "second open gave a different state"))
            after = self.snapshot()
            if after != middle:
                changed = sorted(n for n in set(after) | set(middle)
                                 if after.get(n) != middle.get(n))
                outcome.problems.append(("I7", f"second open modified {changed}"))
        if continue_:
            problem = self.continuation(outcome, now)
            if problem:
                outcome.problems.append(problem)
        return outcome

    def continuation(self, outcome: _Outcome, now: float) -> tuple[str, str] | None:
        """I9 (and I5): keep using the recovered queue, then reopen."""
        clock = FakeClock(now + 0.5)
        try:
            queue = self.queue(clock)
            try:
                if queue.stats().paused:  # a recovered pause holds: lift it to go on
                    queue.resume()
                live = {job_id: token for job_id, (state, token, until) in outcome.jobs.items()
                        if state == "leased" and until > clock.now}
                for job in queue.lease(10_000, visibility_timeout=60.0):
                    if job.id in live:
                        return "I5", f"job {job.id} leased again while its lease " \
                                     f"{live[job.id]} was live"
                for job_id, token in live.items():
                    stale = Job(job_id, None, 0, 0, 1, JobState.LEASED, 0.0, 0.0, None,
                                token=token + 1_000_000)
                    try:
                        queue.ack(stale)
                    except NotLeasedError:
                        pass
                    else:
                        return "I5", f"ack of {job_id} with a wrong token succeeded"
                x = queue.enqueue({"continuation": "x"}, priority=10**6)
                got = queue.lease(1, visibility_timeout=60.0)
                if [j.id for j in got] != [x.id]:
                    return "I9", f"lease after recovery gave {[j.id for j in got]}, not X"
                queue.ack(got[0])
                y = queue.enqueue({"continuation": "y"})
            finally:
                queue.close()
            reopened = self.queue(clock)
            try:
                jobs = store_of(reopened).state.jobs
                if x.id in jobs or y.id not in jobs:
                    return "I9", "after continuing and reopening, X (acked) is present " \
                                 "or Y (enqueued) is missing"
            finally:
                reopened.close()
        except Exception as exc:
            return "I9", f"continuing after recovery raised {type(exc).__name__}: {exc}"
        return None


class _FastFS(FileSystem):
    """The plain OS without fsyncs: checking states never waits on a disk. A crash
    state opens in another boot: what NAME.sync says of the recording proves nothing."""

    def boot_id(self) -> bytes | None:
        return RECOVERY_BOOT

    def fsync(self, fd: int) -> None:
        pass

    def fdatasync(self, fd: int) -> None:
        pass

    def fsync_dir(self, path: str) -> None:
        pass


class _Explorer:
    def __init__(self, trace: Trace, root: str, bounds: Bounds, report: Report) -> None:
        self.trace = trace
        self.bounds = bounds
        self.report = report
        self.opener = _Opener(root, trace.queue_kwargs)
        self.root = root
        self.outcomes: dict[bytes, _Outcome] = {}
        self.rng = random.Random(bounds.seed)
        self.seen: set[tuple[str, bytes, tuple[int, int], tuple[int, int]]] = set()
        self._oracle()

    # -- the oracle ---------------------------------------------------------

    def _oracle(self) -> None:
        events, calls = self.trace.events, self.trace.calls
        n = len(events)
        zero = (0, 0)  # positions (batch, generation), as in Driver.history
        self.hi = [zero] * (n + 1)
        self.lo = [zero] * (n + 1)
        self.lo_windows = [zero] * (n + 1)  # there a compaction is not durable at return
        self.now = [0.0] * (n + 1)
        self.returned_at: dict[int, Call] = {}
        self.generation_of: dict[int, int] = {}
        by_end = {c.end: c for c in calls}
        hi = lo = lo_windows = zero
        now = 0.0
        logs = _log_inodes(events)
        for i, event in enumerate(events):
            if event.kind == "write" and event.ino in logs and event.offset == 0:
                found = _generation(event.data)
                if found is not None:
                    self.generation_of[event.ino] = found
            if event.kind == "write" and event.ino in logs and event.offset >= 16:
                generation = self.generation_of.get(event.ino, 0)
                for _, _, record in _scan_frames(event.data):
                    hi = max(hi, (record["b"], generation))
            elif event.kind == "begin":
                now = max(now, calls[event.call].now)
            elif event.kind == "end":
                call = by_end.get(i)
                if call is not None and call.outcome == "returned" and call.durable \
                        and call.batches:
                    lo = max(lo, max(call.batches))
                    if call.op not in ("compact", "open"):  # both flip generations
                        lo_windows = max(lo_windows, max(call.batches))
                    self.returned_at[i + 1] = call
            self.hi[i + 1], self.lo[i + 1], self.now[i + 1] = hi, lo, now
            self.lo_windows[i + 1] = lo_windows
        self.enqueue_many = [(max(c.batches), c.enqueued) for c in calls
                             if c.op == "enqueue_many" and c.batches and c.enqueued]
        self.history = self.trace.history

    # -- driving ------------------------------------------------------------

    def run_profile(self, profile: str) -> None:
        started = time.perf_counter()
        stats = self.report.stats.setdefault(profile, ProfileStats())
        before_unique = len(self.outcomes)
        model = _Model(profile, {}, {})
        model.new_file_garbage = self.bounds.new_file_garbage
        if self.trace.initial:
            inos = {name: i + 1 for i, name in enumerate(sorted(self.trace.initial))}
            model = _Model(profile, inos,
                           {inos[n]: d for n, d in self.trace.initial.items()})
            model.new_file_garbage = self.bounds.new_file_garbage
        events = self.trace.events
        cache_stamp = -1
        cached: list[tuple[_Choice, _State, list[int]]] = []
        for c in range(len(events) + 1):
            if c:
                model.apply(events[c - 1])
            interesting = c == 0 or c == len(events) or events[c - 1].kind in (
                "write", "trunc", "fsync", "fsync_failed", "dirsync", "rename", "unlink",
                "create") or (c in self.returned_at)
            if interesting:
                if model.stamp != cache_stamp:
                    cache_stamp = model.stamp
                    cached = self._states(model, c)
                stats.crash_points += 1
                for choice, state, dropped in cached:
                    self._check(profile, c, choice, state, dropped, stats)
            # The write in flight at this crash point, cut short (process: kill -9).
            if profile == "process" and c < len(events) and events[c].kind == "write":
                event = events[c]
                for cut in _byte_cuts(event.data, self.bounds.byte_exhaustive):
                    choice = _Choice(f"E4 byte cut {cut}/{len(event.data)} of #{event.index}",
                                     cut=(event.ino, event.offset, event.data[:cut]))
                    state = model.build(choice, [], self.bounds.seed)
                    upto = self._batches_upto(event.data[:cut])
                    generation = self.generation_of.get(event.ino, 0)
                    self._check(profile, c, choice, state, [event.index], stats,
                                hi=max(self.hi[c], (upto, generation)))
        stats.unique += len(self.outcomes) - before_unique
        stats.seconds += time.perf_counter() - started

    @staticmethod
    def _batches_upto(data: bytes) -> int:
        frames = _scan_frames(data)
        return max((r["b"] for _, _, r in frames), default=0)

    def _states(self, model: _Model, c: int) -> list[tuple[_Choice, _State, list[int]]]:
        units = model.units() if model.profile != "process" else []
        out = []
        seen: set[bytes] = set()
        for choice in _choices(model, units, self.bounds, self.rng, model.profile == "weak"):
            state = model.build(choice, units, self.bounds.seed + c)
            if state.digest in seen:
                continue
            seen.add(state.digest)
            out.append((choice, state, model.dropped(choice, units)))
        return out

    def _check(self, profile: str, c: int, choice: _Choice, state: _State, dropped: list[int],
               stats: ProfileStats, hi: tuple[int, int] | None = None) -> None:
        lo = (self.lo_windows if profile == "windows" else self.lo)[c]
        hi = self.hi[c] if hi is None else hi
        key = (profile, state.digest, lo, hi)
        stats.states += 1
        if key in self.seen:
            return
        self.seen.add(key)
        outcome = self.outcomes.get(state.digest)
        if outcome is None:
            sampled = c in self.returned_at or self.rng.random() < self.bounds.continuation
            outcome = self.opener.open(state, self.now[c], sampled)
            self.outcomes[state.digest] = outcome
            if sampled and self.bounds.continuation > 0:
                self.report.continued_states += 1
            if outcome.repaired and self._compound_budget > 0:
                self._compound_budget -= 1
                self._compound(profile, c, choice, state, outcome)
        verdicts = self._verdicts(outcome, c, lo, hi)
        extra, self._lost_context = self._lost_context, ()
        for check, message in verdicts:
            self._violation(check, profile, c, choice, state, dropped, message,
                            extra if check in ("I2", "I3", "I4") else ())

    _compound_budget = 0

    def _verdicts(self, outcome: _Outcome, c: int, lo: tuple[int, int],
                  hi: tuple[int, int]) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = list(outcome.problems)
        if outcome.error is not None:
            out.append(("I6", f"opening raised {outcome.error}"))
            return out
        at = (outcome.last_batch, outcome.generation)
        at_persistence = c in self.returned_at
        if at < lo:
            lost = [call for call in self.trace.calls
                    if call.outcome == "returned" and call.batches and call.durable
                    and max(call.batches) > at and call.end < c]
            back = sorted({i for call in lost for i in call.acked} & set(outcome.jobs))
            check = "I4" if back else ("I2" if at_persistence else "I3")
            detail = f"acked job(s) {back} are back; " if back else ""
            out.append((check, f"{detail}recovered batch {at[0]} of generation {at[1]}, but "
                               f"calls up to {lo} had returned; lost: "
                               f"{'; '.join(call.describe() for call in lost[-3:])}"))
            if lost:  # how the last lost call wrote and synced, source lines included
                call = lost[-1]
                self._lost_context = tuple(
                    "lost call's " + e.describe() for e in self.trace.events[call.begin:call.end]
                    if e.kind in ("write", "fsync", "fsync_failed", "dirsync", "rename"))[-6:]
        elif at > hi:
            out.append(("I1", f"recovered batch {at[0]} of generation {at[1]}, but only "
                              f"{hi} was ever written: something appeared that never was"))
        else:
            expected = self.history.get(at)
            if expected is None or outcome.fingerprint not in expected:
                out.append(("I1", f"recovered state (batch {at[0]} of generation {at[1]}) is "
                                  f"not the replay of the history up to that batch" +
                            (" (no batch there in the history)" if expected is None else "")))
            elif at_persistence and at != hi:
                out.append(("I2", f"at a persistence point the state is {at}, "
                                  f"expected exactly {hi}"))
        for position, ids in self.enqueue_many:
            if position[0] - 1 <= at[0] <= position[0] or at > hi:
                present = [i for i in ids if i in outcome.jobs]
                if present and len(present) != len(ids):
                    out.append(("P2", f"enqueue_many batch {position[0]} is torn: "
                                      f"{len(present)} of {len(ids)} jobs present"))
        return out

    _lost_context: tuple[str, ...] = ()

    def _violation(self, check: str, profile: str, c: int, choice: _Choice, state: _State,
                   dropped: list[int], message: str, extra: tuple[str, ...] = ()) -> None:
        self.report.total_violations += 1
        self.report.stats[profile].violations += 1
        if len(self.report.violations) >= 50:
            return
        events = self.trace.events
        context = []
        if c:
            context.append("crash after " + events[c - 1].describe())
        call_index = next((e.call for e in reversed(events[:c]) if e.call >= 0), -1)
        if call_index >= 0:
            context.append("during/after " + self.trace.calls[call_index].describe())
        sources = tuple(events[i].describe() for i in dropped[:8])
        context.extend(extra)
        self.report.violations.append(Violation(
            check, self.trace.name, profile, c, choice.label, message, state.listing(),
            sources, tuple(context), dict(state.files)))

    # -- I8: crash the recovery itself ----------------------------------------

    def _compound(self, profile: str, c: int, choice: _Choice, state: _State,
                  outcome: _Outcome) -> None:
        self.opener.materialise(state)
        fs = RecordingFS(self.opener.dir, adopt=True)
        initial = {name: bytes(fs.files[ino]) for name, ino in fs.names.items()}
        try:
            self.opener.queue(fs=fs).close()
        except Exception:
            return
        model = _Model("weak", {n: i + 1 for i, n in enumerate(sorted(initial))},
                       {i + 1: initial[n] for i, n in enumerate(sorted(initial))})
        # RecordingFS numbered the adopted inodes in sorted order too, so numbers agree.
        bounds = replace(self.bounds, strategies=frozenset({"E1", "E2", "E3", "E5"}))
        candidates: dict[bytes, tuple[Event, _Choice, _State, list[int]]] = {}
        for k, event in enumerate(fs.events):
            model.apply(event)
            units = model.units()
            for sub in _choices(model, units, bounds, self.rng, True):
                built = model.build(sub, units, k)
                candidates.setdefault(built.digest, (event, sub, built,
                                                     model.dropped(sub, units)))
        chosen = list(candidates.values())
        if len(chosen) > self.bounds.compound_states:
            chosen = self.rng.sample(chosen, self.bounds.compound_states)
        for event, sub, sub_state, dropped in chosen:
            self.report.compound_states += 1
            got = self.outcomes.get(sub_state.digest)
            if got is None:
                got = self.opener.open(sub_state, self.now[c], False)
                self.outcomes[sub_state.digest] = got
            if got.error or (got.fingerprint, got.last_batch) != (outcome.fingerprint,
                                                                  outcome.last_batch):
                what = got.error or f"state of batch {got.last_batch} instead of " \
                                    f"{outcome.last_batch}"
                self._violation("I8", profile, c, replace(
                    choice, label=f"{choice.label}; recovery crashed after "
                                  f"{event.describe()} ({sub.label})"),
                    sub_state, dropped, f"crash during recovery: {what}")

    # -- E8: bit rot in durable records -----------------------------------------

    def run_rot(self) -> None:
        model = _Model("process", {}, {})
        for event in self.trace.events:
            model.apply(event)
        final = model.build(_Choice("final"), [], 0)
        # Checkpoints cover damage below them by design; this probes the log's own checks.
        files = {n: d for n, d in final.files if not n.endswith(".ckpt")}
        names = sorted((n for n in files if _LOG_NAME.fullmatch(n)),
                       key=lambda n: int(_LOG_NAME.fullmatch(n).group(1)))  # type: ignore[union-attr]
        current = files.get(f"{QUEUE}.current")
        if current is not None and current.strip().isdigit():
            wanted = f"{QUEUE}.{int(current):06d}.log"
            names = [wanted] if wanted in files else []
        if not names:
            return
        log_name = names[-1]
        data = files[log_name]
        generation = int(_LOG_NAME.fullmatch(log_name).group(1))  # type: ignore[union-attr]
        batches = list(_complete_batches(data, 16))
        targets = [(i, record) for i, (_, batch) in enumerate(batches) for record in batch]
        if len(targets) > self.bounds.rot_records:
            targets = sorted(self.rng.sample(targets, self.bounds.rot_records),
                             key=lambda t: t[1][2])
        stats = self.report.stats.setdefault("rot", ProfileStats())
        started = time.perf_counter()
        c = len(self.trace.events)
        for i, (rtype, record, at, _) in targets:
            # The damaged record ends the log (its batch may read as a torn tail), or one
            # more batch follows it (then the damage must be refused: a later state
            # would still show any misreading).
            for j in {i, min(i + 1, len(batches) - 1)}:
                end = batches[j][0]
                prefix = data[:end] + bytes(len(data) - end)
                last = batches[j][1][0][1]["b"]
                allowed = {(last, generation)}
                if j == i:  # a torn last batch: the state before it
                    allowed.add((batches[j - 1][1][0][1]["b"], generation) if j else
                                (0, generation))
                flips = [(at + 4, bit) for bit in range(8)]  # every bit of the type byte
                flips += [(at + self.rng.randrange(4), self.rng.randrange(8)),  # a length bit
                          (at + 5 + self.rng.randrange(4), self.rng.randrange(8))]  # a CRC bit
                for offset, bit in flips:
                    damaged = bytearray(prefix)
                    damaged[offset] ^= 1 << bit
                    state, outcome = self._open_rotten(files, log_name, bytes(damaged),
                                                       stats, c)
                    field_name = ("type byte" if offset == at + 4 else
                                  "length" if offset < at + 4 else "crc")
                    what = (f"E8 flipped bit {bit} of the {field_name} of a type {rtype} record "
                            f"(batch {record['b']}, offset {at}) of {log_name}, "
                            f"{'ending the log' if j == i else 'one batch before its end'}")
                    if outcome.error is not None:
                        if not outcome.corrupt:
                            self._rot_violation(c, what, state, f"raised {outcome.error}")
                        elif outcome.modified_on_error:
                            self._rot_violation(c, what, state, "raised CorruptLogError but "
                                                                "modified files")
                        continue
                    position = (outcome.last_batch, outcome.generation)
                    expected = self.trace.history.get(position, set())
                    if position not in allowed or outcome.fingerprint not in expected:
                        self._rot_violation(
                            c, what, state, f"damage went undetected: opened as batch "
                            f"{outcome.last_batch}, a state that is "
                            f"{'' if outcome.fingerprint in expected else 'not '}in the "
                            f"history (allowed: {sorted(allowed)})")
        sectors = {record[2] // 512 * 512 for _, record in targets}
        for sector in sorted(sectors):
            self._rot_zero_sector(files, log_name, generation, batches, sector, stats, c)
        stats.seconds += time.perf_counter() - started

    def _open_rotten(self, files: dict[str, bytes], log_name: str, damaged: bytes,
                     stats: ProfileStats, c: int) -> tuple[_State, _Outcome]:
        """The final files with `log_name` replaced by `damaged`, and what opening them
        gives (each distinct state opened once)."""
        state = _State.make({n: k for k, n in enumerate(files)},
                            {k: (damaged if n == log_name else files[n])
                             for k, n in enumerate(files)})
        self.report.rot_states += 1
        stats.states += 1
        outcome = self.outcomes.get(state.digest)
        if outcome is None:
            outcome = self.opener.open(state, self.now[c], False)
            self.outcomes[state.digest] = outcome
            stats.unique += 1
        return state, outcome

    def _rot_zero_sector(self, files: dict[str, bytes], log_name: str, generation: int,
                         batches: list[tuple[int, list[tuple[int, dict[str, Any], int, int]]]],
                         sector: int, stats: ProfileStats, c: int) -> None:
        """E8, a lost or misdirected write: one 512-byte sector of durable records reads
        back as zeros. When the call that wrote the first damaged batch had returned
        (fsynced) before its handle wrote a later batch that lies wholly after the
        sector, the zeros hide acknowledged records: opening must refuse
        (CorruptLogError, nothing modified), however many zeros lie between."""
        low, high = max(sector, 16), sector + 512
        first = next((i for i, (end, _) in enumerate(batches) if end > low), None)
        later = next((i for i, (_, batch) in enumerate(batches) if batch[0][2] >= high), None)
        if first is None or later is None:
            return
        lost_batch = batches[first][1][0][1]["b"]
        later_batch = batches[later][1][0][1]["b"]
        writers = {b: call for call in self.trace.calls for b in call.batches}
        lost = writers.get((lost_batch, generation))
        after = writers.get((later_batch, generation))
        if lost is None or after is None or lost.outcome != "returned" or not lost.durable \
                or lost.handle != after.handle or lost.end > after.begin:
            return  # nothing proves the damaged batch was on disk before the later one
        data = bytearray(files[log_name])
        data[low:high] = bytes(high - low)
        state, outcome = self._open_rotten(files, log_name, bytes(data), stats, c)
        what = (f"E8 zeroed sector [{low}, {high}) of {log_name}: batch {lost_batch}, "
                f"returned by {lost.describe()}, lost before batch {later_batch} of the "
                f"same handle")
        if outcome.error is None:
            self._rot_violation(c, what, state, f"durable records were cut: opened as batch "
                                                f"{outcome.last_batch}")
        elif not outcome.corrupt:
            self._rot_violation(c, what, state, f"raised {outcome.error}")
        elif outcome.modified_on_error:
            self._rot_violation(c, what, state, "raised CorruptLogError but modified files")

    def _rot_violation(self, c: int, what: str, state: _State, message: str) -> None:
        logs = _log_inodes(self.trace.events)
        writer = next((e for e in self.trace.events if e.kind == "write"
                       and e.ino in logs and e.offset >= 16), None)
        self.report.stats["rot"].violations += 1
        self.report.total_violations += 1
        if len(self.report.violations) < 50:
            self.report.violations.append(Violation(
                "E8", self.trace.name, "rot", c, what, message, state.listing(),
                (writer.describe(),) if writer else (), (), dict(state.files)))


def crash_states(events: Sequence[Event], profile: str, bounds: Bounds | None = None,
                 initial: dict[str, bytes] | None = None) -> list[dict[str, bytes]]:
    """The crash states (name -> bytes) a profile allows right after `events`.

    For unit tests of the disk models on hand-written traces; inode numbers in
    the events must match `initial`'s sorted names (1, 2, ...) or their creates.
    """
    bounds = bounds or Bounds()
    names = sorted(initial or {})
    model = _Model(profile, {n: i + 1 for i, n in enumerate(names)},
                   {i + 1: (initial or {})[n] for i, n in enumerate(names)})
    model.new_file_garbage = bounds.new_file_garbage
    for event in events:
        model.apply(event)
    units = model.units() if profile != "process" else []
    out: dict[bytes, dict[str, bytes]] = {}
    rng = random.Random(bounds.seed)
    for choice in _choices(model, units, bounds, rng, profile == "weak"):
        state = model.build(choice, units, bounds.seed)
        out.setdefault(state.digest, dict(state.files))
    return list(out.values())


# ==========================================================================
# 6. The entry point


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """No log lines for the thousands of repairs, and no network-FS probe per open.

    The probe (nobroker.file.opening.filesystem_type) reads /proc/self/mountinfo on every
    open and has nothing to do with crash states; the scratch is tmpfs anyway.
    """
    from unittest import mock
    logger = logging.getLogger("nobroker")
    disabled = logger.disabled
    logger.disabled = True
    try:
        with mock.patch("nobroker.file.opening.filesystem_type", lambda path: "tmpfs"):
            yield
    finally:
        logger.disabled = disabled


def scratch_root() -> str | None:
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None


def explore(workload: str | Workload, profile: str | Sequence[str] = "weak",
            bounds: Bounds | None = None, *, name: str | None = None) -> Report:
    """Record `workload` once, then build and check its crash states under each profile."""
    bounds = bounds or Bounds()
    profiles = (profile,) if isinstance(profile, str) else tuple(profile)
    for p in profiles:
        if p not in PROFILES:
            raise ValueError(f"unknown profile {p!r}; choose from {PROFILES}")
    if isinstance(workload, str):
        name = name or workload
        workload = WORKLOADS[workload]
    label = name or str(getattr(workload, "__name__", "workload"))
    report = Report(workloads=[label])
    started = time.perf_counter()
    root = tempfile.mkdtemp(prefix="nobroker-explorer-", dir=scratch_root())
    try:
        with _quiet():
            trace = record(workload, os.path.join(root, "live"), seed=bounds.seed, name=label)
            report.calls, report.events = len(trace.calls), len(trace.events)
            for problem in trace.problems:
                report.total_violations += 1
                report.violations.append(Violation("shadow", label, "-", -1, "recording",
                                                   problem))
            explorer = _Explorer(trace, root, bounds, report)
            explorer._compound_budget = bounds.compound
            for p in profiles:
                explorer.run_profile(p)
            if bounds.rot:
                explorer.run_rot()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    report.seconds = time.perf_counter() - started
    return report


# ==========================================================================
# 7. Workloads


WORKLOADS: dict[str, Workload] = {}


def workload(name: str) -> Callable[[Workload], Workload]:
    def register(fn: Workload) -> Workload:
        fn.__name__ = name
        WORKLOADS[name] = fn
        return fn
    return register


def payload(i: int, size: int) -> dict[str, Any]:
    """A payload whose JSON is about `size` bytes (records then straddle sectors)."""
    return {"n": i, "pad": "x" * max(0, size - 20)}


def _held(result: Any) -> list[Job]:
    return [j for j in result if isinstance(j, Job)] if isinstance(result, list) else []


@workload("first_enqueue")
def _w_first_enqueue(d: Driver) -> None:
    h = d.open()
    d.call(h, "enqueue", payload(1, 60))


@workload("lease_ack")
def _w_lease_ack(d: Driver) -> None:
    h = d.open()
    d.call(h, "enqueue", payload(1, 300))
    d.call(h, "enqueue", payload(2, 700))
    for job in _held(d.call(h, "lease", 1)):
        d.call(h, "ack", job)
    for job in _held(d.call(h, "lease", 1)):
        d.call(h, "ack", job)


@workload("enqueue_many")
def _w_enqueue_many(d: Driver) -> None:
    h = d.open()
    d.call(h, "enqueue", payload(0, 50))
    d.call(h, "enqueue_many", [payload(i, 40 + 37 * i) for i in range(20)])
    leased = _held(d.call(h, "lease", 5))
    d.call(h, "ack_many", leased)
    d.call(h, "enqueue_many", [payload(100 + i, 500) for i in range(3)])


@workload("enqueue_many_keyed")
def _w_enqueue_many_keyed(d: Driver) -> None:
    """enqueue_many's runs beside keyed jobs: a key spelling an id the first run would
    take (the writer skips it; replay's one-step run ends there and goes on one by
    one), a repeated key, and a delayed batch of another priority."""
    h = d.open()
    d.call(h, "enqueue", payload(0, 60), job_id="0000000000000006")
    d.call(h, "enqueue_many", [payload(i, 30 + 29 * (i % 7)) for i in range(24)])
    d.call(h, "enqueue", payload(1, 60), job_id="order-1")
    d.call(h, "enqueue", payload(1, 60), job_id="order-1")  # known: writes nothing
    d.call(h, "enqueue_many", [payload(50 + i, 200) for i in range(6)], priority=3,
           delay=5)
    for job in _held(d.call(h, "lease", 3)):
        d.call(h, "ack", job)


@workload("expire_reclaim")
def _w_expire(d: Driver) -> None:
    h = d.open()
    d.call(h, "enqueue", payload(1, 100))
    first = _held(d.call(h, "lease", 1, visibility_timeout=10))
    d.advance(20)
    second = _held(d.call(h, "lease", 1, visibility_timeout=10))  # EXPIRE + LEASE
    for job in first:
        d.call(h, "ack", job)  # stale token: NotLeasedError, writes nothing
    for job in second:
        d.call(h, "ack", job)


@workload("dlq_requeue")
def _w_dlq(d: Driver) -> None:
    h = d.open(max_attempts=2)
    d.call(h, "enqueue", payload(1, 200))
    d.call(h, "enqueue", payload(2, 200))
    for _ in range(2):
        for job in _held(d.call(h, "lease", 1)):
            d.call(h, "nack", job, error="boom", delay=0)
    d.call(h, "dlq")
    d.call(h, "requeue_dead")
    for job in _held(d.call(h, "lease", 2)):
        d.call(h, "ack", job)


@workload("purge")
def _w_purge(d: Driver) -> None:
    h = d.open()
    d.call(h, "enqueue_many", [payload(i, 150) for i in range(5)])
    leased = _held(d.call(h, "lease", 1))
    d.call(h, "purge")
    for job in leased:
        d.call(h, "ack", job)
    d.call(h, "enqueue", payload(9, 100))


@workload("extend")
def _w_extend(d: Driver) -> None:
    h = d.open()
    d.call(h, "enqueue", payload(1, 100))
    leased = _held(d.call(h, "lease", 1, visibility_timeout=10))
    d.advance(5)
    for job in leased:
        extended = d.call(h, "extend", job, 30)
        d.advance(20)
        d.call(h, "lease", 1)  # nothing: the lease was extended
        if isinstance(extended, Job):
            d.call(h, "ack", extended)


@workload("compaction")
def _w_compaction(d: Driver) -> None:
    h = d.open()
    d.call(h, "compact")  # first compaction: creates NAME.current
    d.call(h, "enqueue_many", [payload(i, 120) for i in range(3)])
    leased = _held(d.call(h, "lease", 2, visibility_timeout=50))
    d.call(h, "ack", leased[0]) if leased else None
    d.call(h, "compact")  # replaces NAME.current, deletes generation 0's leftovers
    d.call(h, "enqueue", payload(7, 300))
    d.call(h, "compact")
    for job in _held(d.call(h, "lease", 5)):
        d.call(h, "ack", job)


@workload("keyed_compaction")
def _w_keyed(d: Driver) -> None:
    h = d.open()
    d.call(h, "enqueue", payload(1, 80), job_id="k1")
    for job in _held(d.call(h, "lease", 1)):
        d.call(h, "ack", job)
    d.call(h, "compact")
    d.call(h, "enqueue", payload(1, 80), job_id="k1")  # remembered: writes nothing
    d.call(h, "enqueue", payload(2, 80), job_id="k2")
    d.call(h, "compact")


@workload("big_compaction")
def _w_big_compaction(d: Driver) -> None:
    h = d.open()
    d.call(h, "enqueue_many", [payload(i, 200) for i in range(30)])
    leased = _held(d.call(h, "lease", 10))
    d.call(h, "ack_many", leased[:5])
    d.call(h, "compact")
    d.call(h, "enqueue", payload(99, 100))


@workload("two_handles")
def _w_two_handles(d: Driver) -> None:
    a, b = d.open(), d.open()
    d.call(a, "enqueue", payload(1, 100))
    d.call(b, "enqueue", payload(2, 100))
    leased = _held(d.call(b, "lease", 1))
    d.call(a, "compact")
    for job in leased:
        d.call(b, "ack", job)  # b must notice the new generation
    d.call(a, "enqueue", payload(3, 100))
    d.call(b, "compact")
    for job in _held(d.call(a, "lease", 2)):
        d.call(a, "ack", job)


@workload("racing_compactions")
def _w_racing_compactions(d: Driver) -> None:
    # a's compaction writes generation 1, and before its switch b compacts to
    # generation 1 first (one thread, so the compaction lock is b's too: the
    # race the rescue at open can still run). a throws its file and its
    # checkpoint away, retries into generation 2; b and a then follow it.
    a, b = d.open(), d.open()
    d.call(a, "enqueue_many", [payload(i, 150) for i in range(4)])
    leased = _held(d.call(b, "lease", 2))
    d.call(b, "ack", leased[0]) if leased else None
    d.before_next_fsync(lambda: (d.call(b, "compact"), None)[1])
    d.call(a, "compact")
    for job in leased[1:]:
        d.call(b, "ack", job)  # b follows a's generation 2 here
    d.call(a, "enqueue", payload(9, 200))
    for job in _held(d.call(b, "lease", 5)):
        d.call(a, "ack", job)


@workload("writer_dies_midwrite")
def _w_dies_midwrite(d: Driver) -> None:
    a, b = d.open(), d.open()
    d.call(a, "enqueue", payload(1, 100))
    d.crash_next("write", keep=700)
    d.call(a, "enqueue_many", [payload(10 + i, 300) for i in range(4)])  # a dies mid-write
    d.call(b, "enqueue", payload(2, 100))  # b cuts the torn tail, then appends
    for job in _held(d.call(b, "lease", 3)):
        d.call(b, "ack", job)


@workload("writer_dies_before_fsync")
def _w_dies_before_fsync(d: Driver) -> None:
    a, b = d.open(), d.open()
    d.call(a, "enqueue", payload(1, 100))
    d.crash_next("fsync")
    d.call(a, "enqueue", payload(2, 600))  # written, never fsynced by a
    d.call(b, "enqueue", payload(3, 100))  # b reads it, appends, fsyncs both
    for job in _held(d.call(b, "lease", 3)):
        d.call(b, "ack", job)


@workload("fsync_fails")
def _w_fsync_fails(d: Driver) -> None:
    h = d.open()
    d.call(h, "enqueue", payload(1, 100))
    d.fail_next("fsync")
    d.call(h, "enqueue", payload(2, 900))  # StorageError: indeterminate; the handle is poisoned
    d.call(h, "enqueue", payload(3, 100))  # refused: QueueClosedError


@workload("fsync_fails_reopen")
def _w_fsync_fails_reopen(d: Driver) -> None:
    h = d.open()
    d.call(h, "enqueue", payload(1, 100))
    d.fail_next("fsync")
    d.call(h, "enqueue", payload(2, 900))  # StorageError; the pages are clean but not on disk
    d.close(h)
    g = d.open()  # same process, same page cache: reads job 2 back
    d.call(g, "enqueue", payload(3, 100))
    for job in _held(d.call(g, "lease", 3)):
        d.call(g, "ack", job)


@workload("fsync_false")
def _w_fsync_false(d: Driver) -> None:
    h = d.open(fsync=False)
    d.call(h, "enqueue_many", [payload(i, 90) for i in range(4)])
    for job in _held(d.call(h, "lease", 2)):
        d.call(h, "ack", job)
    d.call(h, "compact")
    d.call(h, "enqueue", payload(9, 400))


@workload("group_commit")
def _w_group_commit(d: Driver) -> None:
    a, b = d.open(), d.open()
    d.call(a, "enqueue", payload(1, 100))
    # a writes its batch and releases the lock; before its fsync starts, b writes,
    # fsyncs and returns (its fsync covers a's batch too); then a's fsync runs.
    d.before_next_fsync(lambda: d.call(b, "enqueue_many", [payload(10 + i, 300)
                                                            for i in range(3)]))
    d.call(a, "enqueue", payload(2, 700))
    d.before_next_fsync(lambda: (d.call(b, "lease", 2), None)[1])
    d.call(a, "enqueue", payload(3, 500))
    for job in _held(d.call(a, "lease", 5)):
        d.call(b, "ack", job)


@workload("shared_fsync")
def _w_shared_fsync(d: Driver) -> None:
    # Two processes, as far as NAME.sync can tell (two descriptors on it).
    a, b = d.open(share_fsyncs=True), d.open(share_fsyncs=True)
    d.call(a, "enqueue", payload(1, 100))
    # a writes its batch; before it claims, b writes, fdatasyncs (covering a's batch
    # too) and publishes; a then finds itself covered and returns without an fsync.
    d.before_next_claim(lambda: d.call(b, "enqueue_many", [payload(10 + i, 300)
                                                            for i in range(2)]))
    d.call(a, "enqueue", payload(2, 700))
    d.before_next_claim(lambda: (d.call(b, "lease", 2), None)[1])
    leased = _held(d.call(a, "lease", 1))
    for job in leased:
        d.call(b, "ack", job)
    d.call(a, "enqueue", payload(3, 500))


@workload("shared_fsync_peer_dies")
def _w_shared_fsync_peer_dies(d: Driver) -> None:
    a, b = d.open(share_fsyncs=True), d.open(share_fsyncs=True)
    d.call(a, "enqueue", payload(1, 100))
    # b dies in its fdatasync, holding the flock: it published nothing, so a must
    # fdatasync for itself (a durable published first would let a return unsynced).
    d.before_next_claim(lambda: (d.crash_next("fsync"), d.call(b, "enqueue", payload(2, 300)),
                                 None)[2])
    d.call(a, "enqueue", payload(3, 700))
    for job in _held(d.call(a, "lease", 3)):
        d.call(a, "ack", job)


@workload("shared_fsync_compaction")
def _w_shared_fsync_compaction(d: Driver) -> None:
    a, b = d.open(share_fsyncs=True), d.open(share_fsyncs=True)
    d.call(a, "enqueue", payload(1, 100))
    d.call(b, "enqueue", payload(2, 100))
    d.call(a, "compact")
    # a's claim in the new generation is covered by b's, which must not be confused
    # with what NAME.sync said of the old one.
    d.before_next_claim(lambda: d.call(b, "enqueue", payload(3, 400)))
    d.call(a, "enqueue", payload(4, 400))
    d.call(b, "compact")
    d.before_next_claim(lambda: (d.call(a, "lease", 2), None)[1])
    for job in _held(d.call(b, "lease", 2)):
        d.call(b, "ack", job)


@workload("checkpoints")
def _w_checkpoints(d: Driver) -> None:
    # Checkpoints at every close and every 1 KiB logged, instead of after MiBs.
    often = {"checkpoint_after_bytes": 0, "checkpoint_every_bytes": 1024}
    h = d.open(**often)
    d.call(h, "enqueue_many", [payload(i, 200) for i in range(3)])
    d.close(h)  # writes NAME.000000.ckpt
    g = d.open(**often)  # loads it
    for job in _held(d.call(g, "lease", 1)):
        d.call(g, "ack", job)
    d.call(g, "enqueue_many", [payload(10 + i, 400) for i in range(3)])  # auto checkpoint
    d.call(g, "compact")  # the new generation's checkpoint
    d.close(g)
    k = d.open(fsync=False, **often)  # an un-synced log above a checkpoint
    d.call(k, "enqueue", payload(30, 300))
    d.close(k)
    d.call(d.open(**often), "stats")


@workload("checkpoint_after_switch")
def _w_checkpoint_after_switch(d: Driver) -> None:
    # a compacts; its checkpoints in the new generation (in the background, then at
    # close) go beside the switch's, which b, still on generation 0, follows by.
    often = {"checkpoint_after_bytes": 0, "checkpoint_every_bytes": 1024}
    a, b = d.open(**often), d.open(**often)
    d.call(a, "enqueue_many", [payload(i, 200) for i in range(3)])
    d.call(b, "stats")
    d.call(a, "compact")
    d.call(a, "enqueue_many", [payload(10 + i, 400) for i in range(3)])  # auto checkpoint
    d.close(a)  # and the one at close
    for job in _held(d.call(b, "lease", 1)):  # b follows the switch here
        d.call(b, "ack", job)
    d.close(b)
    d.call(d.open(**often), "stats")


@workload("results_compaction")
def _w_results(d: Driver) -> None:
    # Results kept with finished jobs (ACK with "r"), across a compaction (FINISHED
    # records) and until their retention runs out (FORGET).
    h = d.open(result_ttl=100.0)
    d.call(h, "enqueue_many", [payload(i, 150) for i in range(3)])
    leased = _held(d.call(h, "lease", 1))
    for job in leased:
        d.call(h, "ack", job, result={"sum": 3, "pad": "r" * 300})
    for job in _held(d.call(h, "lease", 1)):
        nxt = d.call(h, "ack_and_lease", job, result=None)
        if isinstance(nxt, Job):
            d.call(h, "ack", nxt, result=[1, 2], result_ttl=500.0)
    d.call(h, "compact")
    d.advance(200)  # the first two results' retention ends: the next write forgets them
    d.call(h, "enqueue", payload(9, 100))
    d.call(h, "compact")
    if leased:
        d.call(h, "get", leased[0].id)


@workload("cancel_pause")
def _w_cancel_pause(d: Driver) -> None:
    # CANCEL of a pending and of a leased job (the holder's ack is then refused),
    # PAUSE/RESUME across a compaction, DELETE of dead jobs.
    a, b = d.open(max_attempts=1), d.open(max_attempts=1)
    jobs = d.call(a, "enqueue_many", [payload(i, 200) for i in range(4)])
    held = _held(d.call(b, "lease", 2))
    if isinstance(jobs, list) and len(jobs) == 4:
        d.call(a, "cancel", jobs[3].id)
    if held:
        d.call(a, "cancel", held[0].id)
        d.call(b, "ack", held[0], result="late")  # NotLeasedError: writes nothing
    d.call(a, "pause")
    d.call(b, "enqueue", payload(7, 300))
    d.call(b, "lease", 1)  # paused: nothing
    d.call(a, "compact")
    d.call(b, "resume")
    for job in held[1:] + _held(d.call(b, "lease", 1)):
        d.call(b, "nack", job, error="boom")  # dead on its only attempt
    d.call(a, "delete_dead")
    d.call(a, "compact")


def random_workload(seed: int, length: int = 50, handles: int = 2) -> Workload:
    """A seeded random mix of exactly `length` calls over `handles` handles.

    Enqueues (single, batched, keyed), leases, acks, nacks (max_attempts=2, so
    jobs reach the DLQ), extends, clock jumps (the next call then reclaims
    expired leases), compactions, requeue_dead, purge and reads.
    """

    def run(d: Driver) -> None:
        rng = random.Random(seed)
        hs = [d.open(max_attempts=2) for _ in range(handles)]
        held: list[Job] = []
        for _ in range(length):
            h = rng.choice(hs)
            roll = rng.random()
            if roll > 0.56 and roll < 0.74 and not held:
                roll = 0.4  # nothing held to settle: lease instead
            if roll < 0.20:
                d.call(h, "enqueue", payload(rng.randrange(1000), rng.choice((40, 200, 700))),
                       priority=rng.randrange(3))
            elif roll < 0.28:
                d.call(h, "enqueue_many", [payload(i, rng.randrange(30, 400))
                                           for i in range(rng.randrange(2, 8))])
            elif roll < 0.31:
                d.call(h, "enqueue", payload(1, 60), job_id=f"key{rng.randrange(4)}")
            elif roll < 0.47:
                if rng.random() < 0.3:
                    d.advance(rng.choice((10, 40)))  # leases run out: this call reclaims
                held += _held(d.call(h, "lease", rng.randrange(1, 3),
                                     visibility_timeout=rng.choice((5, 30))))
            elif roll < 0.56:
                d.call(h, "ack", held.pop(rng.randrange(len(held)))) if held else \
                    d.call(h, "stats")
            elif roll < 0.66:
                d.call(h, "nack", held.pop(rng.randrange(len(held))), error="e",
                       delay=rng.choice((0, 3)))
            elif roll < 0.70:
                index = rng.randrange(len(held))
                got = d.call(h, "extend", held[index], 20)
                if isinstance(got, Job):
                    held[index] = got
            elif roll < 0.74:
                d.call(h, "ack_many", held[:2])
                del held[:2]
            elif roll < 0.82:
                d.call(h, "compact")
            elif roll < 0.89:
                d.call(h, "requeue_dead")
            elif roll < 0.94:
                d.call(h, "purge")
            else:
                d.call(h, "stats")

    run.__name__ = f"random{seed}x{length}"
    return run


WORKLOADS["mixed50"] = random_workload(34, 50)
WORKLOADS["mixed50"].__name__ = "mixed50"

def _ace_expire(d: Driver, h: int) -> None:
    d.advance(15)  # past every lease's deadline: this lease call reclaims them
    d.call(h, "lease", 2)


_ACE_OPS: dict[str, Callable[[Driver, int, list[Job]], None]] = {
    "enqueue": lambda d, h, held: d.call(h, "enqueue", payload(5, 300)),
    "enqueue_many": lambda d, h, held: d.call(h, "enqueue_many",
                                              [payload(i, 250) for i in range(3)]),
    "lease": lambda d, h, held: held.extend(_held(d.call(h, "lease", 1,
                                                         visibility_timeout=10))),
    "ack": lambda d, h, held: d.call(h, "ack", held.pop()) if held else None,
    "nack": lambda d, h, held: d.call(h, "nack", held.pop(), delay=0) if held else None,
    "snooze": lambda d, h, held: d.call(h, "snooze", held.pop(), 0) if held else None,
    "extend": lambda d, h, held: d.call(h, "extend", held[-1], 30) if held else None,
    "expire": lambda d, h, held: _ace_expire(d, h),
    "compact": lambda d, h, held: d.call(h, "compact"),
    "requeue_dead": lambda d, h, held: d.call(h, "requeue_dead"),
    "purge": lambda d, h, held: d.call(h, "purge"),
    "ack_result": lambda d, h, held: d.call(h, "ack", held.pop(), result={"r": 1})
    if held else None,
    "cancel": lambda d, h, held: d.call(h, "cancel", held[-1].id) if held else None,
    "pause": lambda d, h, held: d.call(h, "pause"),
}


def ace_workloads(length: int = 2, ops: Sequence[str] | None = None,
                  seeded: bool = True) -> dict[str, Workload]:
    """Every sequence of up to `length` ops on two handles, from a small seeded queue (ACE)."""
    names = list(ops or _ACE_OPS)
    out: dict[str, Workload] = {}

    def make(sequence: tuple[tuple[str, int], ...]) -> Workload:
        def run(d: Driver) -> None:
            hs = [d.open(max_attempts=1), d.open(max_attempts=1)]
            held: list[Job] = []
            if seeded:  # one pending, one leased, one dead job to act on
                d.call(hs[0], "enqueue_many", [payload(i, 120) for i in range(3)])
                held += _held(d.call(hs[0], "lease", 1, visibility_timeout=10))
                for job in _held(d.call(hs[0], "lease", 1, visibility_timeout=10)):
                    d.call(hs[0], "nack", job, delay=0)
            for op, h in sequence:
                _ACE_OPS[op](d, hs[h], held)
        return run

    def sequences(n: int) -> Iterator[tuple[tuple[str, int], ...]]:
        if n == 0:
            yield ()
            return
        for rest in sequences(n - 1):
            for op in names:
                for h in (0, 1):
                    yield (*rest, (op, h))

    for n in range(1, length + 1):
        for sequence in sequences(n):
            if any(h == 1 for _, h in sequence[:1]):
                continue  # by symmetry the first op runs on handle 0
            key = "ace:" + "+".join(f"{op}@{h}" for op, h in sequence)
            fn = make(sequence)
            fn.__name__ = key
            out[key] = fn
    return out


def long_run(*, seed: int = 0, ace_length: int = 3, random_workloads: int = 8,
             random_length: int = 300, profiles: Sequence[str] = PROFILES,
             deadline: float | None = None,
             progress: Callable[[str], None] | None = print) -> Report:
    """The long run (research gate G2), for tools/torture.py.

    Every scenario of the library under Bounds.torture (byte-exhaustive
    process crashes, 64 random subsets per crash point, more compound and
    continued states), then every ACE sequence up to `ace_length` ops on two
    handles (Bounds.quick, profiles ext4ish and weak), then `random_workloads`
    random workloads of `random_length` calls. Stops early (and says so in
    the report's workload list) once time.monotonic() passes `deadline`.
    Returns the merged Report; `progress` gets one line per workload.
    """
    total = Report()
    plan: list[tuple[str, Workload, Sequence[str], Bounds]] = []
    for name, fn in WORKLOADS.items():
        plan.append((name, fn, profiles, Bounds.torture(seed)))
    for name, fn in ace_workloads(ace_length).items():
        plan.append((name, fn, ("ext4ish", "weak"), Bounds.quick(seed)))
    for k in range(random_workloads):
        fn = random_workload(seed * 1000 + k, random_length)
        plan.append((fn.__name__, fn, profiles, Bounds(random_subsets=16, seed=seed + k)))
    for name, fn, chosen, bounds in plan:
        if deadline is not None and time.monotonic() > deadline:
            total.workloads.append(f"(stopped at the deadline, {len(plan)} planned)")
            break
        report = explore(fn, chosen, bounds, name=name)
        total.merge(report)
        if progress is not None:
            progress(f"{name}: {sum(s.states for s in report.stats.values())} states, "
                     f"{sum(s.unique for s in report.stats.values())} unique, "
                     f"{report.total_violations} violations ({report.seconds:.1f}s)")
    return total


# ==========================================================================
# 8. The regression corpus (tests/crash_corpus/*.json)


def save_fixture(path: str, violation: Violation, *, bug: str, expect: dict[str, Any]) -> None:
    """Keep a failing state (and how it was found) as a JSON regression fixture."""
    import base64
    fixture = {
        "bug": bug, "check": violation.check, "workload": violation.workload,
        "profile": violation.profile, "crash_point": violation.crash_point,
        "strategy": violation.strategy, "message": violation.message,
        "files": {name: base64.b64encode(zlib.compress(data, 9)).decode()
                  for name, data in violation.files.items()},
        "encoding": "zlib+base64",
        "expect": expect,
    }
    with open(path, "w", encoding="utf-8") as f:
        json.dump(fixture, f, indent=1, sort_keys=True)
        f.write("\n")


def load_fixture(path: str) -> dict[str, Any]:
    import base64
    with open(path, encoding="utf-8") as f:
        fixture: dict[str, Any] = json.load(f)
    if fixture.get("kind") == "workload":  # a trace regression: re-explore the workload
        return fixture
    fixture["files"] = {name: zlib.decompress(base64.b64decode(text)) for name, text in
                        fixture["files"].items()}
    return fixture


def check_fixture(fixture: dict[str, Any], directory: str) -> list[str]:
    """The problems a fixture shows now (empty when its fix holds).

    A state fixture's files are opened and checked (I6, I7, I9, the expected
    batch and job count); a workload fixture ("kind": "workload") is explored
    again under its profiles.
    """
    if fixture.get("kind") == "workload":
        report = explore(fixture["workload"], fixture["profile"], Bounds(rot=False))
        return [str(v) for v in report.violations[:5]] if not report.ok else []
    os.makedirs(directory, exist_ok=True)
    opener = _Opener(os.path.dirname(directory) or ".", {})
    opener.dir = directory
    state = _State.make({n: i for i, n in enumerate(fixture["files"])},
                        {i: d for i, d in enumerate(fixture["files"].values())})
    with _quiet():
        outcome = opener.open(state, 1_700_000_100.0, True)
    problems = [f"{check}: {message}" for check, message in outcome.problems]
    expect = fixture["expect"]
    if outcome.error is not None:
        problems.append(f"opening raised {outcome.error}")
        return problems
    if "last_batch" in expect and outcome.last_batch not in expect["last_batch"]:
        problems.append(f"recovered batch {outcome.last_batch}, expected one of "
                        f"{expect['last_batch']}")
    for job_id in expect.get("present", []):
        if not any(j.startswith(job_id) for j in outcome.jobs):
            problems.append(f"job {job_id} is missing")
    if "jobs" in expect and len(outcome.jobs) != expect["jobs"]:
        problems.append(f"{len(outcome.jobs)} jobs, expected {expect['jobs']}")
    return problems


def iter_fixtures(directory: str) -> Iterable[str]:
    if os.path.isdir(directory):
        for name in sorted(os.listdir(directory)):
            if name.endswith(".json"):
                yield os.path.join(directory, name)
