"""The tables of a queue set, their versions, and the migrations between them.

A queue set is one PostgreSQL schema (`nobroker` unless the URL says
`?schema=NAME`); every queue of the set is rows in its tables, told apart by
the `queue` column. `MIGRATIONS[n]` takes a schema from version n to n + 1;
`schema_version` holds the version reached. `migrate()` runs the missing
steps in one transaction under an advisory lock, so two processes opening a
fresh database at once create it once; it runs on first use, or by hand
(`nobroker db migrate --url URL`) for operators who create schemas
themselves and open queues with a role that may not.

What the tables hold (the backend's docstring says why):
- jobs: one row per job, with `state` 0 pending, 1 leased, 2 dead, 3 done,
  4 cancelled, and -1 *waiting*: pending, but not due when it was written
  (a delay, a retry's backoff, an expired lease). Waiting rows have an
  index of their own by due time, so that a lease looks only at those now
  due instead of reading past every delayed row in the ready index
  (100,000 delayed jobs made each lease read 100,000 rows); `state <= 0`
  is pending. Times are float8 seconds since the epoch, like `Job`'s, so a
  value read back is the float that was written. Payloads and results are
  JSON text, stored as the Queue encoded it (text, not jsonb: jsonb would
  reorder keys). A finished row (done, cancelled) is kept until
  `expires_at` for its key and result, then deleted by a sweep.
- counters: per queue, one row per connection *slot* that ever wrote
  (connection.SLOTS, plus shared overflow rows); `stats()` sums those rows
  whatever the queue's size: live jobs (pending or leased; stats() takes
  away the leased ones, which it counts in their index), dead, done ever,
  and kept (up to version 2: pending and leased apart). The statement
  that changes jobs updates them in the same statement (statements.py's
  `_counted`, which every writing statement goes through; up to version
  2, triggers did); each connection holds its own slot (an advisory lock),
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

__all__ = ["MIGRATIONS", "LATEST", "channels", "quoted", "migrate_sql"]

_V1: Final = """
CREATE TABLE {s}.queues (
    name text PRIMARY KEY,
    paused boolean NOT NULL DEFAULT false
);
CREATE SEQUENCE {s}.job_seq;
CREATE SEQUENCE {s}.lease_token;
CREATE TABLE {s}.jobs (
    queue text NOT NULL,
    id text NOT NULL,
    seq bigint NOT NULL,
    state smallint NOT NULL,
    priority bigint NOT NULL,
    available_at float8 NOT NULL,
    enqueued_at float8 NOT NULL,
    max_attempts bigint NOT NULL,
    attempts bigint NOT NULL DEFAULT 0,
    keyed boolean NOT NULL DEFAULT false,
    token bigint,
    lease_until float8,
    last_error text,
    payload text NOT NULL,
    result text,
    finished_at float8,
    expires_at float8,
    PRIMARY KEY (queue, id)
);
CREATE INDEX jobs_ready ON {s}.jobs (queue, priority DESC, seq) WHERE state = 0;
CREATE INDEX jobs_due ON {s}.jobs (queue, available_at) WHERE state = 0;
CREATE INDEX jobs_leases ON {s}.jobs (queue, lease_until) WHERE state = 1;
CREATE INDEX jobs_order ON {s}.jobs (queue, seq);
CREATE INDEX jobs_finished ON {s}.jobs (queue, expires_at) WHERE state >= 3;
-- Jobs a wait_finished waits for: only their finish is NOTIFYed (wakeups.py).
CREATE TABLE {s}.watches (
    queue text NOT NULL,
    id text NOT NULL,
    PRIMARY KEY (queue, id)
);
CREATE TABLE {s}.counters (
    queue text NOT NULL,
    slot integer NOT NULL,
    pending bigint NOT NULL DEFAULT 0,
    leased bigint NOT NULL DEFAULT 0,
    dead bigint NOT NULL DEFAULT 0,
    done bigint NOT NULL DEFAULT 0,
    kept bigint NOT NULL DEFAULT 0,  -- finished rows kept with an outcome (result, cancel)
    PRIMARY KEY (queue, slot)
);
-- The time a statement acts at: the caller's clock if it passed one (tests
-- inject one), else the server's, so hosts with skewed clocks agree.
CREATE FUNCTION {s}.nb_now(given float8) RETURNS float8 LANGUAGE sql STABLE
    AS $$ SELECT coalesce(given, extract(epoch FROM now())::float8) $$;
CREATE FUNCTION {s}.nb_channel(kind text, queue text) RETURNS text LANGUAGE sql IMMUTABLE
    AS $$ SELECT 'nb_' || kind || '_' || left(md5({literal} || '.' || queue), 24) $$;
-- Kept with its outcome, for get() and result(): acked with a result, or cancelled.
CREATE FUNCTION {s}.nb_kept(state smallint, result text) RETURNS boolean
    LANGUAGE sql IMMUTABLE AS $$ SELECT state = 4 OR (state = 3 AND result IS NOT NULL) $$;
CREATE FUNCTION {s}.nb_count() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    slot_no integer := coalesce(nullif(current_setting('nobroker.slot', true), '')::integer, -1);
    r record;
BEGIN
    IF TG_OP = 'INSERT' THEN
        FOR r IN SELECT queue, count(*) FILTER (WHERE state = 0) AS p,
                        count(*) FILTER (WHERE state = 1) AS l,
                        count(*) FILTER (WHERE state = 2) AS d,
                        count(*) FILTER (WHERE state = 3) AS f,
                        count(*) FILTER (WHERE state = 0) AS ready, 0 AS fin, NULL::text AS one
                 FROM new_rows GROUP BY queue LOOP
            PERFORM {s}.nb_apply(r.queue, slot_no, r.p, r.l, r.d, r.f, 0, r.ready, r.fin,
                                 r.one);
        END LOOP;
    ELSIF TG_OP = 'DELETE' THEN
        -- purge and delete_dead: a waiter for a deleted live job learns it is gone
        FOR r IN SELECT queue, -count(*) FILTER (WHERE state = 0) AS p,
                        -count(*) FILTER (WHERE state = 1) AS l,
                        -count(*) FILTER (WHERE state = 2) AS d,
                        -count(*) FILTER (WHERE {s}.nb_kept(state, result)) AS k,
                        count(*) FILTER (WHERE state < 3 AND w.id IS NOT NULL) AS fin,
                        min(o.id) FILTER (WHERE state < 3 AND w.id IS NOT NULL) AS one
                 FROM old_rows AS o LEFT JOIN {s}.watches AS w USING (queue, id)
                 GROUP BY queue LOOP
            PERFORM {s}.nb_apply(r.queue, slot_no, r.p, r.l, r.d, 0, r.k, 0, r.fin, r.one);
        END LOOP;
    ELSE
        -- ready: rows that became pending, or pending rows whose time moved;
        -- fin: watched rows that became finished (done, dead, cancelled). An
        -- ack nobody waits for sends no NOTIFY: a transaction that notifies
        -- takes a lock that serialises every notifying commit of the server.
        FOR r IN SELECT n.queue,
                        sum((n.state = 0)::int - (o.state = 0)::int) AS p,
                        sum((n.state = 1)::int - (o.state = 1)::int) AS l,
                        sum((n.state = 2)::int - (o.state = 2)::int) AS d,
                        sum((n.state = 3)::int - (o.state = 3)::int) AS f,
                        sum({s}.nb_kept(n.state, n.result)::int
                            - {s}.nb_kept(o.state, o.result)::int) AS k,
                        count(*) FILTER (WHERE n.state = 0 AND (o.state <> 0
                                         OR n.available_at <> o.available_at)) AS ready,
                        count(*) FILTER (WHERE n.state >= 2 AND o.state < 2
                                         AND w.id IS NOT NULL) AS fin,
                        min(n.id) FILTER (WHERE n.state >= 2 AND o.state < 2
                                          AND w.id IS NOT NULL) AS one
                 FROM new_rows AS n JOIN old_rows AS o ON o.queue = n.queue AND o.id = n.id
                      LEFT JOIN {s}.watches AS w ON w.queue = n.queue AND w.id = n.id
                 GROUP BY n.queue LOOP
            PERFORM {s}.nb_apply(r.queue, slot_no, r.p, r.l, r.d, r.f, r.k, r.ready, r.fin,
                                 r.one);
        END LOOP;
    END IF;
    RETURN NULL;
END $$;
CREATE FUNCTION {s}.nb_apply(q text, slot_no integer, p bigint, l bigint, d bigint,
                             f bigint, k bigint, ready bigint, fin bigint, one text)
    RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF p <> 0 OR l <> 0 OR d <> 0 OR f <> 0 OR k <> 0 THEN
        INSERT INTO {s}.counters AS c (queue, slot, pending, leased, dead, done, kept)
        VALUES (q, slot_no, p, l, d, f, k)
        ON CONFLICT (queue, slot) DO UPDATE
        SET pending = c.pending + excluded.pending, leased = c.leased + excluded.leased,
            dead = c.dead + excluded.dead, done = c.done + excluded.done,
            kept = c.kept + excluded.kept;
    END IF;
    IF ready > 0 THEN
        PERFORM pg_notify({s}.nb_channel('r', q), '');
    END IF;
    IF fin > 0 THEN
        PERFORM pg_notify({s}.nb_channel('f', q), CASE WHEN fin = 1 THEN one ELSE '*' END);
    END IF;
END $$;
CREATE TRIGGER jobs_insert AFTER INSERT ON {s}.jobs REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION {s}.nb_count();
CREATE TRIGGER jobs_update AFTER UPDATE ON {s}.jobs
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION {s}.nb_count();
CREATE TRIGGER jobs_delete AFTER DELETE ON {s}.jobs REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION {s}.nb_count();
"""


def _counting(op: str, rows: str, *, ready: bool, fin: bool) -> str:
    """A statement trigger function for `op` on jobs that counts and notifies.

    `rows` is a SELECT of the changed rows grouped by queue, with the columns
    q, p, l, d, f, k (changes to the counters) and the wake-up counts `ready`
    and `fin` with `one` (the finished job, when one); `ready` and `fin` say
    whether the op can have either (an INSERT finishes nothing, a DELETE
    makes nothing ready). The body is written out in each function rather
    than called: V1's one function for all three operations, with a nested
    plpgsql call, cost a lease about a quarter of its server time (EXPLAIN
    ANALYZE, V1 against V2).
    """
    notify_ready = ("\n        IF r.ready > 0 THEN\n"
                    "            PERFORM pg_notify({s}.nb_channel('r', r.q), '');\n"
                    "        END IF;") if ready else ""
    notify_fin = ("\n        IF r.fin > 0 THEN\n"
                  "            PERFORM pg_notify({s}.nb_channel('f', r.q),\n"
                  "                              CASE WHEN r.fin = 1 THEN r.one ELSE '*' END);\n"
                  "        END IF;") if fin else ""
    return f"""
CREATE FUNCTION {{s}}.nb_count_{op}() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    r record;
BEGIN
    FOR r IN {rows} LOOP
        IF r.p <> 0 OR r.l <> 0 OR r.d <> 0 OR r.f <> 0 OR r.k <> 0 THEN
            INSERT INTO {{s}}.counters AS c (queue, slot, pending, leased, dead, done, kept)
            VALUES (r.q, coalesce(nullif(current_setting('nobroker.slot', true), '')::integer,
                                  -1), r.p, r.l, r.d, r.f, r.k)
            ON CONFLICT (queue, slot) DO UPDATE
            SET pending = c.pending + excluded.pending, leased = c.leased + excluded.leased,
                dead = c.dead + excluded.dead, done = c.done + excluded.done,
                kept = c.kept + excluded.kept;
        END IF;{notify_ready}{notify_fin}
    END LOOP;
    RETURN NULL;
END $$;"""


# V2: the waiting state (-1) and its index; counting triggers without a nested
# call, one function per operation. Rows pending but not yet due become waiting.
_V2 = "\n".join([
    "CREATE INDEX jobs_waiting ON {s}.jobs (queue, available_at) WHERE state = -1;",
    "DROP TRIGGER jobs_insert ON {s}.jobs;",
    "DROP TRIGGER jobs_update ON {s}.jobs;",
    "DROP TRIGGER jobs_delete ON {s}.jobs;",
    "DROP FUNCTION {s}.nb_count();",
    "DROP FUNCTION {s}.nb_apply(text, integer, bigint, bigint, bigint, bigint, bigint, "
    "bigint, bigint, text);",
    _counting("insert", """SELECT queue AS q, count(*) FILTER (WHERE state <= 0) AS p,
                    count(*) FILTER (WHERE state = 1) AS l,
                    count(*) FILTER (WHERE state = 2) AS d,
                    count(*) FILTER (WHERE state = 3) AS f, 0 AS k,
                    count(*) FILTER (WHERE state <= 0) AS ready
             FROM new_rows GROUP BY queue""", ready=True, fin=False),
    # an ack nobody waits for sends no NOTIFY: a transaction that notifies
    # takes a lock that serialises every notifying commit of the server.
    _counting("update", """SELECT n.queue AS q,
                    sum((n.state <= 0)::int - (o.state <= 0)::int) AS p,
                    sum((n.state = 1)::int - (o.state = 1)::int) AS l,
                    sum((n.state = 2)::int - (o.state = 2)::int) AS d,
                    sum((n.state = 3)::int - (o.state = 3)::int) AS f,
                    sum({s}.nb_kept(n.state, n.result)::int
                        - {s}.nb_kept(o.state, o.result)::int) AS k,
                    -- became pending, or pending with its time moved (a waiting
                    -- row turned ready by a lease keeps its time: no wake-up)
                    count(*) FILTER (WHERE n.state <= 0 AND (o.state > 0
                                     OR n.available_at <> o.available_at)) AS ready,
                    count(*) FILTER (WHERE n.state >= 2 AND o.state < 2
                                     AND w.id IS NOT NULL) AS fin,
                    min(n.id) FILTER (WHERE n.state >= 2 AND o.state < 2
                                      AND w.id IS NOT NULL) AS one
             FROM new_rows AS n JOIN old_rows AS o ON o.queue = n.queue AND o.id = n.id
                  LEFT JOIN {s}.watches AS w ON w.queue = n.queue AND w.id = n.id
             GROUP BY n.queue""", ready=True, fin=True),
    # purge and delete_dead: a waiter for a deleted live job learns it is gone
    _counting("delete", """SELECT o.queue AS q, -count(*) FILTER (WHERE state <= 0) AS p,
                    -count(*) FILTER (WHERE state = 1) AS l,
                    -count(*) FILTER (WHERE state = 2) AS d, 0 AS f,
                    -count(*) FILTER (WHERE {s}.nb_kept(state, result)) AS k,
                    count(*) FILTER (WHERE state < 3 AND w.id IS NOT NULL) AS fin,
                    min(o.id) FILTER (WHERE state < 3 AND w.id IS NOT NULL) AS one
             FROM old_rows AS o LEFT JOIN {s}.watches AS w USING (queue, id)
             GROUP BY o.queue""", ready=False, fin=True),
    """
CREATE TRIGGER jobs_insert AFTER INSERT ON {s}.jobs REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION {s}.nb_count_insert();
CREATE TRIGGER jobs_update AFTER UPDATE ON {s}.jobs
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION {s}.nb_count_update();
CREATE TRIGGER jobs_delete AFTER DELETE ON {s}.jobs REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION {s}.nb_count_delete();
UPDATE {s}.jobs SET state = -1
    WHERE state = 0 AND available_at > extract(epoch FROM now())::float8;
"""])

# V3: no counting triggers. Each statement of statements.py counts and notifies
# what it changed (statements._counted), which takes the trigger's transition
# tables and plpgsql call off every enqueue, lease and ack: measured after 20 ms
# idle, as a worker's pickup runs, an enqueue 1.07 -> 0.95 ms and a lease 1.37
# -> 1.19 ms (300 of each, one process, interleaved). The counters keep `live`
# (pending + leased) instead of pending and leased apart, so that a lease
# writes no counter row: stats() counts the leased rows. What the statements
# notify about a finish still reads `watches` with a snapshot of its own:
# nb_finished is VOLATILE, so a watch committed while the statement waited for
# a row's lock is seen, as the AFTER trigger saw it (wakeups.py's _watch); in
# plpgsql, whose plan is kept per session (an SQL function is planned on every
# call: server CPU per job of lease + ack 533 -> 420 us, `bench-postgres --ab`).
_V3 = """
DROP TRIGGER jobs_insert ON {s}.jobs;
DROP TRIGGER jobs_update ON {s}.jobs;
DROP TRIGGER jobs_delete ON {s}.jobs;
DROP FUNCTION {s}.nb_count_insert();
DROP FUNCTION {s}.nb_count_update();
DROP FUNCTION {s}.nb_count_delete();
ALTER TABLE {s}.counters RENAME COLUMN pending TO live;
UPDATE {s}.counters SET live = live + leased;
ALTER TABLE {s}.counters DROP COLUMN leased;
CREATE FUNCTION {s}.nb_finished(q text, ids text[]) RETURNS bigint
    LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    n bigint;
    one text;
BEGIN
    SELECT count(*), min(id) INTO n, one FROM {s}.watches WHERE queue = q AND id = ANY(ids);
    IF n > 0 THEN
        PERFORM pg_notify({s}.nb_channel('f', q), CASE WHEN n = 1 THEN one ELSE '*' END);
    END IF;
    RETURN n;
END $$;
"""

MIGRATIONS: Final[tuple[str, ...]] = (_V1, _V2, _V3)
LATEST: Final = len(MIGRATIONS)


def quoted(schema: str) -> str:
    """The schema as an SQL identifier (url.parse allows only [a-z0-9_] names)."""
    return f'"{schema}"'


def channels(schema: str, queue: str) -> tuple[str, str]:
    """The (ready, finished) LISTEN channels of one queue, as nb_channel names them."""
    digest = hashlib.md5(f"{schema}.{queue}".encode(), usedforsecurity=False).hexdigest()[:24]
    return f"nb_r_{digest}", f"nb_f_{digest}"


def migrate_sql(schema: str, current: int) -> list[str]:
    """The statements that take `schema` from version `current` to LATEST."""
    s = quoted(schema)
    steps = [MIGRATIONS[n].replace("{s}", s).replace("{literal}", f"'{schema}'")
             for n in range(current, LATEST)]
    if current == 0:
        steps.insert(0, f"CREATE SCHEMA IF NOT EXISTS {s}")
        steps.insert(1, f"CREATE TABLE IF NOT EXISTS {s}.schema_version (version integer NOT NULL)")
    steps.append(f"DELETE FROM {s}.schema_version")
    steps.append(f"INSERT INTO {s}.schema_version VALUES ({LATEST})")
    return steps

