"""The SQL of every PostgreSQL operation, one statement per queue operation where it can be.

`Statements(schema, backoff)` writes the schema's quoted name and the
backoff policy's numbers into each statement once, at open; the backend
then only binds values (`%(name)s`). Every statement that acts at a time
computes it once, as `t.now` from `nb_now(%(t)s)` (schema.py): the server's
clock unless the Queue was given one. Rows are read in `COLUMNS` order, the
order `job_from_row` unpacks.

Counting. Every statement that changes job rows keeps the counters
(stats()) and sends the wake-ups itself, in the same statement: it names
the rows each of its CTEs changed and their states before and after
(`_Change`), and `_counted` adds CTEs that count them into the
connection's counter row and NOTIFY whom they concern (schema.py). Up to
schema version 2, triggers did this; a trigger with transition tables cost
an enqueue and a lease about a tenth of a millisecond each on the
enqueue-to-handler path (measured after idle, see schema.py's V3).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from ..backoff import BackoffPolicy
from ..models import Job, JobState

__all__ = ["Statements", "backoff_sql", "job_from_row", "COLUMNS", "STATE_CODES", "STATES",
           "CODES_OF"]

STATE_CODES: Final = {JobState.PENDING: 0, JobState.LEASED: 1, JobState.DEAD: 2,
                      JobState.DONE: 3, JobState.CANCELLED: 4}  # the jobs.state column
WAITING: Final = -1  # pending, not due when written (schema.py)
STATES: Final = {WAITING: JobState.PENDING} | {code: state for state, code in STATE_CODES.items()}
CODES_OF: Final = {state: tuple(c for c, s in STATES.items() if s is state) for state in JobState}

COLUMNS: Final = ("j.id, j.seq, j.state, j.priority, j.available_at, j.enqueued_at, "
                  "j.max_attempts, j.attempts, j.token, j.lease_until, j.last_error, "
                  "j.payload, j.result, j.finished_at")
# A finished row is invisible once it expires, though the sweep has not deleted it yet.
_VISIBLE: Final = "(j.state < 3 OR j.expires_at > t.now)"
_RECLAIM_BATCH: Final = 100  # expired leases one statement takes back
_DUE_BATCH: Final = 100  # waiting jobs now due that one lease looks at (and makes ready)
# psycopg (its _queries.MAX_CACHED_STATEMENT_LENGTH) caches the conversion of a
# statement this long at most; a test keeps every statement within it.
MAX_STATEMENT: Final = 4096
_NONE: Final = 9  # the old state of an inserted row, the new state of a deleted one
# The counter row of the connection's slot (session.py), as the triggers of V2 had it.
_SLOT: Final = "coalesce(nullif(current_setting('nobroker.slot', true), '')::integer, -1)"


def job_from_row(row: Sequence[Any]) -> Job:
    """The Job a row read in COLUMNS order describes."""
    (job_id, _seq, code, priority, available_at, enqueued_at, max_attempts, attempts,
     token, lease_until, last_error, payload, result, finished_at) = row
    leased = code == 1
    return Job(id=job_id, payload=json.loads(payload), priority=priority,
               attempts=attempts, max_attempts=max_attempts, state=STATES[code],
               available_at=available_at, enqueued_at=enqueued_at, last_error=last_error,
               token=token if leased else None,
               lease_expires_at=lease_until if leased else None,
               result=None if result is None else json.loads(result),
               finished_at=finished_at)


@dataclass(frozen=True)
class _Change:
    """Rows that one CTE of a statement changed: `source` (it returns their `id`,
    and their `state` when `old` or `new` is None), their state before and
    after (a code, `_NONE` for no row, or None: the row's `state`, one of
    `states`), and whether each was kept with an outcome before and after
    (SQL booleans over the source's columns)."""

    source: str
    old: int | None
    new: int | None
    states: tuple[int, ...] = ()
    kept_before: str = "false"
    kept_after: str = "false"

    def cases(self) -> list[tuple[str | None, int, int]]:
        """(SQL filter of the rows, or None for all; state before; state after)."""
        if self.old is not None and self.new is not None:
            return [(None, self.old, self.new)]
        return [(f"{self.source}.state = {code}",
                 code if self.old is None else self.old,
                 code if self.new is None else self.new) for code in self.states]


def _deltas(old: int, new: int) -> tuple[int, int, int]:
    """How one row going from `old` to `new` moves the counters (live, dead, done).
    Live is state <= 1 (waiting, ready or leased): a lease moves no counter,
    stats() counts the leased rows in their index; done counts acks ever made,
    so deleting a done row does not take one back."""
    return ((new <= 1) - (old <= 1), (new == 2) - (old == 2),
            (new == 3) - (old == 3 and new != _NONE))


def _wakes(old: int, new: int) -> bool:
    """A row that became pending wakes the idle workers (a waiting one too: its
    due time may come before a worker's planned wake)."""
    return new <= 0 < old


def _finishes(old: int, new: int) -> bool:
    """A job that finished (done, dead, cancelled), or a live one deleted, wakes
    whoever watches it."""
    return (new >= 2 and old < 2) or (new == _NONE and old == 2)


def _counted(*changes: _Change) -> str:
    """The CTEs that count a statement's changes into its connection's counter
    row and send its wake-ups (`tally`, `counted`, and `finishing` when a change
    can finish a job).

    The arithmetic is done here, per known state: the SQL only counts rows
    (per state, where a source's rows differ). Each source is aggregated to
    one row and the tally is their product, one row, so each NOTIFY is sent
    once; the counter row is written only when a count changed. A finish is
    notified through nb_finished (schema.py), which reads `watches` with a
    snapshot of its own: a watch committed while this statement waited for
    the row's lock is seen.
    """
    parts: list[str] = []
    finishing: list[str] = []  # SELECTs of the ids of jobs that finished
    woke: list[str] = []  # conditions on the parts' columns: some row became pending
    for number, change in enumerate(changes):
        terms: list[list[str]] = [[], [], []]  # live, dead, done
        wake_counts: list[str] = []
        for where, old, new in change.cases():
            rows = "count(*)" if where is None else f"count(*) FILTER (WHERE {where})"
            for counter, delta in zip(terms, _deltas(old, new), strict=True):
                if delta:
                    counter.append(rows if delta == 1 else f"{delta} * {rows}")
            if _wakes(old, new):
                name = f"w{len(woke)}"
                wake_counts.append(f"{rows} AS {name}")
                woke.append(f"c{number}.{name} > 0")
            if _finishes(old, new):
                finishing.append(f"SELECT {change.source}.id FROM {change.source}"
                                 + ("" if where is None else f" WHERE {where}"))
        kept = [f"count(*) FILTER (WHERE {change.kept_after})"
                if change.kept_after != "false" else "0"]
        if change.kept_before != "false":
            kept.append(f"count(*) FILTER (WHERE {change.kept_before})")
        columns = [f"{' + '.join(counter) or '0'} AS {name}"
                   for counter, name in zip(terms, "pdf", strict=True)]
        columns += [f"{' - '.join(kept)} AS k", *wake_counts]
        parts.append(f"(SELECT {', '.join(columns)} FROM {change.source}) AS c{number}")
    total = {name: " + ".join(f"c{n}.{name}" for n in range(len(changes))) for name in "pdfk"}
    extra = ""
    if woke:
        extra += (f",\n                   CASE WHEN {' OR '.join(woke)} THEN "
                  "pg_notify({s}.nb_channel('r', %(q)s), '')::text END AS woke")
    if finishing:
        extra += (",\n                   (SELECT {s}.nb_finished(%(q)s, array_agg(f.id)) "
                  "FROM finishing AS f HAVING count(*) > 0) AS told")
    finish_cte = (f"finishing AS ({' UNION ALL '.join(finishing)}),\n            "
                  if finishing else "")
    return f"""{finish_cte}tally AS MATERIALIZED (
                SELECT {total['p']} AS p, {total['d']} AS d, {total['f']} AS f,
                       {total['k']} AS k{extra}
                FROM {', '.join(parts)}),
            counted AS (
                INSERT INTO {{s}}.counters AS c (queue, slot, live, dead, done, kept)
                SELECT %(q)s, {_SLOT}, t.p, t.d, t.f, t.k FROM tally AS t
                WHERE t.p <> 0 OR t.d <> 0 OR t.f <> 0 OR t.k <> 0
                ON CONFLICT (queue, slot) DO UPDATE
                SET live = c.live + excluded.live, dead = c.dead + excluded.dead,
                    done = c.done + excluded.done, kept = c.kept + excluded.kept)"""


def backoff_sql(policy: BackoffPolicy, attempts: str) -> str:
    """BackoffPolicy.delay as an SQL expression of the column `attempts`.

    The same formula with the policy's numbers written in: for exponents at
    or past the first one whose delay reaches max_delay (or overflows), the
    delay is max_delay, as in Python; below it, base * factor ** n exactly.
    """
    cap = 0
    while cap <= 1000:
        try:
            if policy.base * policy.factor ** cap >= policy.max_delay:
                break
        except OverflowError:
            break
        cap += 1
    n = f"greatest({attempts} - 1, 0)"
    raw = (f"CASE WHEN {n} >= {cap} THEN {policy.max_delay!r}::float8 ELSE "
           f"least({policy.max_delay!r}::float8, {policy.base!r}::float8 * "
           f"power({policy.factor!r}::float8, {n})) END")
    if not policy.jitter:
        return f"({raw})"
    return f"({raw} * (1.0 - {policy.jitter!r}::float8 * random()))"



class Statements:
    """The SQL of every operation, with the schema and the backoff policy written in."""

    def __init__(self, s: str, backoff: BackoffPolicy) -> None:
        def sql(text: str) -> bytes:
            # Comments out and whitespace runs collapsed (no literal here holds
            # either): psycopg converts a statement of over MAX_STATEMENT bytes
            # anew on every call (ack_and_lease's indentation took it over, and
            # the worker's CPU per job from 137 to 231 us).
            text = " ".join(re.sub(r"--[^\n]*", "", text).split())
            return text.replace("{s}", s).replace("{cols}", COLUMNS).replace(
                "{visible}", _VISIBLE).encode()

        t = "(SELECT {s}.nb_now(%(t)s::float8) AS now) AS t"
        new_id = "lpad(to_hex(n.seq), 16, '0')"
        state = f"CASE WHEN %(delay)s::float8 > 0 THEN {WAITING} ELSE 0 END"
        self.queue_names = sql("SELECT name FROM {s}.queues ORDER BY name")
        self.ensure_queue = sql("INSERT INTO {s}.queues (name) VALUES (%(q)s) "
                                "ON CONFLICT DO NOTHING")
        self.enqueue = sql(f"""
            WITH added AS (
                INSERT INTO {{s}}.jobs AS j (queue, id, seq, state, priority, available_at,
                                           enqueued_at, max_attempts, keyed, payload)
                SELECT %(q)s, coalesce(%(id)s::text, {new_id}), n.seq, {state}, %(pr)s,
                       t.now + %(delay)s,
                       t.now, %(ma)s, %(id)s::text IS NOT NULL, %(p)s
                FROM (SELECT nextval('{{s}}.job_seq') AS seq) AS n, {t}
                ON CONFLICT (queue, id) DO NOTHING
                RETURNING {{cols}}),
            {_counted(_Change("added", _NONE, 0))}
            SELECT * FROM added""")  # 0: ready or waiting count and wake alike
        self.enqueue_many = sql(f"""
            WITH added AS (
                INSERT INTO {{s}}.jobs AS j (queue, id, seq, state, priority, available_at,
                                           enqueued_at, max_attempts, keyed, payload)
                SELECT %(q)s, {new_id}, n.seq, {state}, %(pr)s, t.now + %(delay)s, t.now,
                       %(ma)s, false, n.p
                FROM (SELECT nextval('{{s}}.job_seq') AS seq, u.p
                      FROM unnest(%(ps)s::text[]) WITH ORDINALITY AS u(p, o)
                      ORDER BY u.o) AS n,
                     {t}
                ON CONFLICT (queue, id) DO NOTHING
                RETURNING j.id, j.seq, j.state, j.priority, j.available_at, j.enqueued_at),
            {_counted(_Change("added", _NONE, 0))}
            SELECT * FROM added""")
        # An expired finished row frees its key; a cancelled one frees it at once.
        self.forget_key = sql(f"""
            WITH gone AS (
                DELETE FROM {{s}}.jobs AS j USING {t}
                WHERE j.queue = %(q)s AND j.id = %(id)s AND j.state >= 3
                  AND (j.expires_at <= t.now OR j.state = 4)
                RETURNING j.id, {{s}}.nb_kept(j.state, j.result) AS kept),
            {_counted(_Change("gone", 3, _NONE, kept_before="gone.kept"))}
            SELECT count(*) FROM gone""")
        self.get = sql(f"""
            SELECT {{cols}} FROM {{s}}.jobs AS j, {t}
            WHERE j.queue = %(q)s AND j.id = %(id)s AND {{visible}}""")
        self.lease_of = sql(f"""
            SELECT j.state, j.token FROM {{s}}.jobs AS j, {t}
            WHERE j.queue = %(q)s AND j.id = %(id)s AND {{visible}}""")
        # The deadline is compared with a scalar subquery, not with a join to t:
        # an InitPlan's value bounds the scan of jobs_leases (an Index Cond), so a
        # lease reads the expired leases only; as a join filter it read every
        # leased row of the queue, on every lease (10,000 held: 4.7 ms a lease).
        reclaim = f"""
            expired AS (
                SELECT j.id FROM {{s}}.jobs AS j
                WHERE j.queue = %(q)s AND j.state = 1 AND j.lease_until <= (SELECT now FROM t)
                ORDER BY j.lease_until LIMIT {_RECLAIM_BATCH} FOR UPDATE OF j SKIP LOCKED),
            reclaimed AS (
                UPDATE {{s}}.jobs AS j SET
                    state = CASE WHEN j.attempts >= j.max_attempts THEN 2 ELSE {WAITING} END,
                    available_at = CASE WHEN j.attempts >= j.max_attempts THEN j.available_at
                                   ELSE t.now + {backoff_sql(backoff, "j.attempts")} END,
                    finished_at = CASE WHEN j.attempts >= j.max_attempts THEN t.now END,
                    last_error = 'lease expired (attempt ' || j.attempts || ')',
                    token = NULL, lease_until = NULL
                FROM expired, t WHERE j.queue = %(q)s AND j.id = expired.id
                RETURNING j.id, j.state)"""
        leased = """leased AS (
                UPDATE {s}.jobs AS j SET state = 1, attempts = j.attempts + 1,
                    token = nextval('{s}.lease_token'), lease_until = t.now + %(vt)s
                FROM picked, t WHERE j.queue = %(q)s AND j.id = picked.id
                RETURNING {cols})"""
        # The candidates: the best ready rows, and the waiting rows now due (by
        # due time, a batch at most; bounded by an InitPlan as above). Those
        # due that this lease does not take become ready (state 0, same time),
        # so a backlog of due jobs moves into the ready index a batch per
        # lease; until it has, priority order holds within each batch.
        pick = f"""
            due AS (
                SELECT j.id, j.priority, j.seq FROM {{s}}.jobs AS j
                WHERE j.queue = %(q)s AND j.state = {WAITING}
                  AND j.available_at <= (SELECT now FROM t)
                ORDER BY j.available_at LIMIT {_DUE_BATCH} FOR UPDATE OF j SKIP LOCKED),
            ready AS (
                SELECT j.id, j.priority, j.seq FROM {{s}}.jobs AS j, t
                WHERE j.queue = %(q)s AND j.state = 0 AND j.available_at <= t.now
                ORDER BY j.priority DESC, j.seq LIMIT %(n)s FOR UPDATE OF j SKIP LOCKED),
            picked AS (
                SELECT c.id FROM (SELECT * FROM ready UNION ALL SELECT * FROM due) AS c
                WHERE NOT EXISTS (SELECT 1 FROM {{s}}.queues WHERE name = %(q)s AND paused)
                  {{extra}}
                ORDER BY c.priority DESC, c.seq LIMIT %(n)s),
            readied AS (
                UPDATE {{s}}.jobs AS j SET state = 0 FROM due
                WHERE j.queue = %(q)s AND j.id = due.id
                  AND due.id NOT IN (SELECT id FROM picked)),
            {leased}"""
        # A leased row stays live and wakes nobody, and a readied one stays
        # pending with its time: neither has anything to count (stats() counts
        # the leased rows). A reclaimed one has.
        reclaim_change = _Change("reclaimed", 1, None, (WAITING, 2))
        now_cte = "t AS (SELECT {s}.nb_now(%(t)s::float8) AS now)"
        self.lease = sql(f"WITH {now_cte}, {reclaim}, {pick.replace('{extra}', '')}, "
                         f"{_counted(reclaim_change)} SELECT * FROM leased")
        # The lease after a wake, when there is nothing to reclaim and no waiting
        # job is due (`clear`): then the best ready rows are what `lease` would
        # take, found with fewer steps (an idle worker's pickup is about a tenth
        # of a millisecond sooner). Not clear: it takes nothing, and the caller
        # runs `lease`.
        self.lease_ready = sql(f"""
            WITH {now_cte},
            clear AS (
                SELECT NOT EXISTS (
                           SELECT 1 FROM {{s}}.jobs AS j
                           WHERE j.queue = %(q)s AND j.state = {WAITING}
                             AND j.available_at <= (SELECT now FROM t))
                       AND NOT EXISTS (
                           SELECT 1 FROM {{s}}.jobs AS j
                           WHERE j.queue = %(q)s AND j.state = 1
                             AND j.lease_until <= (SELECT now FROM t)) AS ok),
            picked AS (
                SELECT j.id FROM {{s}}.jobs AS j, t
                WHERE j.queue = %(q)s AND j.state = 0 AND j.available_at <= t.now
                  AND (SELECT ok FROM clear)
                  AND NOT EXISTS (SELECT 1 FROM {{s}}.queues WHERE name = %(q)s AND paused)
                ORDER BY j.priority DESC, j.seq LIMIT %(n)s FOR UPDATE OF j SKIP LOCKED),
            {leased}
            SELECT clear.ok, leased.* FROM clear LEFT JOIN leased ON true""")
        ack_set = """
            state = 3, finished_at = t.now, available_at = t.now, token = NULL,
            lease_until = NULL,
            expires_at = t.now + CASE WHEN j.keyed THEN %(kr)s::float8 ELSE %(ur)s::float8 END"""
        acked = f"""
            acked AS (
                UPDATE {{s}}.jobs AS j SET {ack_set}, result = %(r)s::text FROM t
                WHERE j.queue = %(q)s AND j.id = %(id)s AND j.state = 1
                  AND j.token = %(tok)s
                RETURNING j.id, j.result IS NOT NULL AS kept)"""
        ack_change = _Change("acked", 1, 3, kept_after="acked.kept")
        self.ack = sql(f"WITH {now_cte}, {acked}, {_counted(ack_change)} "
                       "SELECT id FROM acked")
        self.ack_many = sql(f"""
            WITH acked AS (
                UPDATE {{s}}.jobs AS j SET {ack_set}
                FROM unnest(%(ids)s::text[], %(toks)s::bigint[]) AS a(id, tok), {t}
                WHERE j.queue = %(q)s AND j.id = a.id AND j.state = 1 AND j.token = a.tok
                RETURNING j.id),
            {_counted(_Change("acked", 1, 3))}
            SELECT id FROM acked""")
        self.ack_and_lease = sql(
            f"WITH {now_cte}, {acked}, {reclaim}, "
            f"{pick.replace('{extra}', 'AND EXISTS (SELECT 1 FROM acked)')}, "
            f"{_counted(ack_change, reclaim_change)} "
            "SELECT (SELECT count(*) FROM acked), leased.* "
            "FROM (SELECT 1) AS one LEFT JOIN leased ON true")
        self.nack = sql(f"""
            WITH nacked AS (
                UPDATE {{s}}.jobs AS j SET
                    state = CASE WHEN j.attempts >= j.max_attempts THEN 2
                                 WHEN %(delay)s::float8 > 0 THEN {WAITING} ELSE 0 END,
                    available_at = CASE WHEN j.attempts >= j.max_attempts THEN j.available_at
                                   ELSE t.now + %(delay)s::float8 END,
                    finished_at = CASE WHEN j.attempts >= j.max_attempts THEN t.now END,
                    last_error = %(err)s::text, token = NULL, lease_until = NULL
                FROM {t}
                WHERE j.queue = %(q)s AND j.id = %(id)s AND j.state = 1 AND j.token = %(tok)s
                RETURNING {{cols}}),
            {_counted(_Change("nacked", 1, None, (WAITING, 0, 2)))}
            SELECT * FROM nacked""")
        self.snooze = sql(f"""
            WITH snoozed AS (
                UPDATE {{s}}.jobs AS j SET
                    state = CASE WHEN %(delay)s::float8 > 0 THEN {WAITING} ELSE 0 END,
                    available_at = t.now + %(delay)s::float8,
                    attempts = greatest(j.attempts - 1, 0),
                    last_error = %(err)s::text, token = NULL, lease_until = NULL
                FROM {t}
                WHERE j.queue = %(q)s AND j.id = %(id)s AND j.state = 1 AND j.token = %(tok)s
                RETURNING {{cols}}),
            {_counted(_Change("snoozed", 1, None, (WAITING, 0)))}
            SELECT * FROM snoozed""")
        self.extend = sql(f"""
            UPDATE {{s}}.jobs AS j SET lease_until = t.now + %(s)s::float8 FROM {t}
            WHERE j.queue = %(q)s AND j.id = %(id)s AND j.state = 1 AND j.token = %(tok)s
            RETURNING {{cols}}""")
        self.next_due = sql(f"""
            SELECT t.now, CASE WHEN (SELECT paused FROM {{s}}.queues WHERE name = %(q)s)
                               THEN NULL ELSE least(
                (SELECT min(available_at) FROM {{s}}.jobs
                 WHERE queue = %(q)s AND state = 0),
                (SELECT min(available_at) FROM {{s}}.jobs
                 WHERE queue = %(q)s AND state = {WAITING}),
                (SELECT min(lease_until) FROM {{s}}.jobs
                 WHERE queue = %(q)s AND state = 1)) END
            FROM {t}""")
        # wakeups.py: a job's finish is NOTIFYed once it has a row in watches.
        self.watch = sql("INSERT INTO {s}.watches (queue, id) VALUES (%(q)s, %(id)s) "
                         "ON CONFLICT DO NOTHING")
        self.hold = sql("SELECT 1 FROM {s}.jobs WHERE queue = %(q)s AND id = %(id)s "
                        "FOR SHARE")
        self.unwatch = sql("DELETE FROM {s}.watches WHERE queue = %(q)s AND id = %(id)s")
        self.sweep_watches = sql("""
            DELETE FROM {s}.watches AS w WHERE w.queue = %(q)s AND NOT EXISTS (
                SELECT 1 FROM {s}.jobs AS j WHERE j.queue = w.queue AND j.id = w.id
                  AND j.state < 2)""")
        # Its state before is read under the row's lock (a lease committed
        # meanwhile is seen): the UPDATE's RETURNING has only the new one.
        self.cancel = sql(f"""
            WITH live AS (
                SELECT j.id, j.state FROM {{s}}.jobs AS j
                WHERE j.queue = %(q)s AND j.id = %(id)s AND j.state IN ({WAITING}, 0, 1)
                FOR UPDATE),
            cancelled AS (
                UPDATE {{s}}.jobs AS j SET state = 4, finished_at = t.now, token = NULL,
                    lease_until = NULL, expires_at = t.now + %(ttl)s::float8
                FROM live, {t}
                WHERE j.queue = %(q)s AND j.id = live.id
                RETURNING j.id, live.state),
            {_counted(_Change("cancelled", None, 4, (WAITING, 0, 1), kept_after="true"))}
            SELECT id FROM cancelled""")
        self.pause = sql("""
            WITH changed AS (
                INSERT INTO {s}.queues AS qs (name, paused) VALUES (%(q)s, %(paused)s)
                ON CONFLICT (name) DO UPDATE SET paused = excluded.paused RETURNING paused)
            SELECT CASE WHEN NOT paused THEN pg_notify(%(chan)s, '') END FROM changed""")
        self.requeue = sql(f"""
            WITH requeued AS (
                UPDATE {{s}}.jobs AS j SET state = 0, attempts = 0, available_at = t.now,
                    finished_at = NULL
                FROM {t}
                WHERE j.queue = %(q)s AND j.state = 2
                  AND (%(id)s::text IS NULL OR j.id = %(id)s)
                RETURNING j.id),
            {_counted(_Change("requeued", 2, 0))}
            SELECT id FROM requeued""")
        self.purge = sql(f"""
            WITH gone AS (
                DELETE FROM {{s}}.jobs WHERE queue = %(q)s AND state <= 0
                RETURNING id),
            {_counted(_Change("gone", 0, _NONE))}
            SELECT count(*) FROM gone""")
        self.delete_dead = sql(f"""
            WITH gone AS (
                DELETE FROM {{s}}.jobs
                WHERE queue = %(q)s AND state = 2 AND (%(id)s::text IS NULL OR id = %(id)s)
                RETURNING id),
            {_counted(_Change("gone", 2, _NONE))}
            SELECT count(*) FROM gone""")
        # Pending: live rows less the leased ones, which no counter follows (a
        # lease would write a counter row on the pickup path); there are as many
        # as the workers hold, read in the jobs_leases index. Kept: the counter,
        # less the kept rows already expired that no sweep took yet.
        self.stats = sql(f"""
            WITH held AS (SELECT count(*) AS n FROM {{s}}.jobs WHERE queue = %(q)s AND state = 1)
            SELECT coalesce(sum(live), 0) - (SELECT n FROM held), (SELECT n FROM held),
                   coalesce(sum(dead), 0), coalesce(sum(done), 0),
                   coalesce((SELECT paused FROM {{s}}.queues WHERE name = %(q)s), false),
                   coalesce(sum(kept), 0) - (
                       SELECT count(*) FROM {{s}}.jobs AS j, {t}
                       WHERE j.queue = %(q)s AND j.state >= 3 AND j.expires_at <= t.now
                         AND {{s}}.nb_kept(j.state, j.result))
            FROM {{s}}.counters WHERE queue = %(q)s""")
        self.list_jobs = sql(f"""
            SELECT {{cols}} FROM {{s}}.jobs AS j, {t}
            WHERE j.queue = %(q)s AND j.state = ANY(%(codes)s::smallint[]) AND {{visible}}
              AND (j.state <> 3 OR j.result IS NOT NULL)  -- a done job is listed if kept
            ORDER BY j.seq LIMIT %(n)s OFFSET %(off)s""")
        self.sweep = sql(f"""
            WITH gone AS (
                DELETE FROM {{s}}.jobs AS d USING (
                    SELECT j.id FROM {{s}}.jobs AS j, {t}
                    WHERE j.queue = %(q)s AND j.state >= 3 AND j.expires_at <= t.now
                    LIMIT 1000 FOR UPDATE OF j SKIP LOCKED) AS old
                WHERE d.queue = %(q)s AND d.id = old.id
                RETURNING d.id, {{s}}.nb_kept(d.state, d.result) AS kept),
            {_counted(_Change("gone", 3, _NONE, kept_before="gone.kept"))}
            SELECT count(*) FROM gone""")
        self.live = sql(f"""
            SELECT count(*) FILTER (WHERE j.state < 3),
                   count(*) FILTER (WHERE j.state >= 3 AND j.keyed)
            FROM {{s}}.jobs AS j, {t} WHERE j.queue = %(q)s AND {{visible}}""")
        self.import_jobs = sql(f"""
            WITH src AS (
                SELECT u.*, nextval('{{s}}.job_seq') AS seq
                FROM unnest(%(ids)s::text[], %(states)s::smallint[], %(prs)s::bigint[],
                            %(ats)s::float8[], %(ts)s::float8[], %(mas)s::bigint[],
                            %(atts)s::bigint[], %(ks)s::boolean[], %(errs)s::text[],
                            %(ps)s::text[]) WITH ORDINALITY
                     AS u(id, state, priority, available_at, enqueued_at, max_attempts,
                          attempts, keyed, last_error, payload, o)
                ORDER BY u.o),
            added AS (
                INSERT INTO {{s}}.jobs (queue, id, seq, state, priority, available_at, enqueued_at,
                                      max_attempts, attempts, keyed, last_error, payload,
                                      finished_at)
                SELECT %(q)s, id, seq,
                       CASE WHEN state = 0 AND available_at > t.now THEN {WAITING} ELSE state END,
                       priority, available_at, enqueued_at, max_attempts,
                       attempts, keyed, last_error, payload,
                       CASE WHEN state = 2 THEN available_at END
                FROM src, (SELECT {{s}}.nb_now(%(t)s::float8) AS now) AS t
                ON CONFLICT (queue, id) DO NOTHING
                RETURNING id, state),
            {_counted(_Change("added", _NONE, None, (WAITING, 0, 2)))}
            SELECT state FROM added""")
        # Generated-form ids copied in must not be generated again here.
        self.bump_seq = sql("""
            SELECT setval('{s}.job_seq', greatest(
                (SELECT last_value FROM {s}.job_seq),
                (SELECT coalesce(max(('x' || id)::bit(64)::bigint), 1) FROM {s}.jobs
                 WHERE queue = %(q)s AND id ~ '^0000[0-9a-f]{12}$')))""")
