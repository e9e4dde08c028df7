"""FaultFS: a FileSystem that fails one chosen call the way a kernel would (EIO, ENOSPC...).

The theory is in tests/file/test_faults.py, which runs the bounded loop.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable

from nobroker.file.disk.fs import FileSystem

ERRNOS = (errno.EIO, errno.ENOSPC)
MODES = ("once", "persist", "short", "drop")


class FaultFS(FileSystem):
    """A FileSystem that counts mutating calls and can make one of them fail.

    `arm(index, err, mode)`: the `index`-th mutating call (1-based) fails with
    `err`; mode "once" fails only it, "persist" fails it and every later
    mutating call, "short" turns it (if a pwrite) into a write of half the
    bytes and fails the next pwrite with ENOSPC, "drop" fails it and, if it
    is an fsync, also reverts the file to what the last successful fsync made
    durable. `calls` counts every call, mutating or not, so a test can prove
    a poisoned handle touched nothing.
    """

    def __init__(self) -> None:
        self.mutating = 0
        self.calls = 0
        self.injected = 0
        self.target: int | None = None
        self.err = errno.EIO
        self.mode = "once"
        self.enabled = True
        self.trace: list[str] = []
        self._fail_next_write = False
        self._paths: dict[int, str] = {}
        self._durable: dict[str, bytes] = {}
        self._match: str | None = None
        self._matched = 0

    def arm(self, index: int, err: int, mode: str) -> None:
        self.target, self.err, self.mode = index, err, mode

    def arm_matching(self, prefix: str, nth: int, err: int, mode: str = "once") -> None:
        """Fail the `nth` mutating call from now on whose description starts with `prefix`."""
        self._match, self._matched = prefix, 0
        self.target, self.err, self.mode = nth, err, mode

    def disable(self) -> None:
        self.enabled = False

    # -- the decision -------------------------------------------------------

    def _mutation(self, what: str) -> bool:
        """Count one mutating call; True if it must fail."""
        self.mutating += 1
        self.trace.append(what)
        if not self.enabled or self.target is None:
            return False
        if self._match is not None:
            if not what.startswith(self._match):
                return False
            self._matched += 1
            return self._matched == self.target or (
                self.mode == "persist" and self._matched > self.target)
        if self.mutating == self.target:
            return True
        return self.mode == "persist" and self.mutating > self.target

    def _raise(self, what: str, err: int | None = None) -> None:
        self.injected += 1
        code = self.err if err is None else err
        raise OSError(code, f"{os.strerror(code)} (injected at call {self.mutating}: {what})")

    # -- the seam -----------------------------------------------------------

    def open(self, path: str, flags: int, mode: int = 0o600) -> int:
        self.calls += 1
        if flags & os.O_CREAT and self._mutation(f"open-create {os.path.basename(path)}"):
            self._raise("open")
        fd = super().open(path, flags, mode)
        self._paths[fd] = path
        return fd

    def close(self, fd: int) -> None:
        self.calls += 1
        self._paths.pop(fd, None)
        super().close(fd)

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        self.calls += 1
        return super().pread(fd, size, offset)

    def pwrite(self, fd: int, data: bytes, offset: int) -> int:
        self.calls += 1
        if self._fail_next_write:
            self._fail_next_write = False
            self._raise("pwrite after a short write", errno.ENOSPC)
        if self._mutation(f"pwrite {len(data)}@{offset}"):
            if self.mode == "short" and len(data) > 1:
                self.injected += 1
                self._fail_next_write = True
                return super().pwrite(fd, data[:len(data) // 2], offset)
            self._raise("pwrite")
        return super().pwrite(fd, data, offset)

    def _sync(self, fd: int, real: Callable[[int], None], what: str) -> None:
        self.calls += 1
        path = self._paths.get(fd, "?")
        if self._mutation(f"{what} {os.path.basename(path)}"):
            if self.mode == "drop" and path in self._durable:
                self._revert(fd, path)
            self._raise(what)
        real(fd)
        if path != "?":
            with open(path, "rb") as handle:  # the test's own read, not the queue's
                self._durable[path] = handle.read()

    def _revert(self, fd: int, path: str) -> None:
        """The pages of the failed write-back are gone: only the synced image remains."""
        image = self._durable[path]
        os.ftruncate(fd, len(image))
        os.pwrite(fd, image, 0)

    def fsync(self, fd: int) -> None:
        self._sync(fd, super().fsync, "fsync")

    def fdatasync(self, fd: int) -> None:
        self._sync(fd, super().fdatasync, "fdatasync")

    def fsync_dir(self, path: str) -> None:
        self.calls += 1
        if self._mutation(f"fsync_dir {os.path.basename(path)}"):
            self._raise("fsync_dir")
        super().fsync_dir(path)

    def ftruncate(self, fd: int, length: int) -> None:
        self.calls += 1
        if self._mutation(f"ftruncate {length}"):
            self._raise("ftruncate")
        super().ftruncate(fd, length)

    def fstat(self, fd: int) -> os.stat_result:
        self.calls += 1
        return super().fstat(fd)

    def stat(self, path: str) -> os.stat_result:
        self.calls += 1
        return super().stat(path)

    def replace(self, src: str, dst: str) -> None:
        self.calls += 1
        if self._mutation(f"replace {os.path.basename(src)}"):
            self._raise("replace")
        super().replace(src, dst)
        # Open descriptors follow the file to its new name (compaction renames a
        # generation it still has open), and so does what was made durable.
        for fd, path in self._paths.items():
            if path == src:
                self._paths[fd] = dst
        if src in self._durable:
            self._durable[dst] = self._durable.pop(src)

    def unlink(self, path: str) -> None:
        self.calls += 1
        if self._mutation(f"unlink {os.path.basename(path)}"):
            self._raise("unlink")
        super().unlink(path)

    def mkdir(self, path: str, mode: int = 0o700) -> None:
        self.calls += 1
        if self._mutation(f"mkdir {os.path.basename(path)}"):
            self._raise("mkdir")
        super().mkdir(path, mode)

    def listdir(self, path: str) -> list[str]:
        self.calls += 1
        return super().listdir(path)
