"""When an open queue saves a checkpoint of its replay state (what one holds:
generations/checkpoint.py).

A checkpoint only makes the next open faster, so saving one must never slow
or fail a call. Two moments: close() saves one when enough was logged since
the last (under the lock it holds anyway), and a live handle that has logged
a lot saves one beside the writers, rebuilding the state privately from the
part of the log that can no longer change, like compaction does, so that
nobody waits for it. Errors are logged, never raised.
"""

from __future__ import annotations

import logging
import threading

from ..errors import NobrokerError
from .generations import checkpoint
from .generations.rebuild import state_at
from .handleapi import HandleAPI
from .log.logfile import LogFile

__all__ = ["Checkpointer"]

log = logging.getLogger("nobroker")


class Checkpointer:
    """Saves checkpoints for one open handle, which owns it (handle.py); `busy` is
    the handle's lock for work beside the writers, shared with its Compactor."""

    def __init__(self, handle: HandleAPI, busy: threading.RLock) -> None:
        self._handle = handle
        self._busy = busy

    def save(self) -> None:
        """Under the lock: write a checkpoint if enough was logged since the last one."""
        handle = self._handle
        current = handle.live_log()
        options = handle.options
        if (handle.readonly or not options.checkpoints
                or current.end - handle.checkpointed < options.checkpoint_after_bytes):
            return
        if handle.fsync:
            current.sync()  # the checkpoint must not describe records the disk may lose
        data = checkpoint.encode(handle.state, current.generation, current.end, current.crc)
        current.write_checkpoint(data)
        handle.note_checkpoint(current.end)

    def due(self) -> bool:
        """Whether so much was logged since the last checkpoint that a crash would make
        the next open slow: a quarter of what the checkpoint covers, and 8 MiB at least
        (so the total cost of checkpoints stays a constant factor of the log's size)."""
        handle = self._handle
        current = handle.log
        if handle.readonly or not handle.options.checkpoints or current is None:
            return False
        covered = handle.checkpointed
        return current.end - covered >= max(handle.options.checkpoint_every_bytes,
                                             covered // 4)

    def auto(self) -> None:
        """Save a checkpoint of the log as it is now, without holding the lock.

        Like compaction, it rebuilds the state privately from the part of the log
        that can no longer change (the last checkpoint plus what follows it), so
        other handles and processes are never blocked by it.
        """
        handle = self._handle
        if not self._busy.acquire(blocking=False):
            return
        try:
            with handle.locked():
                if not self.due():
                    return
                current = handle.live_log()
                generation, upto = current.generation, current.end
            reader = LogFile.open(handle.fs, handle.directory, handle.name, generation)
            try:
                state = state_at(reader, upto)
                reader.write_checkpoint(checkpoint.encode(state, generation, upto, reader.crc))
                handle.note_checkpoint(upto)
            finally:
                reader.close()
        except (OSError, NobrokerError) as exc:  # a cache: the call itself succeeded
            log.warning("could not save a checkpoint of %r: %s", handle.name, exc)
        finally:
            self._busy.release()
