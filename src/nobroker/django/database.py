"""OPTIONS "database": the queue in a Django database, written on Django's connection.

With ``"OPTIONS": {"database": "default"}`` (a PostgreSQL alias of DATABASES),
the backend's queues live in that database (schema `nobroker`, or OPTIONS
"schema"), opened from the alias's own settings, and:

- `.enqueue()` writes the job on Django's connection for that alias
  (Queue.enqueue(connection=...)): inside `transaction.atomic()` it is part
  of the transaction and exists if and only if it commits; outside, Django's
  connection autocommits and the job is written at once;
- a `@q.task` on one of its queues defers `delay_on_commit` to the commit of
  that alias's transaction (`on_commit_of`), not the default database's;
- `nobroker_work` runs `@task(atomic=True)` tasks inside
  `transaction.atomic(using=alias)` and writes their ack in that transaction
  (transactions.atomic_in): the task's ORM writes and its completion are one
  commit, and Django's `task_finished` is sent after that commit (never if it
  rolls back), or after the rollback of a failed attempt (`after_rollback`).

Any other vendor is refused with ImproperlyConfigured naming the alias.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Final
from urllib.parse import quote, urlencode

from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError as DjangoDatabaseError
from django.db import close_old_connections, connections, transaction

from ..errors import DatabaseError
from ..transactions import raw_connection

__all__ = ["after_rollback", "atomic_transaction", "connection_of", "database_url",
           "on_commit_of"]

# Per worker slot thread: what to call once its atomic task's transaction rolled back.
_rollbacks = threading.local()

# Django's own OPTIONS keys for PostgreSQL, not libpq parameters.
_DJANGO_ONLY: Final = frozenset({"isolation_level", "pool", "server_side_binding",
                                 "assume_role", "cursor_factory", "context"})


def connection_of(alias: str) -> Any:
    """Django's connection for `alias`; ImproperlyConfigured unless it is PostgreSQL."""
    if alias not in connections.settings:
        raise ImproperlyConfigured(f"OPTIONS['database'] is {alias!r}, which is not in "
                                   f"DATABASES")
    connection = connections[alias]
    if connection.vendor != "postgresql":
        raise ImproperlyConfigured(
            f"OPTIONS['database'] is {alias!r}, a {connection.vendor} database: nobroker "
            f"can write jobs in Django's transaction on PostgreSQL only (use OPTIONS "
            f"'location' for a directory, a postgresql:// URL or 'memory://')")
    return connection


def database_url(alias: str, schema: str | None) -> str:
    """A postgresql:// URL for the database of `alias`, from its DATABASES settings."""
    settings = connection_of(alias).settings_dict
    user = quote(str(settings.get("USER") or ""), safe="")
    password = quote(str(settings.get("PASSWORD") or ""), safe="")
    host = str(settings.get("HOST") or "")
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"  # an IPv6 address
    port = f":{settings['PORT']}" if settings.get("PORT") else ""
    auth = f"{user}:{password}@" if password else (f"{user}@" if user else "")
    params = {key: str(value) for key, value in (settings.get("OPTIONS") or {}).items()
              if key not in _DJANGO_ONLY and isinstance(value, str | int)
              and not isinstance(value, bool)}
    if schema:  # no HOST: libpq's default Unix socket, or OPTIONS' "host"
        params["schema"] = schema
    query = f"?{urlencode(params)}" if params else ""
    return f"postgresql://{auth}{host}{port}/{quote(str(settings.get('NAME') or ''))}{query}"


def on_commit_of(alias: str) -> Callable[[Callable[[], object]], None]:
    """Django's `transaction.on_commit` on `alias`: at its transaction's commit (at
    once outside `atomic(using=alias)`), never on its rollback."""
    def on_commit(fn: Callable[[], object]) -> None:
        transaction.on_commit(fn, using=alias)

    return on_commit


def after_rollback(fn: Callable[[], object]) -> None:
    """Call `fn` once this thread's atomic task transaction (atomic_transaction) has
    rolled back, never if it commits; at once outside one."""
    pending: list[Callable[[], object]] | None = getattr(_rollbacks, "pending", None)
    if pending is None:
        fn()
    else:
        pending.append(fn)


@contextmanager
def atomic_transaction(alias: str) -> Iterator[Any]:
    """An atomic task's transaction: `transaction.atomic(using=alias)`, yielding the
    psycopg connection under Django's (transactions.atomic_in's opener). A failed
    commit is nobroker's DatabaseError, which the worker treats as a lost run."""
    close_old_connections()  # as a request would: a dropped connection is reopened
    pending: list[Callable[[], object]] = []
    _rollbacks.pending = pending
    try:
        try:
            with transaction.atomic(using=alias):
                yield raw_connection(connections[alias])
        except BaseException:
            _rollbacks.pending = None
            for fn in pending:  # rolled back now: what the failed attempt announces
                fn()
            raise
    except DjangoDatabaseError as exc:
        raise DatabaseError(f"Django database {alias!r}", "atomic task", str(exc)) from exc
    finally:
        _rollbacks.pending = None
        close_old_connections()
