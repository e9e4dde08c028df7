"""Durable calls from several processes at once, with real processes.

Each process syncs for itself (group commit shares an fdatasync between the
threads of one process: test_thread_sync.py).

- The audit: four processes enqueue and ack through a FileSystem that
  appends, to one O_APPEND file shared by all, a line after each write to
  the log returned, one before and one after each fdatasync of it, and one
  after each call returned. An O_APPEND write is atomic and ordered, so the
  file is a real-time order of those moments: every returned call must have
  its last log write before the start of an fdatasync (anyone's, of the same
  inode) that ended before the call returned.
- kill -9: several processes enqueue and ack while all of them are killed
  at random moments; every call that returned is there, no returned ack comes
  back.
"""

from __future__ import annotations

import os
import random
import time
import unittest
from typing import Any

from harness.support import TempDirTestCase, file_queue, spawn_python, store_of

from file.test_crash import Child
from nobroker import Queue

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
                                   FileOptions(fs=Audited(), auto_compact=None)))
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
        with file_queue(directory) as q:
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

    def test_every_returned_call_of_four_processes_was_covered_by_an_fdatasync(self) -> None:
        problems, syncs, calls = self.run_audited(["produce", "produce", "work", "work"], 400)
        print(f"4 processes: {syncs} fdatasyncs for {calls} calls "
              f"({syncs / calls:.2f} per call)", flush=True)
        self.assertGreaterEqual(calls, 1600 + 200)  # 800 enqueues, 800 acks, the leases
        self.assertEqual(problems[:5], [])

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
                                   FileOptions()))
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
