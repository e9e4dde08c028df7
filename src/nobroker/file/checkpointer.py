"""When to save a checkpoint of the replay state (what one holds: checkpoint.py).

A checkpoint only makes the next open faster, so saving one must never slow
or fail a call. Two moments: close() saves one when enough was logged since
the last (under the lock it holds anyway), and a live handle that has logged
a lot saves one beside the writers, rebuilding the state privately from the
part of the log that can no longer change, like compaction does, so that
nobody waits for it. Errors are logged, never raised.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ..errors import NobrokerError
from .generations import checkpoint
from .generations.rebuild import state_at
from .log.logfile import LogFile

if TYPE_CHECKING:
    from .handle import FileStore

__all__ = ["save_checkpoint", "checkpoint_due", "auto_checkpoint"]

log = logging.getLogger("nobroker")


def save_checkpoint(store: FileStore) -> None:
    """Under the lock: write a checkpoint if enough was logged since the last one."""
    current = store._live_log()
    if (store.readonly or not store.options.checkpoints
            or current.end - store._checkpointed < store.options.checkpoint_after_bytes):
        return
    if store.fsync:
        current.sync()  # the checkpoint must not describe records the disk may lose
    data = checkpoint.encode(store._state, current.generation, current.end, current.crc)
    current.write_checkpoint(data)
    store._checkpointed = current.end


def checkpoint_due(store: FileStore) -> bool:
    """Whether so much was logged since the last checkpoint that a crash would make
    the next open slow: a quarter of what the checkpoint covers, and 8 MiB at least
    (so the total cost of checkpoints stays a constant factor of the log's size)."""
    current = store._log
    if store.readonly or not store.options.checkpoints or current is None:
        return False
    return current.end - store._checkpointed >= max(store.options.checkpoint_every_bytes,
                                                  store._checkpointed // 4)


def auto_checkpoint(store: FileStore) -> None:
    """Save a checkpoint of the log as it is now, without holding the lock.

    Like compaction, it rebuilds the state privately from the part of the log
    that can no longer change (the last checkpoint plus what follows it), so
    other handles and processes are never blocked by it.
    """
    if not store._compacting.acquire(blocking=False):
        return
    try:
        with store._locked():
            if not store._checkpoint_due():
                return
            current = store._live_log()
            generation, upto = current.generation, current.end
        reader = LogFile.open(store._fs, store.directory, store.name, generation)
        try:
            state = state_at(reader, upto)
            reader.write_checkpoint(checkpoint.encode(state, generation, upto, reader.crc))
            store._checkpointed = upto
        finally:
            reader.close()
    except (OSError, NobrokerError) as exc:  # a cache: the call itself succeeded
        log.warning("could not save a checkpoint of %r: %s", store.name, exc)
    finally:
        store._compacting.release()
