-- A leased job put back without spending the attempt: pending after `delay`.
-- The row is found by its key: `state + 0` (parts/acked.sql says why).
WITH snoozed AS (
    UPDATE {schema}.jobs AS j SET
        state = CASE WHEN %(delay)s::float8 > 0 THEN -1 ELSE 0 END,
        available_at = t.now + %(delay)s::float8,
        attempts = greatest(j.attempts - 1, 0),
        last_error = %(err)s::text, token = NULL, lease_until = NULL
    FROM (SELECT {schema}.nb_now(%(t)s::float8) AS now) AS t
    WHERE j.queue = %(q)s AND j.id = %(id)s AND j.state + 0 = 1 AND j.token = %(tok)s
    RETURNING {job_columns}),
tally AS MATERIALIZED (
    SELECT c0.p, c0.d, c0.f, c0.k,
           CASE WHEN c0.w0 > 0 OR c0.w1 > 0
                THEN pg_notify({schema}.nb_channel('r', %(q)s), '')::text END AS woke
    FROM (SELECT 0 AS p, 0 AS d, 0 AS f, 0 AS k,
                 count(*) FILTER (WHERE snoozed.state = -1) AS w0,
                 count(*) FILTER (WHERE snoozed.state = 0) AS w1
          FROM snoozed) AS c0),
{counted}
SELECT * FROM snoozed
