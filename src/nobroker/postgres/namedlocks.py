"""Named locks (`Queue.lock`, a task's `lock=`) on PostgreSQL: session advisory locks.

A key's lock is `pg_try_advisory_lock` on one 64-bit number: the first 8
bytes of a BLAKE2b hash of the schema, the queue and the key, so the same key
on two queues (or two queue sets in one database) are different locks. The
single-number form is a lock space of its own, apart from the two-number
locks nobroker takes for migrations and counter slots.

Each held lock has a connection of its own while it is held: a session lock
lives as long as its connection, so a holder that dies (or loses its
connection) holds nothing, and no lock is left to expire. Letting go unlocks
on that connection (closing it would not do: the server ends a closed
session a moment later, and a rival trying right after would still find the
lock held), then keeps it for the next lock: a new connection costs about
10 ms, most of it authentication.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from typing import Any, Final

import psycopg

from ..errors import ConnectionLostError
from .connection import connect, error_text
from .url import Target

__all__ = ["LockConnections", "lock_number"]

Conn = psycopg.Connection[tuple[Any, ...]]

_IDLE: Final = 4  # connections kept between locks, per handle


def lock_number(schema: str, queue: str, key: str) -> int:
    """The advisory lock number of `key` in `queue` of the queue set `schema`."""
    text = "\0".join((schema, queue, key)).encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big", signed=True)


class LockConnections:
    """One handle's named locks: a connection per held lock, a few kept idle."""

    def __init__(self, target: Target, queue: str, timeout: float) -> None:
        self.target = target
        self.queue = queue
        self.timeout = timeout
        self._guard = threading.Lock()
        self._idle: list[Conn] = []
        self._closed = False

    def try_lock(self, key: str) -> Callable[[], None] | None:
        """Take `key`'s lock if no session holds it: the function that lets it go (call
        it once), or None if it is held."""
        number = lock_number(self.target.schema, self.queue, key)
        conn, row = self._ask(number)
        if row is None or not row[0]:
            self._keep(conn)
            return None

        def release() -> None:
            try:
                conn.execute("SELECT pg_advisory_unlock(%s)", (number,))
            except psycopg.Error:  # the connection broke: the lock went with it
                conn.close()
            else:
                self._keep(conn)

        return release

    def _ask(self, number: int) -> tuple[Conn, Any]:
        """A connection and the server's answer to the try; an idle connection that
        broke meanwhile is dropped for a new one."""
        while True:
            with self._guard:
                idle = self._idle.pop() if self._idle else None
            conn = idle if idle is not None else connect(self.target, self.timeout)
            try:
                return conn, conn.execute("SELECT pg_try_advisory_lock(%s)",
                                          (number,)).fetchone()
            except psycopg.Error as exc:
                conn.close()
                if idle is None:
                    raise ConnectionLostError(self.target.shown, "lock",
                                              error_text(self.target, exc)) from None
            except BaseException:
                conn.close()
                raise

    def _keep(self, conn: Conn) -> None:
        with self._guard:
            if not self._closed and len(self._idle) < _IDLE:
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        """Close the idle connections; a held lock's closes when it is let go."""
        with self._guard:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()
