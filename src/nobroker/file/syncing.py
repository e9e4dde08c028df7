"""Making a live handle's commits durable: the fsync after the lock, and undoing a write.

A write call's fsync (commit.py calls `hold_for_sync`, then `sync`) runs
outside the queue lock, so that threads share one (log/groupcommit.py); each
process syncs for itself. A failed fsync poisons the handle: the kernel may
have dropped the pages, so the next open in this process rewrites the queue
(FSYNC_FAILED). A failed write is cut back to the batch boundary.
"""

from __future__ import annotations

import logging
import os

from ..errors import StorageError
from .handleapi import HandleAPI
from .log.logfile import LogFile

__all__ = ["FSYNC_FAILED", "rescue_key", "hold_for_sync", "sync", "cut"]

log = logging.getLogger("nobroker")

# Queues (realpath/NAME) whose log fsync failed in this process: the next open rescues them.
FSYNC_FAILED: set[str] = set()


def rescue_key(directory: str, name: str) -> str:
    """The queue's key in FSYNC_FAILED."""
    return os.path.join(os.path.realpath(directory), name)


def hold_for_sync(handle: HandleAPI, start: int) -> tuple[LogFile | None, int]:
    """Under the lock, after a call's commits: the generation and offset its fsync
    must reach (None if it wrote nothing, or needs none), held open for it (pinned)."""
    current = handle.log
    if (current is None or current.end == start or not handle.fsync
            or handle.poisoned is not None):  # a poisoned handle does no more I/O
        return None, 0
    return handle.pin(), current.end


def sync(handle: HandleAPI, target: LogFile, offset: int) -> None:
    """Return once `target`'s bytes before `offset` are on disk, and let go of the
    hold_for_sync hold; poison on failure."""
    issued = False
    try:
        issued = target.sync_to(offset)
    except OSError as exc:
        handle.poison(f"fsync of {target.path} failed: {exc}")
        FSYNC_FAILED.add(rescue_key(handle.directory, handle.name))
        raise StorageError(target.path, "fsync", exc) from None
    finally:
        handle.unpin(target, synced=issued)


def cut(current: LogFile, end: int) -> None:
    """Drop `current`'s bytes from `end` on, durably; under the queue lock."""
    current.cut(end)
