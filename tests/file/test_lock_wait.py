"""Waiting for the queue's lock held by another process: blocking, yet bounded.

The claims, with real processes holding the lock: a waiter sleeps in the
kernel's flock (through the SharedLock's acquirer thread), not in a polling
loop, and gets the lock the moment the holder releases it or is killed; a
wait still ends with LockTimeoutError naming the holder after lock_timeout;
a wait that timed out leaks no lock (nor does closing the lock meanwhile);
and threads of several processes exclude each other.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import unittest

from harness.support import TempDirTestCase, spawn_python, wait_until

from nobroker import LockTimeoutError
from nobroker.file.disk.fs import OS
from nobroker.file.disk.lock import SharedLock

HOLDER = r"""
import fcntl, sys
fd = open(sys.argv[1], "a+b")
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.readline()
fcntl.flock(fd, fcntl.LOCK_UN)
print("released", flush=True)
sys.stdin.readline()
"""

# Takes the lock through nobroker (its own acquirer) and reports, within `timeout`.
TAKER = r"""
import sys
from nobroker.file.disk.fs import OS
from nobroker.file.disk.lock import SharedLock
lock = SharedLock(OS, sys.argv[1])
lock.acquire(float(sys.argv[2]))
lock.release()
print("took it", flush=True)
"""

# Threads of one process, each adding to a counter file under the lock.
COUNTER = r"""
import sys, threading
from nobroker.file.disk.fs import OS
from nobroker.file.disk.lock import shared_lock
path, counter, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
lock = shared_lock(OS, path)
def work():
    for _ in range(rounds):
        lock.acquire(60)
        try:
            with open(counter, "r+") as f:
                n = int(f.read() or 0)
                f.seek(0)
                f.write(str(n + 1))
                f.truncate()
        finally:
            lock.release()
threads = [threading.Thread(target=work) for _ in range(3)]
for t in threads: t.start()
for t in threads: t.join()
print("done", flush=True)
"""


@unittest.skipIf(sys.platform == "win32", "Windows polls: msvcrt cannot block with a timeout")
class BlockingLockWaitTest(TempDirTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.path = str(self.tmp / "q.lock")

    def hold(self) -> object:
        holder = spawn_python(HOLDER, self.path)
        self.addCleanup(self.reap, holder)
        assert holder.stdout is not None
        self.assertEqual(holder.stdout.readline().strip(), b"held")
        return holder

    def reap(self, child: object) -> None:
        if child.poll() is None:  # type: ignore[attr-defined]
            child.kill()  # type: ignore[attr-defined]
        child.wait()  # type: ignore[attr-defined]

    def tell(self, child: object, expect: bytes | None = None) -> None:
        child.stdin.write(b"go\n")  # type: ignore[attr-defined]
        child.stdin.flush()  # type: ignore[attr-defined]
        if expect is not None:
            self.assertEqual(child.stdout.readline().strip(), expect)  # type: ignore[attr-defined]

    def wait_in_a_thread(self, lock: SharedLock, timeout: float) -> tuple[threading.Event,
                                                                         list[object]]:
        """A thread that waits for `lock`, says so in the list, and holds it until the
        event is set."""
        outcome: list[object] = []
        got, let_go = threading.Event(), threading.Event()

        def waiter() -> None:
            try:
                lock.acquire(timeout)
            except LockTimeoutError as exc:
                outcome.append(exc)
                got.set()
                return
            outcome.append("acquired")
            got.set()
            let_go.wait()
            lock.release()

        thread = threading.Thread(target=waiter)
        thread.start()
        self.addCleanup(thread.join)
        self.addCleanup(let_go.set)
        self.got = got
        # Mechanically, not by time: the acquirer thread is inside the blocking flock.
        wait_until(lambda: lock._in_flock, what="the acquirer blocking in flock")
        return let_go, outcome

    def test_a_waiter_sleeps_in_flock_and_gets_the_lock_when_the_holder_is_killed(self
                                                                                ) -> None:
        lock = SharedLock(OS, self.path)
        self.addCleanup(lock.close)
        holder = self.hold()
        let_go, outcome = self.wait_in_a_thread(lock, 60)
        os.kill(holder.pid, signal.SIGKILL)  # type: ignore[attr-defined]
        self.got.wait(60)
        self.assertEqual(outcome, ["acquired"])
        self.assertEqual((lock.tries, lock.blocking_waits), (1, 1))  # one try, no polling
        let_go.set()

    def test_a_waiter_gets_the_lock_when_the_holder_releases_it(self) -> None:
        lock = SharedLock(OS, self.path)
        self.addCleanup(lock.close)
        holder = self.hold()
        let_go, outcome = self.wait_in_a_thread(lock, 60)
        self.tell(holder, b"released")
        self.got.wait(60)
        self.assertEqual(outcome, ["acquired"])
        self.assertEqual((lock.tries, lock.blocking_waits), (1, 1))
        # Held now: a process that tries without waiting finds it taken.
        taker = spawn_python(TAKER, self.path, "0")
        self.addCleanup(self.reap, taker)
        _, err = taker.communicate(timeout=60)
        self.assertIn(b"LockTimeoutError", err)
        let_go.set()

    def test_lock_timeout_still_ends_the_wait_naming_the_holder_and_leaks_no_lock(self
                                                                                 ) -> None:
        lock = SharedLock(OS, self.path)
        self.addCleanup(lock.close)
        holder = self.hold()
        with self.assertRaises(LockTimeoutError) as caught:
            lock.acquire(0.2)
        if sys.platform == "linux":
            self.assertEqual(caught.exception.holder_pid, holder.pid)  # type: ignore[attr-defined]
        self.assertTrue(lock._in_flock)  # the acquirer still waits, for nobody now
        self.tell(holder, b"released")
        # When its flock returns nobody wants it: it must unlock, or this times out.
        taker = spawn_python(TAKER, self.path, "30")
        self.addCleanup(self.reap, taker)
        out, err = taker.communicate(timeout=60)
        self.assertEqual(out.strip(), b"took it", err.decode())
        lock.acquire(30)  # and we can take it again ourselves
        lock.release()

    def test_a_wait_interrupted_by_a_signal_leaves_no_grant_behind(self) -> None:
        # Ctrl-C (KeyboardInterrupt) while the acquirer blocks in flock for us: when
        # its flock returns nobody wants the lock. Kept, it would lock out every
        # other process, and hand a later wait here a grant of a lock since let go.
        lock = SharedLock(OS, self.path)
        self.addCleanup(lock.close)
        holder = self.hold()

        def interrupt() -> None:
            wait_until(lambda: lock._in_flock, what="the acquirer blocking in flock")
            os.kill(os.getpid(), signal.SIGINT)

        thread = threading.Thread(target=interrupt)
        thread.start()
        with self.assertRaises(KeyboardInterrupt):
            lock.acquire(60)
        thread.join()
        self.tell(holder, b"released")
        taker = spawn_python(TAKER, self.path, "20")
        self.addCleanup(self.reap, taker)
        out, err = taker.communicate(timeout=60)
        self.assertEqual(out.strip(), b"took it", err.decode())
        lock.acquire(30)
        try:  # really held: a process that tries without waiting finds it taken
            rival = spawn_python(TAKER, self.path, "0")
            self.addCleanup(self.reap, rival)
            _, err = rival.communicate(timeout=60)
            self.assertIn(b"LockTimeoutError", err)
        finally:
            lock.release()

    def test_a_zero_timeout_is_one_try_and_starts_no_acquirer(self) -> None:
        lock = SharedLock(OS, self.path)
        self.addCleanup(lock.close)
        self.hold()
        with self.assertRaises(LockTimeoutError):
            lock.acquire(0)
        self.assertEqual((lock.tries, lock.blocking_waits, lock._acquirer), (1, 0, None))

    def test_closing_while_the_acquirer_waits_leaks_neither_lock_nor_thread(self) -> None:
        lock = SharedLock(OS, self.path)
        holder = self.hold()
        with self.assertRaises(LockTimeoutError):
            lock.acquire(0.1)
        acquirer = lock._acquirer
        assert acquirer is not None
        lock.close()  # the acquirer is in flock on the descriptor: it closes it
        self.tell(holder, b"released")
        acquirer.join(60)
        self.assertFalse(acquirer.is_alive())
        taker = spawn_python(TAKER, self.path, "30")
        self.addCleanup(self.reap, taker)
        out, err = taker.communicate(timeout=60)
        self.assertEqual(out.strip(), b"took it", err.decode())

    def test_threads_of_several_processes_exclude_each_other(self) -> None:
        counter = self.tmp / "counter"
        counter.write_text("0")
        rounds = 150
        children = [spawn_python(COUNTER, self.path, str(counter), str(rounds))
                    for _ in range(3)]
        for child in children:
            self.addCleanup(self.reap, child)
        for child in children:
            out, err = child.communicate(timeout=120)
            self.assertEqual(out.strip(), b"done", err.decode())
        self.assertEqual(int(counter.read_text()), 3 * 3 * rounds)  # no update lost
