"""The application's transaction: jobs that commit with the caller's own data.

On a backend with `capabilities.transactions` (PostgreSQL), a job can be
written on the application's database connection, inside its open
transaction: `q.enqueue(..., connection=conn)`, or every enqueue of `q` in
`with q.transaction(conn):` (tasks' `.delay()` included; a context variable,
so each thread and asyncio task has its own). The job then exists if and
only if the caller commits; its wake-up is a NOTIFY, which PostgreSQL sends
at commit, so no worker looks for it before. The commit is the caller's:
nothing here commits or rolls back.

The other way round, an `atomic=True` task runs inside a transaction on a
connection the worker gives it (`current_job().connection`), and the worker
writes the job's ack in that same transaction (worker/atomic.py): the task's
writes to that database and its completion are one commit.

A connection is a psycopg 3 connection, or Django's (`connection`,
`connections[alias]`), whose psycopg connection is used. Elsewhere (files,
memory://) both are refused with NobrokerError: the job log cannot join a
database's transaction.

The "enqueued" hook of a job written in the caller's transaction fires when
that transaction commits, never when it rolls back (`announce`): Django's
connection says when (its `on_commit`), and an autocommit connection has
committed when the write returns. psycopg has no commit callback, so for a job
written in a psycopg transaction the hook does not fire at all: nothing in this
process sees the commit (the worker's hooks, from "started" on, still fire).

`Task.delay_on_commit` defers its `delay` with the framework's on-commit
(`use_on_commit`: the nobroker.django app gives Django's), so that the core
imports no framework; without one it raises NobrokerError. A queue whose
jobs are written in a database of the application's own (a Django backend's
OPTIONS "database") is given that database's on-commit (`commit_with`).

`atomic_in(queue, opener)` lets atomic tasks run in transactions the
application opens (Django's `transaction.atomic()`, so the ORM's writes are in
it) instead of on a connection of the backend's own.
"""

from __future__ import annotations

import contextlib
import contextvars
import weakref
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, fields
from typing import Any, TypeAlias, cast

from .backend import Backend, Transactions
from .errors import NobrokerError
from .models import Job

__all__ = ["Opener", "TransactionJob", "active", "after_commit", "announce", "atomic_in",
           "commit_with", "enqueuer", "opener_of", "raw_connection", "refuse_in_block",
           "transaction", "transactional", "use_on_commit", "with_connection"]

# The `q.transaction()` blocks this context is in: (queue, psycopg connection, the
# connection as given: Django's, whose on_commit says when the hook may fire).
_ACTIVE: contextvars.ContextVar[tuple[tuple[object, Any, Any], ...]] = contextvars.ContextVar(
    "nobroker_transactions", default=())

# What opens an atomic task's transaction: a context manager yielding a psycopg
# connection in an open transaction, committed when the block ends without error.
Opener: TypeAlias = Callable[[], AbstractContextManager[Any]]
_OPENERS: weakref.WeakKeyDictionary[object, Opener] = weakref.WeakKeyDictionary()

# What runs a function when the application's transaction commits (Task.delay_on_commit):
# Django's transaction.on_commit, set by the nobroker.django app; empty elsewhere.
OnCommit: TypeAlias = Callable[[Callable[[], object]], object]
_ON_COMMIT: list[OnCommit] = []
# ... and per queue, where its jobs live in one database of the application's: that one's.
_QUEUE_ON_COMMIT: weakref.WeakKeyDictionary[object, OnCommit] = weakref.WeakKeyDictionary()


@dataclass(frozen=True, slots=True)
class TransactionJob(Job):
    """The job an `atomic=True` task runs for (`current_job()`), with the connection
    whose open transaction it runs in: its writes there commit with its ack."""

    connection: Any = None


def with_connection(job: Job, connection: Any) -> TransactionJob:
    values = {field.name: getattr(job, field.name) for field in fields(Job)}
    return TransactionJob(**values, connection=connection)


def transactional(backend: Backend, what: str) -> Transactions:
    """`backend` as one whose writes can join a transaction; NobrokerError naming why
    not (`what` is the feature asked for)."""
    if not backend.capabilities.transactions:
        raise NobrokerError(
            f"{what} needs a backend whose writes can join a database transaction "
            f"(capabilities.transactions: PostgreSQL), and {backend.location!r} is not one: "
            f"its jobs are not in the application's database")
    return cast(Transactions, backend)


def raw_connection(connection: Any) -> Any:
    """The psycopg connection `connection` is, or the one Django's wraps (opened now)."""
    vendor = getattr(connection, "vendor", None)
    if vendor is None or not hasattr(connection, "ensure_connection"):
        return connection  # not Django's: the backend checks what it is
    if vendor != "postgresql":
        raise NobrokerError(f"Django database {getattr(connection, 'alias', '?')!r} is "
                            f"{vendor}: a job can join a PostgreSQL transaction only")
    connection.ensure_connection()
    return connection.connection


def _innermost(queue: object) -> tuple[Any, Any] | None:
    for owner, raw, given in reversed(_ACTIVE.get()):
        if owner is queue:
            return raw, given
    return None


def active(queue: object) -> Any | None:
    """The connection of the innermost `queue.transaction()` block, if in one."""
    found = _innermost(queue)
    return found[0] if found is not None else None


def enqueuer(queue: object, backend: Backend, connection: Any) -> Callable[..., Job]:
    """What writes one job: `backend.enqueue`, or its `enqueue_in` on `connection` (else
    on the connection of the `queue.transaction()` block this is in)."""
    if connection is None:
        connection = active(queue)
        if connection is None:
            return backend.enqueue
    else:
        connection = raw_connection(connection)
    writer = transactional(backend, "enqueue(connection=...)")
    return lambda *args, **options: writer.enqueue_in(connection, *args, **options)


def refuse_in_block(queue: object, operation: str) -> None:
    """NobrokerError for an operation that cannot join the `queue.transaction()` block it
    is in, rather than writing on its own connection, outside the caller's transaction."""
    if active(queue) is not None:
        raise NobrokerError(f"{operation} cannot write in the caller's transaction: "
                            f"call enqueue() for each job inside Queue.transaction()")


@contextlib.contextmanager
def transaction(queue: object, backend: Backend, connection: Any) -> Iterator[Any]:
    """Every enqueue of `queue` in the block is written in `connection`'s transaction;
    yields the psycopg connection. Commits nothing: the transaction is the caller's."""
    transactional(backend, "Queue.transaction()")
    raw = raw_connection(connection)
    token = _ACTIVE.set((*_ACTIVE.get(), (queue, raw, connection)))
    try:
        yield raw
    finally:
        _ACTIVE.reset(token)


def announce(queue: Any, connection: Any, job: Job) -> None:
    """Fire `queue`'s "enqueued" hooks for `job`, written on `connection` (None: the
    backend's own, or the `queue.transaction()` block's): now if it is committed, at
    the commit of Django's transaction, never for a psycopg transaction still open."""
    hooks = queue.hooks
    if hooks is None or not hooks.wants("enqueued"):
        return
    if connection is None:
        found = _innermost(queue)
        if found is None:
            hooks.fire("enqueued", job)
            return
        connection = found[1]
    on_commit = getattr(connection, "on_commit", None)
    if callable(on_commit) and hasattr(connection, "ensure_connection"):  # Django's
        # At once outside atomic(); under manual transaction management Django
        # refuses (it cannot say when a commit happens): then, as for psycopg, no hook.
        with contextlib.suppress(Exception):
            on_commit(lambda: hooks.fire("enqueued", job))
    elif getattr(connection, "autocommit", False):  # written in a transaction of its own
        hooks.fire("enqueued", job)


def atomic_in(queue: object, opener: Opener | None) -> None:
    """Run `queue`'s atomic tasks in the transactions `opener()` opens (it yields a
    psycopg connection on the queue's database, in an open transaction committed at
    the end of the block), or again on the backend's own connections (None)."""
    transactional(cast(Any, queue).backend, "atomic_in()")
    if opener is None:
        _OPENERS.pop(queue, None)
    else:
        _OPENERS[queue] = opener


def opener_of(queue: object) -> Opener | None:
    """The opener `atomic_in` gave `queue`, if any."""
    return _OPENERS.get(queue)


def use_on_commit(on_commit: OnCommit | None) -> None:
    """What `after_commit` defers to: a framework's on-commit (Django's), or none."""
    _ON_COMMIT[:] = [] if on_commit is None else [on_commit]


def commit_with(queue: object, on_commit: OnCommit | None) -> None:
    """What `after_commit` defers to for `queue`: the on-commit of the application's
    database its jobs live in (Django's for OPTIONS "database"), or the framework's
    again (None)."""
    if on_commit is None:
        _QUEUE_ON_COMMIT.pop(queue, None)
    else:
        _QUEUE_ON_COMMIT[queue] = on_commit


def after_commit(what: str, fn: Callable[[], object], queue: object = None) -> None:
    """Call `fn` when the application's transaction commits (never if it rolls back),
    through `queue`'s on-commit (commit_with) or else the framework's; NobrokerError
    naming `what` without one."""
    on_commit = None if queue is None else _QUEUE_ON_COMMIT.get(queue)
    if on_commit is None:
        if not _ON_COMMIT:
            raise NobrokerError(
                f"{what} needs a framework that says when a transaction commits: add "
                f"'nobroker.django' to INSTALLED_APPS (on PostgreSQL without Django, "
                f"enqueue inside q.transaction(conn))")
        on_commit = _ON_COMMIT[0]
    on_commit(fn)
