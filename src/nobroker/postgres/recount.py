"""`nobroker db recount`: a queue set's counters counted anew from its job rows.

The statements keep the counters as they write (statements.py), so they
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

from . import schema
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
    s = schema.quoted(target.schema)
    with conn.transaction():
        conn.execute(f"LOCK TABLE {s}.jobs IN EXCLUSIVE MODE".encode())
        rows = conn.execute(f"""
            WITH counted AS (
                SELECT queue, sum(live) AS live, sum(dead) AS dead, sum(kept) AS kept,
                       sum(done) AS done
                FROM {s}.counters GROUP BY queue),
            truth AS (
                SELECT queue, count(*) FILTER (WHERE state <= 1) AS live,
                       count(*) FILTER (WHERE state = 2) AS dead,
                       count(*) FILTER (WHERE {s}.nb_kept(state, result)) AS kept
                FROM {s}.jobs GROUP BY queue)
            SELECT coalesce(t.queue, c.queue), coalesce(c.live, 0), coalesce(c.dead, 0),
                   coalesce(c.kept, 0), coalesce(t.live, 0), coalesce(t.dead, 0),
                   coalesce(t.kept, 0), coalesce(c.done, 0)
            FROM truth AS t FULL JOIN counted AS c ON c.queue = t.queue
            ORDER BY 1""".encode()).fetchall()
        conn.execute(f"DELETE FROM {s}.counters".encode())
        with conn.cursor() as cursor:
            cursor.executemany(
                f"INSERT INTO {s}.counters (queue, slot, live, dead, done, kept) "
                "VALUES (%s, -1, %s, %s, %s, %s)".encode(),
                [(r[0], r[4], r[5], r[7], r[6]) for r in rows])
    return [Recount(str(r[0]), (int(r[1]), int(r[2]), int(r[3])),
                    (int(r[4]), int(r[5]), int(r[6]))) for r in rows]
