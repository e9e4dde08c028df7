"""The cross-process lock that serialises every writer of one queue.

A queue has one lock file, `NAME.lock`, which is never deleted: its only job
is to be an inode the kernel can arbitrate on. The kernel drops the lock when
its holder dies, so a `kill -9` never leaves a queue locked.

Inside one process, every `Queue` object for the same queue shares one
`SharedLock` (one descriptor, one re-entrant thread lock), because `flock`
treats two descriptors of one process as rivals: two handles in one process
would otherwise deadlock on each other.

POSIX uses `fcntl.flock`; Windows uses `msvcrt.locking` on the first byte,
polled with LK_NBLCK so that `lock_timeout` is honoured (the calls: flock.py).

Waiting for another process (POSIX): a non-blocking try first; if the lock
is busy, a daemon thread of this SharedLock (the acquirer) makes the
blocking `flock(LOCK_EX)`, and the waiting thread waits for it on a
condition with what is left of its timeout. The kernel then wakes us the
moment the holder lets go, where polling slept through most of the free
time. A blocking flock cannot time out, so the waiter never makes it
itself: a waiter that times out (or is interrupted: Ctrl-C) just leaves,
and when the acquirer gets the lock with nobody wanting it, it unlocks at
once (or gives it to whoever wants it by then). While the acquirer is
inside flock nobody else touches the descriptor's lock: a try on the same
descriptor would succeed the moment the acquirer's flock does, and the
acquirer could then unlock it under the new holder.

Exceptions (Ctrl-C's KeyboardInterrupt can land between any two calls): from
the moment a flock may have been taken until the lock is recorded as held,
and from the moment it is recorded as let go until the thread lock is
released, an exception goes through `_unwind`, which unlocks the descriptor
(a no-op if it holds nothing) and releases the thread lock. A flock nobody
believes held would lock every other process out; a thread lock kept by a
thread that left would lock out every other thread of ours. The guard is a
try block, free on the path without exceptions.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys
import threading
import time

from ...errors import LockTimeoutError
from .flock import block_lock, holder_pid, try_lock_fd, unlock_fd
from .fs import FileSystem

__all__ = ["SharedLock", "shared_lock", "release_shared_lock"]

# Why a descriptor for writing is refused although the file could be read.
_NOT_WRITABLE = (errno.EACCES, errno.EPERM, errno.EROFS)

MAX_HANDOVERS = 8  # file-lock handovers between our threads before others get a turn


class SharedLock:
    """One queue's lock, shared by every handle of this process."""

    def __init__(self, fs: FileSystem, path: str, *, readonly: bool = False) -> None:
        self.path = path
        self._fs = fs
        # A reader on files it may not write (immutable, another user's, a read-only
        # mount) locks a read-only descriptor instead: flock needs no write access.
        # Without even that (no lock file, and no right to create one) it reads
        # unlocked: the log is append-only and a compaction's unlink leaves an open
        # file readable, so what it reads is a state the queue was in; a batch still
        # being written shows as a torn tail, reported and never cut (read-only).
        self.degraded: str | None = None  # what a read-only open could not do, if anything
        try:
            self._fd: int | None = fs.open(path, os.O_RDWR | os.O_CREAT)
        except OSError as exc:
            if not readonly or exc.errno not in _NOT_WRITABLE:
                raise
            try:
                self._fd = fs.open(path, os.O_RDONLY)
                self.degraded = f"the lock file is not writable ({exc.strerror}): " \
                                f"locked it read-only"
            except OSError as second:
                if second.errno not in (*_NOT_WRITABLE, errno.ENOENT):
                    raise
                self._fd = None
                self.degraded = f"cannot open the lock file ({second.strerror}): " \
                                f"reading without the lock"
        self._thread_lock = threading.RLock()
        self._depth = 0
        self._file_locked = False  # held by whichever thread holds _thread_lock
        self._waiting = 0  # threads blocked in acquire (a hint for release)
        self._waiting_lock = threading.Lock()
        self._handovers = 0  # consecutive releases that kept the file lock
        self.users = 0
        self.stamp = 0  # the lock file's size at the last acquisition
        # The acquirer (see the module doc); all five under _acquirer_state.
        self._acquirer_state = threading.Condition(threading.Lock())
        self._acquirer: threading.Thread | None = None
        self._wanted = False  # the thread holding _thread_lock waits for the file lock
        self._granted = False  # the acquirer got it for that thread, not yet taken
        self._in_flock = False  # the acquirer is inside the blocking flock
        self._closing = False
        self.tries = 0  # non-blocking attempts at the file lock (for tests)
        self.blocking_waits = 0  # waits handed to the acquirer (for tests)

    @property
    def fs(self) -> FileSystem:
        """The file system its descriptor was opened through."""
        return self._fs

    def acquire(self, timeout: float) -> None:
        # Uncontended (the usual case) costs no clock read; the deadline is
        # fixed at the first wait.
        started = None
        if not self._thread_lock.acquire(blocking=False):
            started = time.monotonic()
            with self._waiting_lock:  # `+=` on an attribute is not atomic across threads
                self._waiting += 1
            got = False
            try:
                got = self._thread_lock.acquire(timeout=max(timeout, 0.0))
            finally:
                with self._waiting_lock:
                    self._waiting -= 1
                if not got:
                    self._drop_unowned_file_lock()
            if not got:
                raise LockTimeoutError(self.path, timeout, os.getpid())
        if self._depth:
            self._depth += 1
            return
        if not self._file_locked:  # else handed over by the thread before us
            try:
                self._lock_file(started, timeout)
                self._file_locked = True  # in the try: an exception before it unlocks
            except BaseException:
                self._unwind()
                raise
        self._depth = 1

    def try_acquire(self) -> bool:
        """`acquire` without waiting: False at once if another thread or process
        holds the lock (for work that someone else doing is as good as doing it)."""
        if not self._thread_lock.acquire(blocking=False):
            return False
        if self._depth:
            self._depth += 1
            return True
        if not self._file_locked:
            try:
                got = self._fd is None or self._try_lock_file()
                if got:
                    self._file_locked = True
            except BaseException:
                self._unwind()
                raise
            if not got:
                self._thread_lock.release()
                return False
        self._depth = 1
        return True

    def _try_lock_file(self) -> bool:
        """One non-blocking try at the file lock, on the file that has the name."""
        assert self._fd is not None
        with self._acquirer_state:
            if self._in_flock:  # the acquirer's flock is this descriptor's: wait for it
                return False
        while True:
            self.tries += 1
            if not try_lock_fd(self._fd):
                return False
            if self._same_file():
                return True
            self._replace_fd()

    def _replace_fd(self) -> None:
        # Someone replaced the lock file: our inode no longer arbitrates. The new
        # descriptor is opened first, so that a failed open leaves `_fd` the old,
        # still open one (which `_unwind` unlocks; the next try reopens), never a
        # closed number that a later open could reuse for another file.
        old = self._fd
        assert old is not None
        self._fd = self._fs.open(self.path, os.O_RDONLY if self.degraded
                                 else os.O_RDWR | os.O_CREAT)
        unlock_fd(old)
        self._fs.close(old)

    def _lock_file(self, started: float | None, timeout: float) -> None:
        if self._fd is None:  # an unlocked reader (see __init__); re-reads every time
            self.stamp = -1
            return
        pause = 0.0002
        while True:
            if self._try_lock_file():
                return
            if started is None:
                started = time.monotonic()
            deadline = started + timeout
            if time.monotonic() >= deadline:  # lock_timeout=0 starts no acquirer
                raise LockTimeoutError(self.path, timeout, holder_pid(self.path))
            if block_lock is None:  # Windows: poll
                time.sleep(pause)
                pause = min(pause * 2, 0.005)
                continue
            if not self._wait_for_acquirer(deadline):
                raise LockTimeoutError(self.path, timeout, holder_pid(self.path))
            if self._same_file():
                return
            self._replace_fd()

    def _wait_for_acquirer(self, deadline: float) -> bool:
        """Have the acquirer block in flock for us; True once it holds the file lock
        for us, False if `deadline` passed first (it then unlocks when it gets it).
        An exception in the wait (KeyboardInterrupt) leaves the same way: a grant
        that nobody takes would lock every other process out."""
        with self._acquirer_state:
            self.blocking_waits += 1
            if self._acquirer is None:
                self._acquirer = threading.Thread(target=self._acquire_forever, daemon=True,
                                                  name=f"nobroker lock {self.path}")
                self._acquirer.start()
            self._wanted = True
            self._acquirer_state.notify_all()
            try:
                while not self._granted:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    self._acquirer_state.wait(remaining)
            except BaseException:  # interrupted (KeyboardInterrupt): we never take it
                if self._granted:  # granted just now: let go, nobody holds it knowingly
                    assert self._fd is not None
                    unlock_fd(self._fd)
                self._granted = self._wanted = False  # in flock still: it unlocks after
                self._acquirer_state.notify_all()
                raise
            got, self._granted, self._wanted = self._granted, False, False
            self._acquirer_state.notify_all()
            return got

    def _acquire_forever(self) -> None:
        """The acquirer thread: a blocking flock whenever a thread wants the lock."""
        state = self._acquirer_state
        while True:
            with state:
                while not self._wanted and not self._closing:
                    state.wait()
                if self._closing:
                    return
                fd = self._fd
                assert fd is not None and block_lock is not None
                self._in_flock = True
            try:
                block_lock(fd)
                locked = True
            except OSError:  # EINTR is retried by Python; anything else (ENOLCK): the
                locked = False  # waiter times out and reports the holder; no retry loop
            with state:
                self._in_flock = False
                if self._closing:  # close() came while we were in flock, and left the
                    self._fs.close(fd)  # descriptor to us (closing drops the lock too)
                    return
                if not locked:
                    self._wanted = False
                elif self._wanted:
                    self._granted = True
                    state.notify_all()
                    while self._granted:  # until the waiter has taken it
                        state.wait()
                else:
                    unlock_fd(fd)  # its waiter left: nobody may keep it unknowingly

    def _same_file(self) -> bool:
        # If NAME.lock was unlinked or renamed over, our inode has no links left and
        # a newcomer would lock a different inode: two "holders". The same fstat
        # reads the stamp (see `set_stamp`).
        assert self._fd is not None
        st = self._fs.fstat(self._fd)
        self.stamp = st.st_size
        return sys.platform == "win32" or st.st_nlink > 0

    def set_stamp(self, value: int) -> None:
        """Record `value` (the current log generation) as the lock file's size.

        Every acquisition reads it back with the fstat it makes anyway, so a
        holder learns of another process's compaction without a further
        system call. It is a hint: the truth is NAME.current, which a holder
        re-reads whenever the stamp differs from the generation it has.
        """
        assert self._fd is not None, "a reader's lock records no stamp"
        self._fs.ftruncate(self._fd, value)
        self.stamp = value

    def release(self) -> None:
        self._depth -= 1
        if self._depth:
            self._thread_lock.release()
            return
        try:
            if self._waiting and self._handovers < MAX_HANDOVERS:
                # Another thread of ours waits: hand it the file lock as it is,
                # saving an unlock, a lock and an fstat. Bounded, so that other
                # processes get their turn.
                self._handovers += 1
            elif self._file_locked:
                self._handovers = 0
                # Recorded as let go before the unlock: the other way round, an
                # exception between the two would have the next thread believe it
                # holds a flock nobody holds. This way `_unwind` drops the flock.
                self._file_locked = False
                if self._fd is not None:
                    unlock_fd(self._fd)
        except BaseException:
            self._unwind()
            raise
        self._thread_lock.release()

    def _unwind(self) -> None:
        """After an exception while this thread took or let go of the file lock
        (see the module doc): let go of both locks, whatever was recorded."""
        try:
            self._file_locked = False
            if self._fd is not None:
                with self._acquirer_state:
                    # In flock, the acquirer's wait is the descriptor's: it holds
                    # nothing of ours, and the acquirer unlocks what it gets for
                    # nobody. Otherwise any flock on it is this thread's.
                    if not self._in_flock:
                        with contextlib.suppress(OSError):  # not locked (Windows)
                            unlock_fd(self._fd)
        finally:
            self._thread_lock.release()

    def _drop_unowned_file_lock(self) -> None:
        """After giving up waiting: if the file lock was handed to us, let it go."""
        if self._thread_lock.acquire(blocking=False):
            self._depth += 1
            self.release()  # unlocks the file unless yet another thread waits

    def close(self) -> None:
        with self._acquirer_state:
            self._closing = True
            self._acquirer_state.notify_all()
            if self._in_flock:
                return  # the acquirer closes the descriptor when its flock returns
        if self._fd is not None:
            self._fs.close(self._fd)


_registry: dict[str, SharedLock] = {}
_registry_lock = threading.Lock()


def _forget_inherited_locks() -> None:
    # A forked child shares its parent's open file descriptions, and flock()
    # is held per description: an inherited SharedLock would let parent and
    # child both "hold" the queue. The child opens its own.
    global _registry_lock
    _registry.clear()
    _registry_lock = threading.Lock()  # another thread may have held it at the fork


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_inherited_locks)


def shared_lock(fs: FileSystem, path: str, *, readonly: bool = False) -> SharedLock:
    """The process's SharedLock for `path`, created on first use; counts its users.
    A `readonly` user may get a lock on a read-only descriptor (SharedLock.degraded)."""
    key = os.path.realpath(path)
    with _registry_lock:
        lock = _registry.get(key)
        if lock is None or lock.fs is not fs or (lock.degraded and not readonly):
            lock = SharedLock(fs, path, readonly=readonly)
            if key not in _registry:
                _registry[key] = lock
        lock.users += 1
        return lock


def release_shared_lock(lock: SharedLock) -> None:
    """Drop one user; the descriptor closes with the last one."""
    with _registry_lock:
        lock.users -= 1
        if lock.users == 0:
            key = os.path.realpath(lock.path)
            if _registry.get(key) is lock:
                del _registry[key]
            lock.close()
