"""Group commit between threads (log/groupcommit.py), audited with real threads and processes.

The audit of test_process_sync.py, per thread: two processes, four threads
each (three enqueue, one runs an ack_and_lease loop), write through a
FileSystem that appends to one O_APPEND file shared by all a line after
each write to the log, one before and one after each fdatasync of it, and
one after each call returned, each line naming its process and thread. An
O_APPEND write is atomic and ordered, so the file is a real-time order of
those moments: every returned call must have its last log write before the
start of an fdatasync (any thread's, of the same inode) that ended before
the call returned. The fdatasyncs take 2 ms longer, as on a slow disk, so
that a thread nearly always finds another's in flight: one that began
before its write, which must not count, or one that began after it.

One process is killed with SIGKILL mid-run; what it returned must be on disk
too, and the reopened queue must hold every job whose enqueue returned. The
same run with a sync_to that returns once the fdatasync it found in flight
ends (without asking whether that one began after its write) must fail the
audit: the test has teeth.
"""

from __future__ import annotations

import signal
import threading

from harness.support import TempDirTestCase, file_queue, spawn_python, store_of, wait_until

from file.test_process_sync import AUDITED_FS, audit_problems, start_together
from nobroker import Queue
from nobroker.file.log.groupcommit import GroupCommit

THREADS = r"""
import os, sys, threading, time
from nobroker import Queue
from nobroker.backend import Settings
from nobroker.file.backend import FileBackend, FileOptions
from nobroker.file.disk.fs import FileSystem
from nobroker.file.log.groupcommit import GroupCommit

directory, audit_path, calls, broken = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
audit = os.open(audit_path, os.O_WRONLY | os.O_APPEND)
pid = os.getpid()

def me():
    return f"{pid}.{threading.get_ident()}"
""" + AUDITED_FS + r"""
if broken == "1":
    # The bug the audit must catch: a thread that finds an fdatasync in flight
    # waits for it and returns, though that one may have begun before its write.
    # (sync_to's bookkeeping done right, its check of what the wait covered skipped.)
    correct = GroupCommit.sync_to
    def sync_to(self, log, offset):
        with self._sync_mutex:
            busy = self._syncing
        if not busy:
            return correct(self, log, offset)
        correct(self, log, self._durable + 1)  # wait for the fdatasync in flight only
        return False
    GroupCommit.sync_to = sync_to

q = Queue.from_backend(FileBackend(directory, "default", Settings(visibility_timeout=3600),
                                   FileOptions(fs=Audited(), auto_compact=None)))
go = threading.Event()

def produce():
    go.wait()
    for i in range(calls):
        job = q.enqueue({"from": me(), "n": i})
        note(f"R {me()} {job.id}")

def work():
    go.wait()
    job = q.lease_one()
    note(f"R {me()} -")
    for _ in range(calls):
        job = q.ack_and_lease(job)
        note(f"R {me()} -")

threads = [threading.Thread(target=produce) for _ in range(3)] + [threading.Thread(target=work)]
for thread in threads:
    thread.start()
sys.stdout.write("ready\n"); sys.stdout.flush()
sys.stdin.readline()  # both processes start at once
go.set()
for thread in threads:
    thread.join()
counters = q.backend.handle.counters
sys.stdout.write(f"done {counters.durable_calls} {counters.fdatasyncs}\n"); sys.stdout.flush()
q.close()
"""


class ThreadAuditTest(TempDirTestCase):
    def run_audited(self, calls: int, broken: bool) -> tuple[list[str], list[str], str]:
        """(the audit's lines, the enqueued ids that returned, the survivor's "done" line)."""
        directory = str(self.tmp / "q")
        audit = str(self.tmp / "audit")
        open(audit, "w").close()
        with Queue(directory) as q:
            q.enqueue_many(range(2 * calls + 2))  # for the two ack_and_lease threads
        children = [spawn_python(THREADS, directory, audit, str(calls), "1" if broken else "0")
                    for _ in range(2)]
        victim, survivor = children
        try:
            start_together(self, children)

            def victim_returned() -> int:
                with open(audit, encoding="ascii") as f:
                    return sum(1 for line in f if line.startswith(f"R {victim.pid}."))

            # Mid-run: after some of its calls returned, long before all of them.
            wait_until(lambda: victim_returned() >= calls // 2, timeout=120,
                       what="the victim's first calls")
            victim.send_signal(signal.SIGKILL)
            victim.wait(timeout=60)
            self.assertEqual(victim.returncode, -signal.SIGKILL)
            out, err = survivor.communicate(timeout=300)
            self.assertEqual(survivor.returncode, 0, err.decode()[-2000:])
        finally:
            for child in children:
                if child.poll() is None:
                    child.kill()
                    child.wait()
                for pipe in (child.stdin, child.stdout, child.stderr):
                    if pipe is not None:
                        pipe.close()
        with open(audit, encoding="ascii") as f:
            lines = f.read().splitlines()
        enqueued = [line.split()[2] for line in lines
                    if line.startswith("R ") and line.split()[2] != "-"]
        return lines, enqueued, out.decode().strip()

    def test_every_returned_call_of_threads_in_two_processes_was_covered_and_survives(
            self) -> None:
        calls = 60
        lines, enqueued, done = self.run_audited(calls, broken=False)
        problems, _, returned = audit_problems(lines)
        self.assertEqual(problems[:5], [])
        # The survivor's 4 threads all returned; the victim's some but not all.
        each = 4 * calls + 1  # three threads' enqueues, a lease_one and the ack_and_leases
        self.assertGreaterEqual(returned, each + calls // 2)
        self.assertLess(returned, 2 * each)
        # Threads shared fdatasyncs (group commit), as the handle's counters say too.
        _, durable_calls, fdatasyncs = done.split()
        print(f"one process, 4 threads: {fdatasyncs} fdatasyncs for {durable_calls} "
              f"durable calls", flush=True)
        self.assertGreaterEqual(int(durable_calls), 4 * calls)
        self.assertLess(int(fdatasyncs), 0.7 * int(durable_calls),
                        "the threads did not share fdatasyncs")
        # On disk: the reopened queue holds every job whose enqueue returned,
        # the killed process's included.
        with Queue(str(self.tmp / "q"), lock_timeout=5) as q:
            present = {entry.id for entry in store_of(q).state.entries()}
        self.assertEqual(set(enqueued) - present, set())

    def test_the_audit_fails_a_sync_that_trusts_an_fdatasync_begun_before_its_write(
            self) -> None:
        lines, _, _ = self.run_audited(60, broken=True)
        problems, _, returned = audit_problems(lines)
        print(f"broken sync_to: {len(problems)} of {returned} returned calls uncovered",
              flush=True)
        self.assertGreater(len(problems), 0, "the broken sync_to passed the audit")


class CountersTest(TempDirTestCase):
    def test_one_thread_issues_one_fdatasync_per_durable_call_and_none_without_fsync(
            self) -> None:
        with file_queue(self.tmp / "q", auto_compact=None) as q:
            q.enqueue("warm")  # the first write may grow the file (its own fsync)
            counters = store_of(q).counters
            before = (counters.durable_calls, counters.fdatasyncs)
            for i in range(20):
                q.enqueue(i)
            job = q.lease_one()
            q.ack_and_lease(job)
            q.stats()  # a read waits for nothing
            self.assertEqual((counters.durable_calls - before[0],
                              counters.fdatasyncs - before[1]), (22, 22))
        with file_queue(self.tmp / "r", fsync=False) as q:
            q.enqueue(1)
            self.assertEqual((store_of(q).counters.durable_calls,
                              store_of(q).counters.fdatasyncs), (0, 0))



class WakeBookkeepingTest(TempDirTestCase):
    """sync_to's waiter list, white-box: who is woken when an fdatasync ends, and a
    waiter that leaves early (a signal's exception) passing its turn on."""

    def waiters(self, log: GroupCommit, *offsets: int) -> list[threading.Lock]:
        locks = []
        for offset in offsets:
            lock = threading.Lock()
            lock.acquire()
            log._sync_waiters.append((offset, lock))
            locks.append(lock)
        return locks

    def test_an_fdatasync_wakes_the_covered_waiters_and_one_to_run_the_next(self) -> None:
        log = GroupCommit()
        a, b, c, d = self.waiters(log, 10, 20, 30, 40)
        log._durable = 20
        woken = log._wake_after_sync()
        self.assertEqual(woken, [a, b, c])  # 10 and 20 covered; 30 runs the next
        self.assertEqual(log._sync_waiters, [(40, d)])  # covered by that next one

    def test_a_waiter_woken_to_run_the_next_fdatasync_that_leaves_passes_it_on(
            self) -> None:
        log = GroupCommit()
        log._durable = 0
        leader, = self.waiters(log, 30)
        log._sync_waiters.clear()  # a syncer woke it (its turn to run the next) ...
        next_one, = self.waiters(log, 40)
        log._abandon_wait(30, leader)  # ... and it leaves instead
        self.assertFalse(next_one.locked(), "nobody was given the turn")
        self.assertEqual(log._sync_waiters, [])
        # One still in the list just leaves it, waking nobody.
        first, second = self.waiters(log, 50, 60)
        log._abandon_wait(50, first)
        self.assertEqual(log._sync_waiters, [(60, second)])
        self.assertTrue(second.locked())
