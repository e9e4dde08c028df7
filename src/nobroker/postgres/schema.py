"""The tables of a queue set, their versions, and the migrations between them.

A queue set is one PostgreSQL schema (`nobroker` unless the URL says
`?schema=NAME`); every queue of the set is rows in its tables, told apart by
the `queue` column. `MIGRATIONS[n]` names the file that takes a schema from
version n to n + 1 (sql/migrations/NNNN_*.sql: never edited once released,
their comments say why each was made); `schema_version` holds the version
reached. `migrate()` runs the missing steps in one transaction under an
advisory lock, so two processes opening a fresh database at once create it
once; it runs on first use, or by hand (`nobroker db migrate --url URL`)
for operators who create schemas themselves and open queues with a role
that may not.

What the tables hold (the backend's docstring says why):
- jobs: one row per job, with `state` 0 pending, 1 leased, 2 dead, 3 done,
  4 cancelled, and -1 *waiting*: pending, but not due when it was written
  (a delay, a retry's backoff, an expired lease). Waiting rows have an
  index of their own by due time, so that a lease looks only at those now
  due instead of reading past every delayed row in the ready index
  (100,000 delayed jobs made each lease read 100,000 rows); `state IN (-1, 0)`
  is pending (-2 is not: since version 4, a job waiting for prerequisites,
  `JobState.WAITING`). Times are float8 seconds since the epoch, like `Job`'s, so a
  value read back is the float that was written. Payloads and results are
  JSON text, stored as the Queue encoded it (text, not jsonb: jsonb would
  reorder keys). A finished row (done, cancelled) is kept until
  `expires_at` for its key and result, then deleted by a sweep.
- waits and prerequisites (version 4): a waiting job's count of unmet
  prerequisites and what it waits for, one row; one row per unmet
  prerequisite. The statement that finishes a job settles its dependents
  (nb_settle, in migrations/0004, which says how and why exactly once).
- dormant (version 7): the prerequisites of a cancelled dependent that a
  requeue of the death that cancelled it revives (nb_revive, migrations/0007).
- counters: per queue, one row per connection *slot* that ever wrote
  (connection.SLOTS, plus shared overflow rows); `stats()` sums those rows
  whatever the queue's size: live jobs (pending or leased; stats() takes
  away the leased ones, which it counts in their index), dead, done ever,
  and kept (up to version 2: pending and leased apart). The statement
  that changes jobs updates them in the same statement (every writing
  query ends with sql/parts/counted.sql, which says how; up to version 2,
  triggers did); each connection holds its own slot (an advisory lock),
  so writers never wait on each other's counter row. Rows changed by hand,
  outside nobroker, are not counted (`nobroker db recount`: recount.py).
- the same statements send the wake-ups: `nb_r_<hash>` when a job may
  have become leasable, `nb_f_<hash>` (payload: the job id, or `*` for a
  batch) when a *watched* job (a row in `watches`, put there by
  wait_finished before it blocks) finished or was deleted; an ack nobody
  waits for sends nothing, because a NOTIFY makes its commit take a
  server-wide lock.
"""

from __future__ import annotations

import hashlib
from typing import Final

from . import sql
from .sql import quoted

__all__ = ["MIGRATIONS", "LATEST", "channels", "quoted", "migrate_sql"]

MIGRATIONS: Final[tuple[str, ...]] = sql.migrations()  # file names, version 1 first
LATEST: Final = len(MIGRATIONS)


def channels(schema: str, queue: str) -> tuple[str, str]:
    """The (ready, finished) LISTEN channels of one queue, as nb_channel names them."""
    digest = hashlib.md5(f"{schema}.{queue}".encode(), usedforsecurity=False).hexdigest()[:24]
    return f"nb_r_{digest}", f"nb_f_{digest}"


def migrate_sql(schema: str, current: int, target: int = LATEST) -> list[str]:
    """The statements that take `schema` from version `current` to `target` (the
    caller records the version reached: sql/queries/version_record.sql)."""
    steps = [sql.migration_sql(MIGRATIONS[n], schema) for n in range(current, target)]
    if current == 0:
        steps.insert(0, sql.query("version_create", schema).decode())
    return steps
