"""NAME.current: the file that names a queue's current generation.

It is the commit point of every switch between generations (compaction.py's
step 7, salvage's too): before `publish_generation` replaces it, durably,
the old generation is authoritative and the new file an ignorable leftover;
after, the reverse. Opening starts here: `read_current` says which
generation NAME.current names, and `first_generation` what to open when
there is none (a new queue, a torn creation, or a torn flip at step 7).
`remove_stale_files` (step 8) deletes what NAME.current no longer names.
"""

from __future__ import annotations

import os
import re

from ...errors import CorruptLogError, NobrokerError
from ..disk.fs import FileSystem, replace_durably
from ..log import framing
from ..log.logfile import LogFile, log_filename

__all__ = ["current_filename", "parse_current", "read_current", "first_generation",
           "create_first_generation", "publish_generation", "remove_stale_files"]


def current_filename(name: str) -> str:
    return f"{name}.current"


def parse_current(data: bytes) -> int | None:
    """The generation a NAME.current file names, or None if it is malformed."""
    match = re.fullmatch(rb"(\d{1,9})\n?", data)
    return int(match.group(1)) if match else None


def read_current(fs: FileSystem, directory: str, name: str) -> int:
    """The generation NAME.current names; 0 when it does not exist yet."""
    path = os.path.join(directory, current_filename(name))
    try:
        fd = fs.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return 0
    except OSError as exc:
        raise CorruptLogError(path, 0, f"cannot open: {exc.strerror}") from None
    try:
        data = fs.pread(fd, 64, 0)
    except OSError as exc:  # a directory opens on Linux, then refuses to be read
        raise CorruptLogError(path, 0, f"cannot read: {exc.strerror}") from None
    finally:
        fs.close(fd)
    generation = parse_current(data)
    if generation is None:
        raise CorruptLogError(path, 0, f"does not name a generation: {data[:20]!r}")
    return generation


def first_generation(fs: FileSystem, directory: str, name: str, *, readonly: bool,
                     notes: list[str]) -> int:
    """The generation to open when NAME.current is absent: 0, created if need be."""
    path = os.path.join(directory, log_filename(name, 0))
    current = os.path.join(directory, current_filename(name))
    try:
        size = fs.stat(path).st_size
    except FileNotFoundError:
        size = None
    if size is not None and size > 16:
        return 0
    if size is None:
        others = sorted(entry for entry in fs.listdir(directory)
                        if entry.startswith(name + ".") and entry.endswith(".log"))
        numbers = [int(e[len(name) + 1:-4]) for e in others
                   if e[len(name) + 1:-4].isdigit()]
        if len(numbers) >= 2:
            # A flip from generation g to g+1 whose rename was torn: the old entry of
            # NAME.current is gone, the new one never landed (a rename is not atomic
            # on every file system). g+1 was complete and durable before the flip
            # began, and g is unlinked only after the flip is, so both exist: use g+1.
            notes.append(f"{os.path.basename(current)} was missing; "
                         f"opened the newest generation, {max(numbers)}")
            return max(numbers)
        if others:
            raise CorruptLogError(current, 0, f"missing, yet generations exist: {others}")
    else:
        fd = fs.open(path, os.O_RDONLY)
        try:
            head = fs.pread(fd, size, 0)
        finally:
            fs.close(fd)
        if size == 16 and head != bytes(16):
            return 0  # a whole header (LogFile.open judges it); 16 zero bytes fall through:
            # the header write's new size reached the disk, its bytes did not
        if head not in (framing.encode_file_header(0)[:size], bytes(size)):
            # Not what a crash during creation leaves: someone else's file. Keep it.
            raise CorruptLogError(path, 0, f"{size}-byte file is not a nobroker log")
    if readonly:
        raise NobrokerError(f"no queue named {name!r} in {directory}")
    if size is not None:
        # A crash while the queue was being created: the header never became durable,
        # so no call on this queue ever returned. Start it again.
        notes.append(f"re-created {os.path.basename(path)}: its {size}-byte header was torn")
        fs.unlink(path)
    create_first_generation(fs, directory, name)
    return 0


def create_first_generation(fs: FileSystem, directory: str, name: str) -> None:
    """Create generation 0 so that its name appears only once its header is durable.

    Written under a temporary name, fsynced, then renamed and the directory
    fsynced (LogFile.create and LogFile.rename), as every later generation is.
    Created in place, a crash could leave NAME.000000.log at its final name
    with the header's size but not its bytes, and a file system that exposes
    a grown file's unwritten blocks as junk (ALICE's weak model) would then
    show a 16-byte file that is no log: the next open would refuse it forever,
    though no call had returned. A leftover temporary file is ignored, and
    removed by a later compaction (remove_stale_files).
    """
    temp = f"{log_filename(name, 0)}.tmp-{os.getpid()}-{os.urandom(4).hex()}"
    created = LogFile.create(fs, directory, name, 0, filename=temp)
    try:
        created.rename()
    finally:
        created.close()



def publish_generation(fs: FileSystem, directory: str, name: str, generation: int) -> None:
    """The commit point: NAME.current names `generation`, durably."""
    replace_durably(fs, directory, current_filename(name), b"%d\n" % generation)


def remove_stale_files(fs: FileSystem, directory: str, name: str, current: int) -> list[str]:
    """Delete other generations and every temp file of this queue, the current
    generation's too; returns what was removed. Called under the lock at a switch:
    a temp file of the current generation is then a dead compactor's, or a racing
    one's that lost (its switch will see ours and throw its work away)."""
    pattern = re.compile(
        re.escape(name) + r"\.(\d{6,})\.(log|ckpt|switch\.ckpt|(?:ckpt|log)\.tmp-[0-9a-f-]+)$")
    removed = []
    for entry in fs.listdir(directory):
        match = pattern.fullmatch(entry)
        stale_temp = entry == current_filename(name) + ".tmp"
        if (match and (int(match.group(1)) != current or ".tmp-" in match.group(2))) \
                or stale_temp:
            fs.unlink(os.path.join(directory, entry))
            removed.append(entry)
    if removed:
        fs.fsync_dir(directory)
    return removed

