"""The operating system's file locks, one call each: the platform part of lock.py.

POSIX uses `fcntl.flock` on the whole file; Windows uses `msvcrt.locking` on
its first byte. `try_lock_fd` never waits; `block_lock` waits for as long as
it takes (None on Windows, whose LK_LOCK gives up after 10 s: SharedLock
polls there instead); `holder_pid` names the process that holds a lock,
where the OS tells, for LockTimeoutError's message. Like the kernel's
locks themselves, nothing here knows of threads: SharedLock (lock.py) and
the named locks (namedlocks.py) build on these.
"""

from __future__ import annotations

import os
import sys

__all__ = ["try_lock_fd", "unlock_fd", "block_lock", "holder_pid"]

if sys.platform == "win32":  # pragma: no cover - exercised on Windows only
    import msvcrt

    def try_lock_fd(fd: int) -> bool:
        os.lseek(fd, 0, os.SEEK_SET)
        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True

    def unlock_fd(fd: int) -> None:
        os.lseek(fd, 0, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)

    block_lock = None  # LK_LOCK gives up after 10 s: Windows keeps polling

else:
    import fcntl

    def try_lock_fd(fd: int) -> bool:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    def unlock_fd(fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_UN)

    def _lock_blocking(fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_EX)

    block_lock = _lock_blocking


def holder_pid(path: str) -> int | None:
    """The pid holding a lock on `path`, where the OS tells (Linux /proc/locks)."""
    try:
        inode = os.stat(path).st_ino
        with open("/proc/locks", encoding="ascii", errors="replace") as locks:
            for line in locks:
                fields = line.split()
                if len(fields) >= 6 and fields[5].rsplit(":", 1)[-1] == str(inode):
                    return int(fields[4])
    except (OSError, ValueError):
        return None
    return None
