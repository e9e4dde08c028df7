"""Reading forward: what other handles wrote, and the compactions they made.

Every locked call first catches up with the log (beat 1 of handle.py's
protocol). Usually that is a scan of the batches appended since; when a peer
has compacted (the lock file's stamp names a newer generation), the handle
follows it without replaying: its state, read to the end of the old
generation, already holds exactly the jobs the new one does, so only where
their payloads live must change, and the new generation's checkpoint says
where. If anything does not line up, the handle reloads from the files
(opening.py), which is always right.

Under the queue's lock.
"""

from __future__ import annotations

from ..errors import CorruptLogError
from .disk.fs import FileSystem
from .generations import checkpoint, compaction
from .generations.current import read_current
from .handleapi import HandleAPI
from .log.logfile import LogFile
from .opening import cut_torn_tail

__all__ = ["refresh", "follow_compaction"]


def refresh(handle: HandleAPI) -> None:
    """Catch up with what other handles wrote since we last looked."""
    current = handle.live_log()
    if handle.lock.stamp != current.generation:
        # Someone compacted: move to the new generation, cheaply if we can.
        if follow_compaction(handle):
            refresh(handle)  # and read what was written to the new generation since
            handle.counters.follows += 1
        else:
            handle.counters.reloads += 1
            handle.reload()
        return
    state = handle.state
    try:
        result = current.scan(state.apply_batch, state.last_batch, full=False)
    except CorruptLogError as exc:
        handle.poison(str(exc))
        raise
    if result.torn_offset is not None and not handle.readonly:
        cut_torn_tail(current, result)


def follow_compaction(handle: HandleAPI) -> bool:
    """Switch `handle` to the generation another handle compacted into, keeping its
    state (refresh then reads forward in the new generation).

    Our state, once we have read the old generation to its end (nobody
    writes it after the switch), holds exactly the jobs the new generation
    does; only where their payloads live has changed. The new generation's
    checkpoint says where the snapshot put each job, and everything
    appended to the old generation after the snapshot point was copied
    byte for byte, so it moved by a fixed distance. That is O(jobs) of
    simple updates instead of decoding a checkpoint or replaying a log.
    Returns False (the caller reloads) if anything does not line up.
    """
    old, state, fs = handle.live_log(), handle.state, handle.fs
    generation = read_current(fs, handle.directory, handle.name)
    if generation != old.generation + 1:
        return False
    try:
        old.scan(state.apply_batch, state.last_batch, full=False)
        new_log = LogFile.open(fs, handle.directory, handle.name, generation,
                               readonly=handle.readonly)
    except (OSError, CorruptLogError):
        return False
    moved = _relocation(fs, new_log) if handle.options.checkpoints else None
    if (moved is None or moved.source_generation != old.generation
            or not moved.source_offset <= old.end):
        new_log.close()
        return False
    shift = moved.end - moved.source_offset
    if not state.relocate(moved.source_offset, shift, moved.seqs, moved.names,
                          moved.locs, moved.sizes):
        new_log.close()
        return False  # not the jobs we know: reload instead
    new_log.end = moved.end + old.end - moved.source_offset
    new_log.crc = new_log.prefix_crc(new_log.end, moved.end, moved.crc)  # the copied tail
    state.snapshot_seen = True  # what a replay of the new generation says
    handle.switch_generation(new_log, state, moved.end)
    return True


def _relocation(fs: FileSystem, new_log: LogFile) -> checkpoint.Relocation | None:
    """The job locations of the compaction that switched to `new_log`: from the
    checkpoint it published under a name of its own, which no later checkpoint
    replaces; or, from a compaction by an older version that had no such name,
    from NAME.GGGGGG.ckpt if that is still the compaction's (its nonce says)."""
    for path in (new_log.switch_checkpoint_path, new_log.checkpoint_path):
        try:
            data = new_log.read_checkpoint(path)
            if data is not None:
                return checkpoint.relocation(
                    data, new_log.generation, fs.fstat(new_log.fd).st_size,
                    lambda offset: compaction.snapshot_nonce(new_log, offset))
        except (checkpoint.CheckpointError, OSError):
            pass
    return None
