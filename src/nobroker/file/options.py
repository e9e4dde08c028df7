"""FileOptions: how the file engine is run, beside the Queue's backend-neutral Settings.

The first two are the public Queue arguments that only a directory of files
has. The rest have defaults that production never changes; tests and
benchmarks pass other values (a recording or failing file system, no
checkpoints, checkpoints or compaction at small sizes) through this object
instead of patching module globals.
"""

from __future__ import annotations

from dataclasses import dataclass

from .disk.fs import OS, FileSystem

__all__ = ["FileOptions"]


@dataclass(frozen=True, slots=True)
class FileOptions:
    auto_compact: float | None = 0.5  # compact when this fraction of the log is dead
    allow_network_fs: bool = False  # open a queue on NFS/SMB anyway (one process only)
    fs: FileSystem = OS  # every file operation goes through it
    checkpoints: bool = True  # False: never read or write checkpoints (full replays)
    checkpoint_every_bytes: int = 8 << 20  # a live handle checkpoints at least this far apart
    checkpoint_after_bytes: int = 1 << 20  # close() checkpoints when this much was logged since
    min_compact_bytes: int = 1 << 20  # auto-compaction never bothers below this log size
