"""`nobroker db recount`: a queue set's counters counted anew from its job rows.

The statements keep the counters as they write (sql/parts/counted.sql), so they
are exact for everything nobroker does; rows changed by hand (a DELETE in
psql) or by an older nobroker that counted with triggers while a newer one
migrated the schema are not counted. This counts every queue's live, dead
and kept jobs from the rows and writes them as one counter row per queue.
`done` (acks ever made) cannot be counted from rows, which an ack may have
deleted: it keeps its sum. The jobs table is locked against writes while it
runs (readers go on), so no write is counted twice or missed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import sql
from .connection import migrate
from .url import Target

if TYPE_CHECKING:
    import psycopg

__all__ = ["Recount", "recount"]


@dataclass(frozen=True)
class Recount:
    """One queue's counts before and after a recount: (live, dead, kept) each."""

    queue: str
    before: tuple[int, int, int]
    after: tuple[int, int, int]

    def describe(self) -> str:
        names = ("pending + leased", "dead", "kept")
        if self.before == self.after:
            counts = ", ".join(f"{n} {a:,}" for n, a in zip(names, self.after, strict=True))
            return f"{self.queue}: {counts} (already right)"
        return f"{self.queue}: " + ", ".join(
            f"{n} {a:,}" + ("" if a == b else f" (counted {b:,})")
            for n, a, b in zip(names, self.after, self.before, strict=True))


def recount(conn: psycopg.Connection[tuple[Any, ...]], target: Target) -> list[Recount]:
    """Count every queue of `target`'s schema anew (migrated first if needed)."""
    migrate(conn, target)
    schema = target.schema
    with conn.transaction():
        conn.execute(sql.query("recount_lock", schema))
        rows = conn.execute(sql.query("recount", schema)).fetchall()
        conn.execute(sql.query("recount_clear", schema))
        with conn.cursor() as cursor:
            cursor.executemany(sql.query("recount_write", schema),
                               [(r[0], r[4], r[5], r[7], r[6]) for r in rows])
    return [Recount(str(r[0]), (int(r[1]), int(r[2]), int(r[3])),
                    (int(r[4]), int(r[5]), int(r[6]))) for r in rows]
