"""Rebuilding the replay state of one log file: its checkpoint, then the records after it.

The layer that joins three below it, so that none of them knows the others:
a log file's frames and batches (logfile.py), the state saved as columns
(checkpoint.py) and the replay state that applies records (state.py).
Opening, compaction and running checkpoints all rebuild through here.

A checkpoint is only a cache: any doubt about it (missing, torn, stale, or
ending beyond the offset asked for) means replaying from the start, which
gives the same state, only slower. `checkpoints=False` skips them
altogether (FileOptions; tests compare the two ways).
"""

from __future__ import annotations

from ..log.logfile import LogFile, paused_gc
from ..state.state import QueueState
from . import checkpoint

__all__ = ["load_checkpoint", "state_at"]


def load_checkpoint(log: LogFile, max_end: int | None = None) -> QueueState | None:
    """The state saved by `log`'s checkpoint, if it can be trusted.

    The newest first: NAME.GGGGGG.ckpt, saved after the switch to this
    generation (so covering at least what its compaction's did), else the
    switching compaction's NAME.GGGGGG.switch.ckpt. On success the log's `end`
    and `crc` move to where the checkpoint leaves off, and a scan continues
    from there; None otherwise.
    """
    for path in (log.checkpoint_path, log.switch_checkpoint_path):
        data = log.read_checkpoint(path)
        if data is None:
            continue
        try:
            size = log.fs.fstat(log.fd).st_size
            state, end, crc = checkpoint.decode(data, log.generation, size, log.prefix_crc)
        except (checkpoint.CheckpointError, ValueError, OSError):
            continue
        if max_end is not None and end > max_end:
            continue  # covers more than asked: the switch's may not
        log.end, log.crc = end, crc
        return state
    return None


def state_at(log: LogFile, upto: int, *, checkpoints: bool = True) -> QueueState:
    """The state after the complete batches before offset `upto`, rebuilt from the
    checkpoint (if one ends at or before it) and the records that follow.

    Below an offset that was once the logical end the log never changes, so
    this needs no lock: compaction and running checkpoints use it to work
    beside the writers. Raises OSError if the records do not end at `upto`.
    """
    with paused_gc():
        loaded = load_checkpoint(log, max_end=upto) if checkpoints else None
        state = QueueState() if loaded is None else loaded
        log.scan(state.apply_batch, state.last_batch, full=False, limit=upto)
    if log.end != upto:
        raise OSError(5, f"{log.path} ends at {log.end}, expected {upto}")
    return state
