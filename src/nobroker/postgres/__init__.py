"""nobroker on PostgreSQL: the same Queue, Worker and CLI, for workers on several hosts.

`Queue("postgresql://user@host/db", name="emails")` (also `postgres://`)
imports this subpackage, and with it psycopg 3 (`pip install
"nobroker[postgres]"`); nothing else in nobroker imports either. The file
backend (nobroker.file) and this one share only the seam (nobroker.backend)
and never import each other.

Layers, in dependency order: url (parsing, redaction; stdlib only), sql/ (the
SQL: queries, their shared parts and the numbered migrations as .sql files,
and their loader; stdlib only), schema (the tables' story, the migration
steps), rows (state codes, rows to Jobs and back), statements (each query
loaded for a schema), connection (psycopg connections, error translation,
reconnects), session (connection setup, the acting time), wakeups
(LISTEN/NOTIFY waits), sweeping (expired rows deleted; compact()), backend
(the operations); recount (`nobroker db recount`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import psycopg

from ..backend import Settings
from ..errors import DatabaseError
from .backend import PostgresBackend
from .connection import connect, error_text, migrate
from .recount import Recount, recount
from .url import DEFAULT_SCHEMA, Target, is_postgres_url, parse

T = TypeVar("T")

__all__ = ["open_backend", "migrate_url", "recount_url", "Recount", "PostgresBackend",
           "is_postgres_url", "DEFAULT_SCHEMA"]


def open_backend(url: str, name: str, settings: Settings) -> PostgresBackend:
    """The backend of queue `name` in the queue set `url` names (created on first use)."""
    return PostgresBackend(parse(url), name, settings)


def migrate_url(url: str, schema: str | None = None) -> tuple[str, int, int]:
    """Create or upgrade the queue set's schema; (shown URL, version before, after)."""
    target = parse(url, schema)
    before, after = _on(target, "migrate", lambda conn: migrate(conn, target))
    return target.shown, before, after


def recount_url(url: str, schema: str | None = None) -> tuple[str, list[Recount]]:
    """Count every queue of the queue set anew from its rows (recount.py); (shown
    URL, each queue's counts before and after)."""
    target = parse(url, schema)
    return target.shown, _on(target, "recount", lambda conn: recount(conn, target))


def _on(target: Target, operation: str, fn: Callable[[Any], T]) -> T:
    """`fn(connection)` on a connection of its own; a server's refusal as a
    DatabaseError, password scrubbed."""
    conn = connect(target)
    try:
        return fn(conn)
    except psycopg.Error as exc:
        raise DatabaseError(target.shown, operation, error_text(target, exc)) from None
    finally:
        conn.close()
