"""Named locks (`Queue.lock`, a task's `lock=`): one lock file per key.

A key's lock is a kernel file lock on `NAME.locks/HASH.lock` beside the
queue's log, HASH being the first 32 hex digits of the key's SHA-256 (so a
key may hold any character and still make one short file name). Like the
queue's own lock, the file is never deleted (a deleted lock file could be
locked by one process while another creates and locks its successor), and
the kernel drops the lock when its holder dies: a `kill -9` leaves no stale
lock behind, and nothing has to expire.

Each take opens its own descriptor, and `flock` treats two descriptors as
rivals even in one process, so two threads of one process exclude each
other too. The descriptors are not inherited by child processes (Python
opens them close-on-exec), so a child of the holder cannot keep a lock
alive after its holder died.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable

from ...errors import StorageError
from .flock import try_lock_fd, unlock_fd
from .fs import FileSystem

__all__ = ["try_named_lock", "lock_path"]


def lock_path(directory: str, queue: str, key: str) -> str:
    """The lock file of `key` in the queue `queue` of `directory`."""
    digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return os.path.join(directory, f"{queue}.locks", f"{digest}.lock")


def try_named_lock(fs: FileSystem, directory: str, queue: str,
                   key: str) -> Callable[[], None] | None:
    """Take `key`'s lock if nobody holds it: the function that lets it go (call it
    once), or None if it is held, by this process or another."""
    path = lock_path(directory, queue, key)
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        fd = fs.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise StorageError(path, "opening the lock file", exc) from None
    try:
        taken = try_lock_fd(fd)
    except BaseException:
        fs.close(fd)
        raise
    if not taken:
        fs.close(fd)
        return None

    def release() -> None:
        try:
            unlock_fd(fd)  # the close alone would do on POSIX; Windows wants this
        finally:
            fs.close(fd)

    return release
