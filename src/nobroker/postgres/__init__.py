"""nobroker on PostgreSQL: the same Queue, Worker and CLI, for workers on several hosts.

`Queue("postgresql://user@host/db", name="emails")` (also `postgres://`)
imports this subpackage, and with it psycopg 3 (`pip install
"nobroker[postgres]"`); nothing else in nobroker imports either. The file
backend (nobroker.file) and this one share only the seam (nobroker.backend)
and never import each other.

Layers, in dependency order: url (parsing, redaction; stdlib only), schema
(tables, functions, migrations), connection (psycopg connections, error
translation, reconnects), session (connection setup, the acting time),
statements (the SQL, rows to Jobs), wakeups (LISTEN/NOTIFY waits), backend
(the operations).
"""

from __future__ import annotations

from ..backend import Settings
from .backend import PostgresBackend
from .connection import connect, migrate
from .url import DEFAULT_SCHEMA, is_postgres_url, parse

__all__ = ["open_backend", "migrate_url", "PostgresBackend", "is_postgres_url",
           "DEFAULT_SCHEMA"]


def open_backend(url: str, name: str, settings: Settings) -> PostgresBackend:
    """The backend of queue `name` in the queue set `url` names (created on first use)."""
    return PostgresBackend(parse(url), name, settings)


def migrate_url(url: str, schema: str | None = None) -> tuple[str, int, int]:
    """Create or upgrade the queue set's schema; (shown URL, version before, after)."""
    target = parse(url, schema)
    conn = connect(target)
    try:
        import psycopg

        from ..errors import DatabaseError
        try:
            before, after = migrate(conn, target)
        except psycopg.Error as exc:
            raise DatabaseError(target.shown, "migrate",
                                target.scrub(" ".join(str(exc).split()))) from None
    finally:
        conn.close()
    return target.shown, before, after
