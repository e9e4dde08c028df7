"""Group commit across processes (NAME.sync, file/syncfile.py), with real processes.

- The audit: four processes enqueue and ack through a FileSystem that
  appends, to one O_APPEND file shared by all, a line after each write to
  the log returned, one before and one after each fdatasync of it, and one
  after each call returned. An O_APPEND write is atomic and ordered, so the
  file is a real-time order of those moments: every returned call must have
  its last log write before the start of an fdatasync (anyone's, of the same
  inode) that ended before the call returned. And the fdatasyncs must be
  shared: well below one per call in total (without sharing: one per call).
- kill -9: several processes enqueue and ack while all of them are killed
  at random moments; every call that returned is there, no returned ack comes
  back.
- A process killed with SIGKILL inside its fdatasync, holding the flock on
  NAME.sync, published nothing and blocks nobody.
- NAME.sync's slots: a torn, foreign (another generation, another boot) or
  missing slot is never trusted; a cut lowers them; no flock or no boot id
  (and fsync=False, read-only) means no sync file and one fdatasync per call.
"""

from __future__ import annotations

import errno
import fcntl
import os
import random
import struct
import time
import unittest
from typing import Any
from unittest import mock

from harness.support import TempDirTestCase, file_queue, spawn_python, store_of

from file.test_crash import Child
from nobroker import Queue, StorageError
from nobroker.file.disk.fs import FileSystem
from nobroker.file.log.syncfile import DURABLE, SLOT, WRITTEN, SharedSync, sync_filename

SEED = int(os.environ.get("NOBROKER_CRASH_SEED", "20261129"))

# The auditing FileSystem both audits use (here and test_thread_sync.py): a line
# per log write, and one before and after each fdatasync of it, each naming the
# writer as `me()` says (the child defines it: a process, or a process's thread).
AUDITED_FS = r"""
def note(text):
    os.write(audit, f"{text}\n".encode())

class Audited(FileSystem):
    def pwrite(self, fd, data, offset):
        n = super().pwrite(fd, data, offset)
        if ".log" in os.readlink(f"/proc/self/fd/{fd}") and any(data):
            note(f"W {me()} {os.fstat(fd).st_ino} {offset + n}")
        return n
    def fdatasync(self, fd):
        log = ".log" in os.readlink(f"/proc/self/fd/{fd}")
        if log:
            note(f"S {me()} {os.fstat(fd).st_ino}")
        super().fdatasync(fd)
        if log:
            time.sleep(0.002)  # a slow disk: the others write meanwhile, every time
            note(f"E {me()} {os.fstat(fd).st_ino}")
"""

# A child: `role` (produce | work) for `calls` calls, through an auditing FileSystem.
AUDITED = r"""
import os, sys, time
from nobroker import Queue
from nobroker.backend import Settings
from nobroker.file.backend import FileBackend, FileOptions
from nobroker.file.disk.fs import FileSystem

directory, audit_path, role, calls = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
audit = os.open(audit_path, os.O_WRONLY | os.O_APPEND)
pid = os.getpid()

def me():
    return str(pid)
""" + AUDITED_FS + r"""

q = Queue.from_backend(FileBackend(directory, "default", Settings(),
                                   FileOptions(fs=Audited(), auto_compact=None,
                                               share_fsyncs=True)))
sys.stdout.write("ready\n"); sys.stdout.flush()
sys.stdin.readline()  # everyone starts at once
done = 0
while done < calls:
    if role == "produce":
        q.enqueue({"from": pid, "n": done})
        note(f"R {pid}")
        done += 1
    else:
        leased = q.lease(4, visibility_timeout=3600)
        note(f"R {pid}")
        for job in leased:
            q.ack(job)
            note(f"R {pid}")
            done += 1
q.close()
sys.stdout.write("done\n"); sys.stdout.flush()
"""


def audit_problems(lines: list[str]) -> tuple[list[str], int, int]:
    """(returned calls no fdatasync covered, fdatasyncs, calls) of an audit file."""
    last_write: dict[str, tuple[int, str]] = {}  # pid -> (line index, inode) of its last W
    started: dict[str, tuple[int, str]] = {}  # pid -> its fdatasync in progress
    syncs: list[tuple[int, int, str]] = []  # (start line, end line, inode)
    returns: list[tuple[int, str, tuple[int, str]]] = []
    for index, line in enumerate(lines):
        kind, pid, *rest = line.split()
        if kind == "W":
            last_write[pid] = (index, rest[0])
        elif kind == "S":
            started[pid] = (index, rest[0])
        elif kind == "E":
            begin, inode = started.pop(pid)
            syncs.append((begin, index, inode))
        elif kind == "R":
            returns.append((index, pid, last_write[pid]))
    problems = []
    for index, pid, (wrote, inode) in returns:
        if not any(wrote < begin and end < index and ino == inode for begin, end, ino in syncs):
            problems.append(f"line {index}: pid {pid}'s call returned, but no fdatasync of "
                            f"inode {inode} began after its write (line {wrote}) and ended "
                            f"before")
    return problems, len(syncs), len(returns)


def start_together(test: unittest.TestCase, children: list[Any]) -> None:
    """Wait until every audited child said "ready", then tell them all to go."""
    for child in children:
        assert child.stdout is not None
        test.assertEqual(child.stdout.readline(), b"ready\n", child.stderr)
    for child in children:
        assert child.stdin is not None
        child.stdin.write(b"go\n")
        child.stdin.flush()


class AuditTest(TempDirTestCase):
    def run_audited(self, roles: list[str], calls: int) -> tuple[list[str], int, int]:
        directory = str(self.tmp / "q")
        audit = str(self.tmp / "audit")
        open(audit, "w").close()
        with file_queue(directory, share_fsyncs=True) as q:
            q.enqueue_many(range(calls * roles.count("work")))
        children = [spawn_python(AUDITED, directory, audit, role, str(calls))
                    for role in roles]
        try:
            start_together(self, children)
            for child in children:
                _, err = child.communicate(timeout=300)
                self.assertEqual(child.returncode, 0, err.decode()[-2000:])
        finally:
            for child in children:
                if child.poll() is None:
                    child.kill()
                    child.wait()
        with open(audit, encoding="ascii") as f:
            return audit_problems(f.read().splitlines())

    def test_every_returned_call_was_covered_by_an_fdatasync_and_four_processes_share_them(
            self) -> None:
        problems, syncs, calls = self.run_audited(["produce", "produce", "work", "work"], 400)
        print(f"4 processes: {syncs} fdatasyncs for {calls} calls "
              f"({syncs / calls:.2f} per call)", flush=True)
        self.assertGreaterEqual(calls, 1600 + 200)  # 800 enqueues, 800 acks, the leases
        self.assertEqual(problems[:5], [])
        # Without sharing it is one per call and more (file growth); the children's
        # fdatasyncs take 2 ms longer, as on a slow disk, so that the others' writes
        # land while one runs: with 4 processes most calls are covered by a peer's.
        self.assertLess(syncs, 0.7 * calls, "the processes did not share fdatasyncs")

    def test_the_audit_catches_a_call_that_returned_uncovered(self) -> None:
        # The checker itself can fail: a return before the fdatasync that began after
        # the write ended, or only a fdatasync that began before the write.
        self.assertEqual(len(audit_problems(["W 1 7 100", "S 2 7", "R 1", "E 2 7"])[0]), 1)
        self.assertEqual(len(audit_problems(["S 2 7", "W 1 7 100", "E 2 7", "R 1"])[0]), 1)
        self.assertEqual(len(audit_problems(["W 1 7 100", "S 2 8", "E 2 8", "R 1"])[0]), 1)
        self.assertEqual(audit_problems(["W 1 7 100", "S 2 7", "E 2 7", "R 1"])[0], [])


ENQUEUE_ACK_LOOP = r"""
import os, sys
from nobroker import Queue
from nobroker.backend import Settings
from nobroker.file.backend import FileBackend, FileOptions
q = Queue.from_backend(FileBackend(sys.argv[1], "default", Settings(visibility_timeout=3600),
                                   FileOptions(share_fsyncs=True)))
os.write(1, b"ready\n")
i = 0
while True:
    job = q.enqueue({"pid": os.getpid(), "i": i})
    os.write(1, f"enqueued {job.id}\n".encode())
    leased = q.lease(2)
    if leased:
        os.write(1, ("leased " + " ".join(j.id for j in leased) + "\n").encode())
    for job in leased:
        q.ack(job)
        os.write(1, f"acked {job.id}\n".encode())
    i += 1
"""


class KilledTogetherTest(TempDirTestCase):
    def test_returned_calls_of_four_processes_survive_killing_them_all(self) -> None:
        rng = random.Random(SEED + 14)
        directory = str(self.tmp / "q")
        enqueued: set[str] = set()
        leased: set[str] = set()
        acked: set[str] = set()
        for round_ in range(4):
            children = [Child(ENQUEUE_ACK_LOOP, directory) for _ in range(4)]
            try:
                for child in children:
                    child.wait_ready()
                for child in children:
                    child.wait_lines(rng.randrange(1, 30))
                lines: list[str] = []
                for child in rng.sample(children, len(children)):
                    time.sleep(rng.uniform(0, 0.02))
                    lines += child.kill()
            finally:
                for child in children:
                    child.close()
            for line in lines:
                what, *ids = line.split()
                {"enqueued": enqueued, "leased": leased, "acked": acked}[what].update(ids)
            with Queue(directory, lock_timeout=5) as q:  # the dead holders' locks are free
                present = {e.id for e in store_of(q).state.entries()}
            # Gone without a reported ack: only a leased job whose ack was in flight.
            self.assertEqual(enqueued - present - acked - leased, set(),
                             f"round {round_}: a returned enqueue was lost")
            self.assertEqual(acked & present, set(), f"round {round_}: an acked job came back")


DIES_IN_FDATASYNC = r"""
import os, signal, sys
from nobroker.file.disk.fs import FileSystem
from nobroker.file.backend import FileBackend, FileOptions
from nobroker.backend import Settings
from nobroker import Queue

class Dies(FileSystem):
    def fdatasync(self, fd):
        if ".log" in os.readlink(f"/proc/self/fd/{fd}") and self.armed:
            os.write(1, b"dying\n")
            os.kill(os.getpid(), signal.SIGKILL)  # holding NAME.sync's flock
        super().fdatasync(fd)

fs = Dies()
fs.armed = False
q = Queue.from_backend(FileBackend(sys.argv[1], "default", Settings(),
                                   FileOptions(fs=fs, share_fsyncs=True)))
q.enqueue({"warm": 1})  # grows the file: later enqueues fdatasync only in the claim
fs.armed = True
q.enqueue({"never": "returns"})
"""


class CountingFS(FileSystem):
    def __init__(self) -> None:
        self.fdatasyncs = 0

    def fdatasync(self, fd: int) -> None:
        self.fdatasyncs += 1
        super().fdatasync(fd)


class KilledHolderTest(TempDirTestCase):
    def test_a_syncer_killed_holding_the_flock_blocks_nobody_and_published_nothing(
            self) -> None:
        directory = str(self.tmp / "q")
        child = spawn_python(DIES_IN_FDATASYNC, directory)
        out, err = child.communicate(timeout=60)
        self.assertEqual(out, b"dying\n", err.decode()[-2000:])
        self.assertEqual(child.returncode, -9)
        fs = CountingFS()
        q = file_queue(directory, fs=fs, share_fsyncs=True)
        try:
            # The kernel dropped the flock: it can be taken without waiting.
            fd = os.open(os.path.join(directory, sync_filename("default")), os.O_RDWR)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)
            # Its batch is in the log (the page cache survived), but no claim covers it.
            store = store_of(q)
            self.assertLess(store.shared._read(store.log)[1], store.log.end)
            before = fs.fdatasyncs
            q.enqueue({"after": "the kill"})
            # Nothing claimed the dead syncer's batch durable: this call synced itself.
            self.assertEqual(fs.fdatasyncs - before, 1)
        finally:
            q.close()


class FailingWriteFS(FileSystem):
    """ENOSPC for the next write to a log, once armed."""

    fail_next = False

    def pwrite(self, fd: int, data: bytes, offset: int) -> int:
        if self.fail_next and ".log" in os.readlink(f"/proc/self/fd/{fd}"):
            self.fail_next = False
            raise OSError(errno.ENOSPC, "no space left (injected)")
        return super().pwrite(fd, data, offset)


class NoBootIdFS(FileSystem):
    def boot_id(self) -> bytes | None:
        return None


class SyncFileTest(TempDirTestCase):
    def open(self, **kwargs: Any) -> Any:
        q = file_queue(self.tmp / "q", share_fsyncs=True, **kwargs)
        self.addCleanup(q.close)
        return q

    def slots(self) -> bytes:
        return (self.tmp / "q" / sync_filename("default")).read_bytes()

    def test_a_write_publishes_written_and_a_sync_durable_naming_this_log(self) -> None:
        q = self.open()
        q.enqueue({"a": 1})
        store = store_of(q)
        shared, log = store.shared, store.log
        self.assertEqual(shared._read(log), (log.end, log.end))
        self.assertEqual(log.durable, log.end)

    def test_a_covered_call_makes_no_fdatasync_and_an_uncovered_one_does(self) -> None:
        fs_a, fs_b = CountingFS(), CountingFS()
        a, b = self.open(fs=fs_a), self.open(fs=fs_b)  # two descriptors: two "processes"
        a.enqueue({"warm": 1})
        b.enqueue({"warm": 2})
        store_a, store_b = store_of(a), store_of(b)
        # a writes without syncing; b's sync then covers a's batch too.
        before_a, before_b = fs_a.fdatasyncs, fs_b.fdatasyncs
        real = store_a.log.sync_to
        pending: list[int] = []
        with mock.patch.object(store_a.log, "sync_to",
                               lambda offset, shared=None: pending.append(offset)):
            a.enqueue({"a": 3})
        b.enqueue({"b": 4})
        real(pending[0], store_a.shared)
        self.assertEqual((fs_a.fdatasyncs - before_a, fs_b.fdatasyncs - before_b), (0, 1))
        self.assertGreaterEqual(store_a.log.durable, pending[0])
        # Nobody synced what a writes next: it fdatasyncs itself.
        a.enqueue({"a": 5})
        self.assertEqual(fs_a.fdatasyncs - before_a, 1)
        del store_b

    def test_torn_foreign_or_stale_slots_are_never_trusted(self) -> None:
        q = self.open()
        q.enqueue({"a": 1})
        store = store_of(q)
        shared, log = store.shared, store.log
        path = self.tmp / "q" / sync_filename("default")
        good = self.slots()
        for where in range(0, 2 * SLOT, 7):  # a flipped byte anywhere in either slot
            damaged = bytearray(good)
            damaged[where] ^= 0x40
            path.write_bytes(bytes(damaged))
            found = shared._read(log)
            slot = where // SLOT
            if where % SLOT < 60:  # the body and its CRC; the padding is not read
                self.assertIsNone(found[slot], f"byte {where} flipped was trusted")
            self.assertIsNotNone(found[1 - slot])
        path.write_bytes(good)
        other = SharedSync(store.fs, shared.fd, b"another boot!!!!")
        self.assertEqual(other._read(log), (None, None))  # written before a reboot
        log.sync_identity = (log.generation + 1, *log.sync_identity[1:])
        self.assertEqual(shared._read(log), (None, None))  # another generation's
        path.write_bytes(b"")
        log.sync_identity = None
        self.assertEqual(shared._read(log), (None, None))

    def test_a_cut_lowers_both_slots(self) -> None:
        q = self.open()
        q.enqueue({"a": 1})
        store = store_of(q)
        log = store.log
        start = log.end
        q.enqueue({"b": 2})
        self.assertEqual(store.shared._read(log), (log.end, log.end))
        with store.locked():
            store.shared.lower(log, start)
        self.assertEqual(store.shared._read(log), (start, start))

    def test_a_failed_write_lowers_what_the_sync_file_claims_past_its_cut(self) -> None:
        fs = FailingWriteFS()
        q = self.open(fs=fs)
        q.enqueue({"a": 1})
        store = store_of(q)
        log, shared = store.log, store.shared
        start = log.end
        # As a thread of ours could have claimed (the batch a failed apply then cuts):
        fs.write_all(shared.fd, shared._encode(DURABLE, log, start + 500), DURABLE * SLOT)
        fs.fail_next = True
        with self.assertRaises(StorageError):
            q.enqueue({"b": 2})
        self.assertEqual(shared._read(log)[1], start)

    def test_no_sync_file_without_a_boot_id_with_fsync_false_or_read_only(self) -> None:
        for kwargs in ({"fs": NoBootIdFS(), "share_fsyncs": True},
                       {"fsync": False, "share_fsyncs": True}, {}):  # {}: off by default
            with self.subTest(**{k: str(v) for k, v in kwargs.items()}):
                directory = self.tmp / str(len(os.listdir(self.tmp)))
                fs = CountingFS() if "fs" not in kwargs else kwargs["fs"]
                q = file_queue(directory, **kwargs)
                try:
                    q.enqueue({"a": 1})
                    self.assertIsNone(store_of(q).shared)
                finally:
                    q.close()
                self.assertFalse((directory / sync_filename("default")).exists())
                del fs
        with file_queue(self.tmp / "ro-src", share_fsyncs=True) as q:
            q.enqueue({"a": 1})
        os.unlink(self.tmp / "ro-src" / sync_filename("default"))
        reader = file_queue(self.tmp / "ro-src", readonly=True, share_fsyncs=True)
        try:
            self.assertIsNone(store_of(reader).shared)
        finally:
            reader.close()
        self.assertFalse((self.tmp / "ro-src" / sync_filename("default")).exists())

    def test_each_slot_is_a_checksummed_record_of_64_bytes(self) -> None:
        q = self.open()
        q.enqueue({"a": 1})
        data = self.slots()
        self.assertEqual(len(data), 2 * SLOT)
        for which in (WRITTEN, DURABLE):
            magic, version, kind = struct.unpack_from("<4sHH", data, which * SLOT)
            self.assertEqual((magic, version, kind), (b"NBSY", 1, which))


if __name__ == "__main__":
    unittest.main()
