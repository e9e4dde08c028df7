-- A leased job failed: dead if that was its last attempt or the caller said so
-- (`dl`: Queue.nack(dead=True)), else pending again after `delay` (waiting) or at
-- once (ready). A death settles its waiting dependents (parts/settled.sql).
-- The row is found by its key: `state + 0` (parts/acked.sql says why).
WITH nacked AS (
    UPDATE {schema}.jobs AS j SET
        state = CASE WHEN (j.attempts >= j.max_attempts OR %(dl)s::boolean) THEN 2
                     WHEN %(delay)s::float8 > 0 THEN -1 ELSE 0 END,
        available_at = CASE WHEN (j.attempts >= j.max_attempts OR %(dl)s::boolean)
                       THEN j.available_at ELSE t.now + %(delay)s::float8 END,
        finished_at = CASE WHEN (j.attempts >= j.max_attempts OR %(dl)s::boolean) THEN t.now END,
        last_error = %(err)s::text, token = NULL, lease_until = NULL
    FROM (SELECT {schema}.nb_now(%(t)s::float8) AS now) AS t
    WHERE j.queue = %(q)s AND j.id = %(id)s AND j.state + 0 = 1 AND j.token = %(tok)s
    RETURNING {job_columns}, j.dependents),
finishing AS (
    SELECT nacked.id, 2 AS st, nacked.dependents FROM nacked WHERE nacked.state = 2),
{settled},
tally AS MATERIALIZED (
    SELECT c0.p - settled.n AS p, c0.d, c0.f, c0.k + settled.n AS k,
           CASE WHEN c0.w0 > 0 OR c0.w1 > 0
                THEN pg_notify({schema}.nb_channel('r', %(q)s), '')::text END AS woke
    FROM (SELECT -count(*) FILTER (WHERE nacked.state = 2) AS p,
                 count(*) FILTER (WHERE nacked.state = 2) AS d, 0 AS f, 0 AS k,
                 count(*) FILTER (WHERE nacked.state = -1) AS w0,
                 count(*) FILTER (WHERE nacked.state = 0) AS w1
          FROM nacked) AS c0, settled),
{counted}
SELECT id, seq, state, priority, available_at, enqueued_at, max_attempts, attempts,
       token, lease_until, last_error, payload, result, finished_at, progress, meta
FROM nacked
