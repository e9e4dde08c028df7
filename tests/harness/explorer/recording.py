"""Recording: a FileSystem that performs each call and records it as an Event.

Part of the crash-state explorer; the theory is in harness/explorer/__init__.py.
"""

from __future__ import annotations

import errno as errno_mod
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from nobroker.file.disk.fs import FileSystem

SECTOR = 512
PROFILES = ("process", "ext4ish", "weak", "windows")
QUEUE = "q"
_HERE = os.path.dirname(os.path.abspath(__file__))  # the explorer package
_LOG_NAME = re.compile(r"[A-Za-z0-9_-]+\.(\d{6,})\.log")
_SKIP_FRAMES = ("unittest/mock.py", "contextlib.py", "functools.py")


class SimulatedCrash(BaseException):
    """The process 'died' here (a BaseException, so library cleanup code cannot eat it)."""


# ==========================================================================
# 1. Recording


@dataclass(slots=True)
class Event:
    """One recorded file-system call or API marker."""

    index: int
    kind: str  # create write trunc fsync fsync_failed dirsync rename unlink | begin end
    ino: int = -1
    name: str = ""
    name2: str = ""
    offset: int = 0
    data: bytes = b""
    call: int = -1
    where: tuple[str, ...] = ()
    detail: str = ""

    def describe(self) -> str:
        what = {"write": f"pwrite {len(self.data)}B @{self.offset} to {self.name}",
                "trunc": f"ftruncate {self.name} to {self.offset}",
                "fsync": f"fsync {self.name}", "fsync_failed": f"fsync {self.name} -> EIO",
                "create": f"create {self.name}", "unlink": f"unlink {self.name}",
                "rename": f"rename {self.name} -> {self.name2}", "dirsync": "fsync(dir)",
                }.get(self.kind, f"{self.kind} {self.detail}")
        where = f"  [{' <- '.join(self.where[:3])}]" if self.where else ""
        return f"#{self.index} {what}{where}"


@dataclass
class _Fault:
    kind: str  # "write" (pwrite) | "fsync" (fsync or fdatasync) | "dirsync" | "trunc" | ...
    skip: int
    action: str  # "eio" | "enospc" | "crash"
    keep: int | None = None  # for writes: bytes written before the fault strikes


class RecordingFS(FileSystem):
    """A FileSystem that does the real call and records it, for files in `root`.

    Calls on other paths pass through unrecorded. `arm()` injects a fault
    (EIO, ENOSPC, or a SimulatedCrash after writing a prefix) at the n-th
    later call of a kind. After a SimulatedCrash the recorder is frozen:
    every further mutating call raises SimulatedCrash again (a dead process
    writes nothing) until the driver thaws it.
    """

    def __init__(self, root: str, *, adopt: bool = False) -> None:
        self.root = os.path.abspath(root)
        self.events: list[Event] = []
        self.names: dict[str, int] = {}  # mirror of the directory: name -> inode
        self.files: dict[int, bytearray] = {}  # mirror of each inode's bytes
        self.fds: dict[int, int] = {}
        self.initial: dict[str, int] = {}
        self.call = -1
        self.frozen = False
        self._faults: list[_Fault] = []
        self._before_sync: list[Callable[[], None]] = []  # run just before the next fsync
        self._next_ino = 1
        if adopt:  # every file already present is durable: the start of a compound trace
            for name in sorted(os.listdir(self.root)):
                path = os.path.join(self.root, name)
                if os.path.isfile(path) and not os.path.islink(path):
                    ino = self._new_inode()
                    with open(path, "rb") as f:
                        self.files[ino] = bytearray(f.read())
                    self.names[name] = ino
            self.initial = dict(self.names)

    # -- bookkeeping --------------------------------------------------------

    def _new_inode(self) -> int:
        ino = self._next_ino
        self._next_ino += 1
        self.files[ino] = bytearray()
        return ino

    def _name(self, path: str) -> str | None:
        path = os.path.abspath(path)
        return os.path.basename(path) if os.path.dirname(path) == self.root else None

    def _emit(self, kind: str, **fields: Any) -> Event:
        event = Event(len(self.events), kind, call=self.call, where=_where(), **fields)
        self.events.append(event)
        return event

    def _ino_name(self, ino: int) -> str:
        for name, number in self.names.items():
            if number == ino:
                return name
        return f"<inode {ino}>"

    def mark(self, kind: str, detail: str) -> Event:
        event = Event(len(self.events), kind, call=self.call, detail=detail)
        self.events.append(event)
        return event

    # -- faults -------------------------------------------------------------

    def arm(self, kind: str, action: str, *, skip: int = 0, keep: int | None = None) -> None:
        """Fail the (skip+1)-th later `kind` call with `action` ("eio", "enospc", "crash")."""
        self._faults.append(_Fault(kind, skip, action, keep))

    def _fault(self, kind: str) -> _Fault | None:
        if self.frozen:
            raise SimulatedCrash("the process is dead")
        for fault in self._faults:
            if fault.kind == kind:
                if fault.skip:
                    fault.skip -= 1
                    return None
                self._faults.remove(fault)
                return fault
        return None

    @staticmethod
    def _raise(action: str) -> None:
        if action == "crash":
            raise SimulatedCrash("crash injected")
        code = errno_mod.ENOSPC if action == "enospc" else errno_mod.EIO
        raise OSError(code, os.strerror(code))

    # -- the FileSystem seam ------------------------------------------------

    def open(self, path: str, flags: int, mode: int = 0o600) -> int:
        name = self._name(path)
        if name is None or not flags & (os.O_CREAT | os.O_TRUNC | os.O_WRONLY | os.O_RDWR):
            fd = super().open(path, flags, mode)
            if name is not None and name in self.names:
                self.fds[fd] = self.names[name]
            return fd
        fault = self._fault("open")
        if fault:
            self._raise(fault.action)
        existed = name in self.names
        fd = super().open(path, flags, mode)
        if not existed:
            ino = self._new_inode()
            self.names[name] = ino
            self._emit("create", ino=ino, name=name)
        else:
            ino = self.names[name]
            if flags & os.O_TRUNC and self.files[ino]:
                del self.files[ino][:]
                self._emit("trunc", ino=ino, name=name, offset=0)
        self.fds[fd] = ino
        return fd

    def close(self, fd: int) -> None:
        self.fds.pop(fd, None)
        super().close(fd)

    def pwrite(self, fd: int, data: bytes, offset: int) -> int:
        ino = self.fds.get(fd)
        if ino is None:
            return super().pwrite(fd, data, offset)
        fault = self._fault("write")
        if fault is not None:
            if fault.keep:
                self._write(fd, ino, data[:fault.keep], offset)
            if fault.action == "crash":
                self.frozen = True
            self._raise(fault.action)
        return self._write(fd, ino, data, offset)

    def _write(self, fd: int, ino: int, data: bytes, offset: int) -> int:
        written = super().pwrite(fd, data, offset)
        data = bytes(data[:written])
        buf = self.files[ino]
        if len(buf) < offset:
            buf.extend(bytes(offset - len(buf)))
        buf[offset:offset + len(data)] = data
        self._emit("write", ino=ino, name=self._ino_name(ino), offset=offset, data=data)
        return written

    def _sync(self, fd: int) -> None:
        ino = self.fds.get(fd)
        if ino is None:
            super().fsync(fd)
            return
        if self._before_sync:  # another writer gets in between this write and its fsync
            self._before_sync.pop(0)()
        fault = self._fault("fsync")
        if fault is not None:
            if fault.action == "crash":
                self.frozen = True
            else:
                self._emit("fsync_failed", ino=ino, name=self._ino_name(ino))
            self._raise(fault.action)
        # No real fsync: the trace is the durability model; the scratch is tmpfs anyway.
        self._emit("fsync", ino=ino, name=self._ino_name(ino))

    def fsync(self, fd: int) -> None:
        self._sync(fd)

    def fdatasync(self, fd: int) -> None:
        self._sync(fd)

    def fsync_dir(self, path: str) -> None:
        if os.path.abspath(path) != self.root:
            return
        fault = self._fault("dirsync")
        if fault is not None:
            if fault.action == "crash":
                self.frozen = True
            self._raise(fault.action)
        self._emit("dirsync")

    def ftruncate(self, fd: int, length: int) -> None:
        ino = self.fds.get(fd)
        if ino is None:
            super().ftruncate(fd, length)
            return
        fault = self._fault("trunc")
        if fault is not None:
            self._raise(fault.action)
        super().ftruncate(fd, length)
        buf = self.files[ino]
        if length < len(buf):
            del buf[length:]
        else:
            buf.extend(bytes(length - len(buf)))
        self._emit("trunc", ino=ino, name=self._ino_name(ino), offset=length)

    def replace(self, src: str, dst: str) -> None:
        a, b = self._name(src), self._name(dst)
        if a is None or b is None:
            super().replace(src, dst)
            return
        fault = self._fault("rename")
        if fault is not None:
            self._raise(fault.action)
        super().replace(src, dst)
        self.names[b] = self.names.pop(a)
        self._emit("rename", ino=self.names[b], name=a, name2=b)

    def unlink(self, path: str) -> None:
        name = self._name(path)
        if name is None:
            super().unlink(path)
            return
        fault = self._fault("unlink")
        if fault is not None:
            self._raise(fault.action)
        super().unlink(path)
        ino = self.names.pop(name)
        self._emit("unlink", ino=ino, name=name)

    def mkdir(self, path: str, mode: int = 0o700) -> None:
        if self.frozen:
            raise SimulatedCrash("the process is dead")
        super().mkdir(path, mode)

    # -- the shadow check ---------------------------------------------------

    def shadow_check(self, ignore: Callable[[str], bool]) -> str | None:
        """None if the mirror equals the real directory, else what differs."""
        real = {n for n in os.listdir(self.root) if not ignore(n)}
        mine = {n for n in self.names if not ignore(n)}
        if real != mine:
            return f"names differ: only on disk {sorted(real - mine)}, only recorded " \
                   f"{sorted(mine - real)}"
        for name in sorted(real):
            with open(os.path.join(self.root, name), "rb") as f:
                if f.read() != self.files[self.names[name]]:
                    return f"bytes of {name} differ from what was recorded"
        return None


def _where() -> tuple[str, ...]:
    """The source lines (outside this package) that led to the current call."""
    frame = sys._getframe(2)
    out: list[str] = []
    while frame is not None and len(out) < 6:
        filename = frame.f_code.co_filename
        if os.path.dirname(filename) == _HERE:
            if out:
                break
        elif not filename.endswith(_SKIP_FRAMES):
            out.append(f"{os.path.basename(filename)}:{frame.f_lineno} "
                       f"{frame.f_code.co_qualname}")
        frame = frame.f_back  # type: ignore[assignment]
    return tuple(out)
