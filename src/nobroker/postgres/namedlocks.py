"""Named locks (`Queue.lock`, a task's `lock=`) on PostgreSQL: session advisory locks.

A key's lock is `pg_try_advisory_lock` on one 64-bit number: the first 8
bytes of a BLAKE2b hash of the schema, the queue and the key, so the same key
on two queues (or two queue sets in one database) are different locks. The
single-number form is a lock space of its own, apart from the two-number
locks nobroker takes for migrations and counter slots.

Each held lock has a connection of its own, opened for it and closed when it
is let go: a session lock lives as long as its connection, so a holder that
dies (or loses its connection) holds nothing, and no lock is left to expire.
Letting go unlocks before closing: the server ends a closed session a moment
later, and a rival trying right after would still find the lock held.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import psycopg

from ..errors import ConnectionLostError
from .connection import connect, error_text
from .url import Target

__all__ = ["lock_number", "try_named_lock"]


def lock_number(schema: str, queue: str, key: str) -> int:
    """The advisory lock number of `key` in `queue` of the queue set `schema`."""
    text = "\0".join((schema, queue, key)).encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big", signed=True)


def try_named_lock(target: Target, queue: str, key: str,
                   timeout: float) -> Callable[[], None] | None:
    """Take `key`'s lock if no session holds it: the function that lets it go (call
    it once), or None if it is held."""
    number = lock_number(target.schema, queue, key)
    conn = connect(target, timeout)
    try:
        row = conn.execute("SELECT pg_try_advisory_lock(%s)", (number,)).fetchone()
    except psycopg.Error as exc:
        conn.close()
        raise ConnectionLostError(target.shown, "lock", error_text(target, exc)) from None
    except BaseException:
        conn.close()
        raise
    if row is None or not row[0]:
        conn.close()
        return None

    def release() -> None:
        try:
            conn.execute("SELECT pg_advisory_unlock(%s)", (number,))
        except psycopg.Error:
            pass  # the connection broke: the lock went with it
        finally:
            conn.close()

    return release
