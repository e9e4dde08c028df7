"""An exception between taking the queue's flock and recording it leaves no lock.

The claim: a KeyboardInterrupt (a real SIGINT, raised through Python's own
handler) that lands right after the flock is taken (by a non-blocking try, or
by the acquirer thread for a blocking wait) but before the SharedLock records
it, or in release() around the unlock, leaves neither the flock nor the thread
lock held: another process takes the queue's lock at once, another thread of
ours too, and the SharedLock works as before. Likewise an error reopening a
lock file that was replaced under a holder (an OSError from open) leaves the
old descriptor to unlock and retry with, not a closed number.

A signal cannot be aimed at a window of a few bytecodes from outside, so a
subclass raises it there: `signal.raise_signal` delivers SIGINT to the calling
(main) thread and runs the handler before it returns, which is exactly what a
Ctrl-C arriving at that instant does.
"""

from __future__ import annotations

import errno
import os
import signal
import sys
import threading
import unittest
from collections.abc import Callable
from unittest import mock

from harness.support import TempDirTestCase, spawn_python, wait_until

from file.test_lock_wait import HOLDER, TAKER
from nobroker.file.disk import lock as lock_module
from nobroker.file.disk.fs import OS, FileSystem
from nobroker.file.disk.lock import SharedLock


def ctrl_c() -> None:
    signal.raise_signal(signal.SIGINT)  # the default handler raises KeyboardInterrupt


class InterruptedLock(SharedLock):
    """A SharedLock that gets Ctrl-C once, right after its flock is taken: when
    `after` (a non-blocking try, or the wait for the acquirer) returns success."""

    after = ""

    def _try_lock_file(self) -> bool:
        got = super()._try_lock_file()
        if got and self.after == "try":
            self.after = ""
            ctrl_c()
        return got

    def _wait_for_acquirer(self, deadline: float) -> bool:
        got = super()._wait_for_acquirer(deadline)
        if got and self.after == "grant":
            self.after = ""
            ctrl_c()
        return got


class FailingOpen(FileSystem):
    """Opens normally, except once after `fail_next()`: EMFILE (out of descriptors)."""

    failing = False

    def fail_next(self) -> None:
        self.failing = True

    def open(self, path: str, flags: int, mode: int = 0o600) -> int:
        if self.failing:
            self.failing = False
            raise OSError(errno.EMFILE, os.strerror(errno.EMFILE), path)
        return super().open(path, flags, mode)


@unittest.skipIf(sys.platform == "win32", "the rival processes use fcntl")
class InterruptedLockTest(TempDirTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.path = str(self.tmp / "q.lock")

    def lock(self, after: str = "") -> InterruptedLock:
        lock = InterruptedLock(OS, self.path)
        lock.after = after
        self.addCleanup(lock.close)  # closing drops the flock: no leak into the next test
        return lock

    def spawn(self, code: str, *args: str) -> object:
        child = spawn_python(code, *args)
        self.addCleanup(self.reap, child)
        return child

    def reap(self, child: object) -> None:
        if child.poll() is None:  # type: ignore[attr-defined]
            child.kill()  # type: ignore[attr-defined]
        child.wait()  # type: ignore[attr-defined]

    def assert_nothing_held_and_usable(self, lock: SharedLock) -> None:
        # No flock left: another process takes the lock (a leaked one would time out).
        taker = self.spawn(TAKER, self.path, "5")
        out, err = taker.communicate(timeout=60)  # type: ignore[attr-defined]
        self.assertEqual(out.strip(), b"took it", err.decode())
        # No thread lock left: another thread of ours takes it.
        outcome: list[object] = []

        def other_thread() -> None:
            try:
                lock.acquire(5)
            except Exception as exc:
                outcome.append(exc)
                return
            lock.release()
            outcome.append("acquired")

        thread = threading.Thread(target=other_thread)
        thread.start()
        thread.join(60)
        self.assertEqual(outcome, ["acquired"])
        # And the lock still works, for real: held, a rival process finds it taken.
        lock.acquire(5)
        try:
            rival = self.spawn(TAKER, self.path, "0")
            _, err = rival.communicate(timeout=60)  # type: ignore[attr-defined]
            self.assertIn(b"LockTimeoutError", err)
        finally:
            lock.release()
        self.assertFalse(lock._file_locked)

    def test_ctrl_c_right_after_acquire_took_the_flock_leaves_no_lock(self) -> None:
        lock = self.lock(after="try")
        with self.assertRaises(KeyboardInterrupt):
            lock.acquire(5)
        self.assert_nothing_held_and_usable(lock)

    def test_ctrl_c_right_after_try_acquire_took_the_flock_leaves_no_lock(self) -> None:
        lock = self.lock(after="try")
        with self.assertRaises(KeyboardInterrupt):
            lock.try_acquire()
        self.assert_nothing_held_and_usable(lock)

    def test_ctrl_c_right_after_the_acquirer_took_the_flock_for_us_leaves_no_lock(self
                                                                                 ) -> None:
        lock = self.lock(after="grant")
        holder = self.spawn(HOLDER, self.path)
        self.assertEqual(holder.stdout.readline().strip(), b"held")  # type: ignore[attr-defined]

        def let_go_once_we_wait() -> None:
            wait_until(lambda: lock._in_flock, what="the acquirer blocking in flock")
            holder.stdin.write(b"go\n")  # type: ignore[attr-defined]
            holder.stdin.flush()  # type: ignore[attr-defined]

        thread = threading.Thread(target=let_go_once_we_wait)
        thread.start()
        with self.assertRaises(KeyboardInterrupt):
            lock.acquire(60)
        thread.join()
        self.assertEqual(lock.blocking_waits, 1)  # it did come through the acquirer
        self.assert_nothing_held_and_usable(lock)

    def interrupt_unlock(self, before: bool) -> Callable[[int], None]:
        """An `unlock_fd` that gets Ctrl-C once, just `before` or just after unlocking."""
        real, calls = lock_module.unlock_fd, []

        def unlock(fd: int) -> None:
            calls.append(fd)
            if before and len(calls) == 1:
                ctrl_c()
            real(fd)
            if not before and len(calls) == 1:
                ctrl_c()

        return unlock

    def release_interrupted(self, before: bool) -> SharedLock:
        lock = self.lock()
        lock.acquire(5)
        with mock.patch.object(lock_module, "unlock_fd", self.interrupt_unlock(before)):
            with self.assertRaises(KeyboardInterrupt):
                lock.release()
        return lock

    def test_ctrl_c_in_release_just_before_the_unlock_leaves_no_lock(self) -> None:
        self.assert_nothing_held_and_usable(self.release_interrupted(before=True))

    def test_ctrl_c_in_release_just_after_the_unlock_leaves_no_thread_lock(self) -> None:
        self.assert_nothing_held_and_usable(self.release_interrupted(before=False))

    def test_a_failed_reopen_of_a_replaced_lock_file_leaves_a_usable_lock(self) -> None:
        fs = FailingOpen()
        lock = SharedLock(fs, self.path)
        self.addCleanup(lock.close)
        os.unlink(self.path)  # our inode no longer arbitrates: the next acquire reopens
        fs.fail_next()
        with self.assertRaises(OSError):
            lock.acquire(5)
        self.assert_nothing_held_and_usable(lock)  # reopens, and locks the new file
        self.assertTrue(os.path.exists(self.path))


if __name__ == "__main__":
    unittest.main()
