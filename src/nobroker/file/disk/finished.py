"""Waking the callers that wait for a job to finish (Queue.result), across processes.

The wake pipe (wake.py) is a pool of pokes that idle workers share: each
poke wakes one of them, which is right for "a job is ready" and wrong for
"job X finished", which every waiter needs to hear. So a waiter for a
result does not touch that pipe; it owns a named pipe of its own for as long
as it waits, in the directory `NAME.done/`, and every writer whose batch
finished a job (ACK, CANCEL, a NACK or EXPIRE that dead-letters, DELETE,
PURGE) writes one byte into each pipe there. A woken waiter drains its pipe
and looks at its job again; it never needs more than "something finished".

No poke is missed: a waiter's pipe appears in the directory (by a rename,
once its read end is open) before the waiter looks at its job, and a writer
lists the directory after its commit. If the commit came after the look,
the listing comes after the rename. The writer caches the listing while the
directory's mtime is unchanged and more than a second old (file system
timestamps are coarse: two changes within one tick show one mtime).

Cost for writers when nobody waits: one system call per finishing batch (an
access() of `NAME.done/`, which does not exist until someone first waits;
after that a stat, whose mtime says nothing changed): 2 to 5 us on the loaded
2-core machine it was measured on (tools/bench/result_wake.py), against 45 to 65 us
for an unsynced ack_and_lease there and milliseconds for a durable one.

Like the wake pipe, nothing here is durable state: a pipe whose owner died
is removed by the next writer that finds no reader on it. Where named pipes
do not exist (Windows) or the directory cannot be made (a read-only queue),
`FinishWaiter.wait` sleeps at most `poll` seconds, so waiting degrades to
polling.
"""

from __future__ import annotations

import errno
import os
import select
import sys
import time

__all__ = ["FinishSignal", "FinishWaiter", "finish_directory"]

_SUPPORTED = sys.platform != "win32" and hasattr(os, "mkfifo")
_SETTLED_NS = 1_000_000_000  # a directory unchanged this long is listed from the cache


def finish_directory(directory: str, name: str) -> str:
    return os.path.join(directory, f"{name}.done")


class FinishSignal:
    """The writer's side: poke every waiter's pipe. Never blocks, never raises."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._mtime = -1
        self._pipes: dict[str, int] = {}  # entry name -> write end

    def notify(self) -> None:
        if not _SUPPORTED:
            return
        # os.access answers "no such directory" without raising (an exception costs
        # as much again as the system call): the usual case, where nobody ever waited.
        if not self._pipes and self._mtime < 0 and not os.access(self.path, os.F_OK):
            return
        try:
            mtime = os.stat(self.path).st_mtime_ns
        except OSError:  # removed since
            self.close()
            return
        if mtime != self._mtime or time.time_ns() - mtime < _SETTLED_NS:
            self._relist()
            self._mtime = mtime
        for name, fd in list(self._pipes.items()):
            try:
                os.write(fd, b"!")
            except BlockingIOError:
                pass  # full of unread pokes: its owner will look anyway
            except OSError:  # EPIPE: its owner left
                self._drop(name)

    def _relist(self) -> None:
        try:
            names = {entry for entry in os.listdir(self.path) if not entry.startswith(".")}
        except OSError:
            names = set()
        for name in set(self._pipes) - names:
            self._drop(name)
        for name in names - set(self._pipes):
            pipe = os.path.join(self.path, name)
            try:
                self._pipes[name] = os.open(pipe, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            except OSError as exc:
                if exc.errno == errno.ENXIO:  # no reader: its owner died without cleaning up
                    try:
                        os.unlink(pipe)
                    except OSError:
                        pass

    def _drop(self, name: str) -> None:
        fd = self._pipes.pop(name, None)
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass

    def close(self) -> None:
        for name in list(self._pipes):
            self._drop(name)
        self._mtime = -1


class FinishWaiter:
    """One waiting call's own pipe in `NAME.done/`, visible only once it can be read."""

    def __init__(self, path: str, poll: float = 0.05) -> None:
        self.poll = poll
        self._reader: int | None = None
        self._keepalive: int | None = None
        self._name: str | None = None
        if _SUPPORTED:
            self._open(path)

    def _open(self, path: str) -> None:
        token = f"{os.getpid()}-{os.urandom(6).hex()}"
        temp = os.path.join(path, f".{token}")
        try:
            os.makedirs(path, mode=0o700, exist_ok=True)
            os.mkfifo(temp, 0o600)
        except OSError:
            return  # a read-only directory: poll instead
        try:
            self._reader = os.open(temp, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            # Our own write end: a pipe whose writers all left reads as EOF forever,
            # and select would spin on it.
            self._keepalive = os.open(temp, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            self._name = os.path.join(path, token)
            os.rename(temp, self._name)
        except OSError:
            self.close()
            try:
                os.unlink(temp)
            except OSError:
                pass

    def wait(self, timeout: float) -> bool:
        """Block up to `timeout` seconds for a poke; True if one (or more) arrived."""
        if timeout <= 0:
            return False
        if self._reader is None or self._name is None:
            time.sleep(min(timeout, self.poll))
            return False
        ready, _, _ = select.select([self._reader], [], [], timeout)
        if not ready:
            return False
        try:
            while len(os.read(self._reader, 4096)) == 4096:
                pass
        except BlockingIOError:
            pass
        return True

    def close(self) -> None:
        if self._name is not None:
            try:
                os.unlink(self._name)
            except OSError:
                pass
            self._name = None
        for fd in (self._reader, self._keepalive):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._reader = self._keepalive = None

    def __enter__(self) -> FinishWaiter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
