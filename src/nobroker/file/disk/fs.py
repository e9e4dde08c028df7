"""The one narrow seam between nobroker's storage code and the operating system.

Every file operation on a queue directory goes through a `FileSystem`
object, so a test can substitute one that records calls (to build crash
states) or injects faults (EIO, ENOSPC). Nothing else in the storage layer
calls `os` for queue files.

It also holds the single durability helper, `replace_durably`: write a
temporary file, fsync it, rename it over the target, fsync the directory.
"""

from __future__ import annotations

import os
import sys
from typing import Final

__all__ = ["FileSystem", "OS", "replace_durably", "filesystem_type", "NETWORK_FILESYSTEMS"]

_BINARY: Final = getattr(os, "O_BINARY", 0)  # Windows would otherwise translate newlines
_NOFOLLOW: Final = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC: Final = getattr(os, "O_CLOEXEC", 0)

NETWORK_FILESYSTEMS: Final = frozenset({
    "nfs", "nfs4", "cifs", "smb", "smb2", "smb3", "smbfs", "ncpfs", "afs", "9p",
    "fuse.sshfs", "ceph", "glusterfs", "fuse.glusterfs", "lustre", "gpfs", "davfs",
})


class FileSystem:
    """Plain pass-through to the OS. Subclassed by tests; keep methods small."""

    def open(self, path: str, flags: int, mode: int = 0o600) -> int:
        return os.open(path, flags | _BINARY | _NOFOLLOW | _CLOEXEC, mode)

    def close(self, fd: int) -> None:
        os.close(fd)

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        if hasattr(os, "pread"):
            return os.pread(fd, size, offset)
        os.lseek(fd, offset, os.SEEK_SET)  # Windows has no pread
        return os.read(fd, size)

    def pwrite(self, fd: int, data: bytes, offset: int) -> int:
        if hasattr(os, "pwrite"):
            return os.pwrite(fd, data, offset)
        os.lseek(fd, offset, os.SEEK_SET)
        return os.write(fd, data)

    def fsync(self, fd: int) -> None:
        if sys.platform == "darwin":  # plain fsync there does not flush the drive cache
            import fcntl

            fcntl.fcntl(fd, fcntl.F_FULLFSYNC)
        else:
            os.fsync(fd)

    def fdatasync(self, fd: int) -> None:
        """Data plus the metadata needed to read it back (the size); not mtime."""
        if hasattr(os, "fdatasync") and sys.platform != "darwin":
            os.fdatasync(fd)
        else:
            self.fsync(fd)

    def fsync_dir(self, path: str) -> None:
        """Make creates, renames and unlinks in `path` durable (a no-op on Windows)."""
        if os.name == "nt":
            return
        fd = os.open(path, os.O_RDONLY | _CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def ftruncate(self, fd: int, length: int) -> None:
        os.ftruncate(fd, length)

    def fstat(self, fd: int) -> os.stat_result:
        return os.fstat(fd)

    def stat(self, path: str) -> os.stat_result:
        return os.stat(path, follow_symlinks=False)

    def replace(self, src: str, dst: str) -> None:
        os.replace(src, dst)

    def unlink(self, path: str) -> None:
        os.unlink(path)

    def mkdir(self, path: str, mode: int = 0o700) -> None:
        os.mkdir(path, mode)

    def listdir(self, path: str) -> list[str]:
        return os.listdir(path)

    def write_all(self, fd: int, data: bytes, offset: int) -> None:
        """pwrite until every byte is written (a short write is not an error)."""
        written = self.pwrite(fd, data, offset)
        if written == len(data):  # the usual case: no view, no copy of the bytes
            return
        if written <= 0:
            raise OSError(5, "write made no progress")
        view = memoryview(data)[written:]
        offset += written
        while view:
            written = self.pwrite(fd, view.tobytes(), offset)
            if written <= 0:
                raise OSError(5, "write made no progress")
            view = view[written:]
            offset += written


OS: Final = FileSystem()


def replace_durably(fs: FileSystem, directory: str, name: str, data: bytes) -> None:
    """Atomically give `directory/name` the content `data`, durably.

    Order matters for a crash at any point: the temporary file's bytes are
    fsynced before the rename can publish them (else the name may point at
    an empty file), and the directory is fsynced after the rename (else the
    rename itself may be forgotten).
    """
    target = os.path.join(directory, name)
    temp = target + ".tmp"
    fd = fs.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        fs.write_all(fd, data, 0)
        fs.fsync(fd)  # 1: the new content is on disk before any name points at it
    finally:
        fs.close(fd)
    fs.replace(temp, target)
    fs.fsync_dir(directory)  # 2: the rename itself is on disk


def filesystem_type(path: str) -> str | None:
    """The type of the mount holding `path` (Linux only; None where unknown)."""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as mounts:
            lines = mounts.read().splitlines()
    except OSError:
        return None
    real = os.path.realpath(path)
    best, best_type = "", None
    for line in lines:
        left, _, right = line.partition(" - ")
        fields = left.split()
        if len(fields) < 5 or not right:
            continue
        mount_point = fields[4].replace("\\040", " ")
        inside = real == mount_point or real.startswith(mount_point.rstrip("/") + "/")
        if inside and len(mount_point) >= len(best):
            best, best_type = mount_point, right.split()[0]
    return best_type
