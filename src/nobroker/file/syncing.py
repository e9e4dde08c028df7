"""Making a live handle's commits durable: the fsync after the lock, and undoing a write.

A write call's fsync (commit.py calls `hold_for_sync`, then `sync`) runs
outside the queue lock, so that
threads share one (log/groupcommit.py) and, through NAME.sync, processes may
(syncfile.py; FileOptions.share_fsyncs, off by default). A failed fsync
poisons the handle: the kernel may have dropped the pages, so the next open
in this process rewrites the queue (FSYNC_FAILED). A failed write is cut
back to the batch boundary, and NAME.sync is lowered with it, so that no
later claim covers bytes that are about to be replaced; and so it is after
every open, because the slots may speak of bytes the log no longer has (a
tail the open cut, a file damaged or truncated behind our back).
"""

from __future__ import annotations

import logging
import os

from ..errors import StorageError
from .handleapi import HandleAPI
from .log.logfile import LogFile
from .log.syncfile import SharedSync, sync_filename
from .options import FileOptions

__all__ = ["FSYNC_FAILED", "rescue_key", "open_shared", "bound_shared", "hold_for_sync",
           "sync", "cut"]

log = logging.getLogger("nobroker")

# Queues (realpath/NAME) whose log fsync failed in this process: the next open rescues them.
FSYNC_FAILED: set[str] = set()


def rescue_key(directory: str, name: str) -> str:
    """The queue's key in FSYNC_FAILED."""
    return os.path.join(os.path.realpath(directory), name)


def open_shared(options: FileOptions, directory: str, name: str, *, fsync: bool,
                readonly: bool, network_fs: bool) -> SharedSync | None:
    """A descriptor on NAME.sync, where sharing fsyncs can work (None: sync alone)."""
    # Only a durable writer has fsyncs to share; on a network file system another
    # machine's page cache is not ours to flush.
    if options.share_fsyncs and fsync and not readonly and not network_fs:
        return SharedSync.open(options.fs, directory, name)
    return None


def bound_shared(shared: SharedSync | None, target: LogFile, directory: str,
                 name: str) -> SharedSync | None:
    """After a load, under the queue lock: no slot of NAME.sync may claim bytes past
    the log's end. A claim is trusted by CRC and identity alone, so a slot left by a
    writer whose bytes were since cut (a repaired tail, a file truncated by hand)
    would otherwise spare a later call's fdatasync over bytes it never covered.
    Returns `shared`, or None if it had to be given up (then closed)."""
    if shared is None:
        return None
    try:
        shared.lower(target, target.end)
    except OSError as exc:  # e.g. a FIFO under its name: share nothing, sync alone
        log.warning("%s: not sharing fsyncs through it: %s",
                    os.path.join(directory, sync_filename(name)), exc)
        shared.close()
        return None
    return shared


def hold_for_sync(handle: HandleAPI, start: int) -> tuple[LogFile | None, int]:
    """Under the lock, after a call's commits: the generation and offset its fsync
    must reach (None if it wrote nothing, or needs none), held open for it (pinned)."""
    current = handle.log
    if (current is None or current.end == start or not handle.fsync
            or handle.poisoned is not None):  # a poisoned handle does no more I/O
        return None, 0
    if handle.shared is not None:  # a peer's fdatasync may cover us now
        handle.shared.wrote(current)
    return handle.pin(), current.end


def sync(handle: HandleAPI, target: LogFile, offset: int) -> None:
    """Return once `target`'s bytes before `offset` are on disk, and let go of the
    hold_for_sync hold; poison on failure."""
    issued = False
    try:
        issued = target.sync_to(offset, handle.shared)
    except OSError as exc:
        handle.poison(f"fsync of {target.path} failed: {exc}")
        FSYNC_FAILED.add(rescue_key(handle.directory, handle.name))
        raise StorageError(target.path, "fsync", exc) from None
    finally:
        handle.unpin(target, synced=issued)


def cut(shared: SharedSync | None, current: LogFile, end: int) -> None:
    """Drop `current`'s bytes from `end` on, durably; under the queue lock."""
    current.cut(end)
    if shared is not None:  # a thread of ours may have published bytes past end
        shared.lower(current, end)
