"""Making a live handle's commits durable: the fsync after the lock, and undoing a write.

A store's job beside the commit protocol (store.py), as functions of the
store. The fsync runs outside the queue lock, so that threads share one
(log/groupcommit.py) and, through NAME.sync, processes do (syncfile.py). A
failed fsync poisons the handle: the kernel may have dropped the pages, so
the next open in this process rewrites the queue (FSYNC_FAILED). A failed
write is cut back to the batch boundary, and NAME.sync is lowered with it,
so that no later claim covers bytes that are about to be replaced; and so it
is after every open, because the slots may speak of bytes the log no longer
has (a tail the open cut, a file damaged or truncated behind our back).
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

from ..errors import StorageError
from .log.logfile import LogFile
from .log.syncfile import SharedSync, sync_filename

if TYPE_CHECKING:
    from .store import FileStore

__all__ = ["FSYNC_FAILED", "open_shared", "bound_shared", "sync", "cut"]

log = logging.getLogger("nobroker")

# Queues (realpath/NAME) whose log fsync failed in this process: the next open rescues them.
FSYNC_FAILED: set[str] = set()


def open_shared(store: FileStore) -> None:
    """Give the store its descriptor on NAME.sync, where sharing fsyncs can work."""
    # Only a durable writer has fsyncs to share; on a network file system another
    # machine's page cache is not ours to flush.
    if store.options.share_fsyncs and store.fsync and not store.readonly \
            and not store.network_fs:
        store.shared = SharedSync.open(store.options.fs, store.directory, store.name)


def bound_shared(store: FileStore) -> None:
    """After a load, under the queue lock: no slot of NAME.sync may claim bytes past
    the log's end. A claim is trusted by CRC and identity alone, so a slot left by a
    writer whose bytes were since cut (a repaired tail, a file truncated by hand)
    would otherwise spare a later call's fdatasync over bytes it never covered."""
    if store.shared is None:
        return
    target = store._live_log()
    try:
        store.shared.lower(target, target.end)
    except OSError as exc:  # e.g. a FIFO under its name: share nothing, sync alone
        log.warning("%s: not sharing fsyncs through it: %s",
                    os.path.join(store.directory, sync_filename(store.name)), exc)
        store.shared.close()
        store.shared = None


def sync(store: FileStore, target: LogFile, offset: int) -> None:
    """Return once `target`'s bytes before `offset` are on disk; poison on failure."""
    issued = False
    try:
        issued = target.sync_to(offset, store.shared)
    except OSError as exc:
        store._poison(f"fsync of {target.path} failed: {exc}")
        FSYNC_FAILED.add(store._rescue_key)
        raise StorageError(target.path, "fsync", exc) from None
    finally:
        store.unpin(target, synced=issued)


def cut(store: FileStore, current: LogFile, end: int) -> None:
    """Drop `current`'s bytes from `end` on, durably; under the queue lock."""
    current.cut(end)
    if store.shared is not None:  # a thread of ours may have published bytes past end
        store.shared.lower(current, end)
