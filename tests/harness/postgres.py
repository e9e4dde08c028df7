"""What the PostgreSQL tests share: the server's URL, skipping without one, a fresh schema.

The server comes from `python make.py test-postgres` (tools/postgres/cluster.py),
which sets NOBROKER_TEST_POSTGRES_URL; without it (or without psycopg) every
PostgreSQL test is skipped, and `make.py test` says so in its summary.

`open_queue(url, name, **options)` is `Queue(url, name, **options)`: the
tests go through the real facade, as a user does. Results, cancel and pause
reach the Queue with the file engine's job control (`needs_job_control`
skips, saying so, while the Queue lacks them).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import unittest
import uuid
from typing import Any

import harness.support  # noqa: F401  (puts src/ on sys.path)
from nobroker import Queue

URL_ENV = "NOBROKER_TEST_POSTGRES_URL"
PG_CTL_ENV = "NOBROKER_TEST_PG_CTL"
URL = os.environ.get(URL_ENV, "")
HAVE_DRIVER = importlib.util.find_spec("psycopg") is not None
SKIP_REASON = ("PostgreSQL suite skipped: no server (run `python make.py test-postgres`)"
               if not URL else
               "PostgreSQL suite skipped: psycopg is not installed "
               "(run `python make.py test-postgres`)")
ENABLED = bool(URL) and HAVE_DRIVER


def needs_postgres(cls: type) -> type:
    return unittest.skipUnless(ENABLED, SKIP_REASON)(cls)


def fresh_schema_url() -> str:
    """The test server's URL with a schema of its own, so tests never share tables."""
    schema = "t_" + uuid.uuid4().hex[:12]
    joiner = "&" if "?" in URL else "?"
    return f"{URL}{joiner}schema={schema}"


def drop_schema(url: str) -> None:
    schema_sql(url, "DROP SCHEMA IF EXISTS {s} CASCADE")


def schema_sql(url: str, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Run `query` on the schema of `url` (`{s}`: its quoted name) in a connection of its
    own, autocommit: its rows, [] for a statement that returns none."""
    import psycopg

    from nobroker.postgres import schema
    from nobroker.postgres.url import parse

    target = parse(url)
    with psycopg.connect(target.conninfo, autocommit=True) as conn:
        cursor = conn.execute(query.replace("{s}", schema.quoted(target.schema)).encode(),
                              params or None)
        return cursor.fetchall() if cursor.description else []


class OnFreshSchema:
    """A TestCase mixin (first among the bases): its queues live on a schema of its own
    (`location()`: its URL), dropped after it; how a suite written for `location()`
    runs on PostgreSQL."""

    def setUp(self) -> None:
        super().setUp()  # type: ignore[misc]
        self.url = fresh_schema_url()
        self.addCleanup(drop_schema, self.url)  # type: ignore[attr-defined]

    def location(self) -> str:
        return self.url


def jobs_read(q: Queue, call: Any) -> int:
    """Rows of `jobs` that `call()` read through an index in this session's server
    process (pg_stat_xact_user_tables: not yet reported, so exact), in one transaction
    on the queue's own connection."""
    schema = q.backend.target.schema  # type: ignore[attr-defined]
    counts = ("SELECT coalesce(idx_tup_fetch, 0) + coalesce(seq_tup_read, 0) "
              "FROM pg_stat_xact_user_tables WHERE schemaname = %s AND relname = 'jobs'")
    link = q.backend._link  # type: ignore[attr-defined]

    def before(conn: Any) -> int:
        conn.execute("BEGIN")
        return int(conn.execute(counts, (schema,)).fetchone()[0])

    start = link.run("test", before)
    try:
        call()
        return int(link.run("test", lambda conn: conn.execute(counts, (schema,)).fetchone()[0])
                   ) - start
    finally:
        link.run("test", lambda conn: conn.execute("COMMIT"))


def restart_server() -> None:
    """`pg_ctl restart -m immediate`: the server dies without a checkpoint and comes back."""
    pg_ctl = json.loads(os.environ[PG_CTL_ENV])
    subprocess.run([*pg_ctl, "-m", "immediate", "-w", "restart"], check=True, cwd="/",
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)



def open_queue(url: str, name: str = "default", **options: Any) -> Queue:
    return Queue(url, name, **options)


def needs_job_control(cls: type) -> type:
    """Skip unless the Queue has results, cancel and pause (the engine's job control)."""
    have = all(hasattr(Queue, name) for name in ("result", "cancel", "pause", "delete_dead"))
    return unittest.skipUnless(have, "PostgreSQL job-control tests skipped: the Queue "
                               "has no result/cancel/pause yet")(cls)
