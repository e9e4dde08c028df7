"""Opening a queue's files: where a queue may live, loading and recovering it.

A handle's first job, and the one it repeats when its state can no longer
be trusted (a peer compacted in a way it cannot follow, a forked child):
make sure the directory exists and is not on a network file system whose
locks do not work; find the current generation; rebuild the replay state
from its checkpoint and records (rebuild.py); and cut a torn tail, saving
the bytes aside and saying so in the RecoveryReport. These are functions of
the files: the handle adopts what `load` returns (QueueHandle.reload).
`queue_exists` is the one answer to "is there a queue of this name here?"
(the CLI and read-only opens ask it).

Under the queue's lock, except `queue_exists` and the directory checks.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from ..errors import CorruptLogError, NobrokerError, UnsafeFilesystemError
from ..models import RecoveryReport
from .disk.fs import NETWORK_FILESYSTEMS, FileSystem, filesystem_type
from .generations import current
from .generations.rebuild import load_checkpoint
from .log import framing
from .log.logfile import LogFile, ScanResult, log_filename, paused_gc
from .state.state import QueueState

__all__ = ["Loaded", "queue_exists", "queue_files", "prepare_directory", "load",
           "cut_torn_tail"]

log = logging.getLogger("nobroker")


def queue_files(name: str) -> tuple[str, ...]:
    """The file names whose presence means a queue `name` was created in a directory:
    the lock file comes first (opening creates it), then generation 0, then
    NAME.current once it has compacted."""
    return (current.current_filename(name), log_filename(name, 0), f"{name}.lock")


def queue_exists(directory: str, name: str) -> bool:
    """Whether `directory` holds a queue named `name` (it was created there)."""
    return any(os.path.lexists(os.path.join(directory, entry)) for entry in queue_files(name))


def prepare_directory(fs: FileSystem, directory: str, *, readonly: bool,
                      allow_network_fs: bool) -> bool:
    """Create the directory if needed; True if it is on a network file system
    (allowed only with `allow_network_fs`)."""
    if not os.path.isdir(directory):
        if readonly:
            raise NobrokerError(f"no queue directory at {directory}")
        parent = os.path.dirname(directory)
        os.makedirs(parent, mode=0o700, exist_ok=True)
        try:
            fs.mkdir(directory, 0o700)  # payloads are often private
            fs.fsync_dir(parent)
        except FileExistsError:
            pass
    kind = filesystem_type(directory)
    if kind in NETWORK_FILESYSTEMS and not allow_network_fs:
        raise UnsafeFilesystemError(
            f"{directory} is on a network file system ({kind}); kernel file locks "
            f"do not protect a queue there. Pass allow_network_fs=True to use it anyway, "
            f"with one process only.")
    return kind in NETWORK_FILESYSTEMS


@dataclass(frozen=True, slots=True)
class Loaded:
    """The current generation, opened and replayed, for a handle to adopt."""

    log: LogFile
    state: QueueState
    checkpointed: int  # the log offset its checkpoint covers (the header's end: none)
    report: RecoveryReport


def load(fs: FileSystem, directory: str, name: str, *, readonly: bool,
         checkpoints: bool) -> Loaded:
    """Open the current generation and rebuild its state; under the lock."""
    notes: list[str] = []
    generation = current.read_current(fs, directory, name)
    if generation == 0:
        generation = current.first_generation(fs, directory, name, readonly=readonly,
                                              notes=notes)
    try:
        new_log = LogFile.open(fs, directory, name, generation, readonly=readonly)
    except FileNotFoundError:
        raise CorruptLogError(os.path.join(directory, current.current_filename(name)), 0,
                              f"names generation {generation}, whose log file is missing")\
            from None
    try:
        with paused_gc():
            loaded = load_checkpoint(new_log) if checkpoints else None
            from_checkpoint = None if loaded is None else new_log.end
            state = QueueState() if loaded is None else loaded
            result = new_log.scan(state.apply_batch, state.last_batch, full=True)
        if generation > 0 and not state.snapshot_seen:
            raise CorruptLogError(new_log.path, new_log.end,
                                  "generation does not start with a complete snapshot")
        side = None
        if result.torn_offset is not None and not readonly:
            side = cut_torn_tail(new_log, result)
    except BaseException:
        new_log.close()
        raise
    report = RecoveryReport(
        generation=generation, records=result.records, torn_offset=result.torn_offset,
        torn_bytes=result.torn_bytes, torn_reason=result.torn_reason,
        repaired=side is not None, side_file=side, notes=tuple(notes),
        checkpoint_offset=from_checkpoint)
    return Loaded(new_log, state, from_checkpoint or framing.FILE_HEADER.size, report)


def cut_torn_tail(target: LogFile, result: ScanResult) -> str:
    """Save a torn tail to a side file, cut it, say so; returns the side file."""
    assert result.torn_offset is not None
    side = target.save_torn(result.torn_offset, result.torn_bytes)
    target.cut(result.torn_offset)
    log.warning("%s: cut a torn tail of %d bytes at offset %d (%s); saved to %s",
                target.path, result.torn_bytes, result.torn_offset, result.torn_reason,
                side)
    return side
