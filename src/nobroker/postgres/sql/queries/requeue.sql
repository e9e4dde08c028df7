-- Dead jobs (one, or all when id is NULL) ready again, attempts reset; the
-- dependents their deaths cancelled wait again (nb_revive, migrations/0007),
-- in the same statement: from kept back to live.
WITH requeued AS (
    UPDATE {schema}.jobs AS j SET state = 0, attempts = 0, available_at = t.now,
        finished_at = NULL
    FROM (SELECT {schema}.nb_now(%(t)s::float8) AS now) AS t
    WHERE j.queue = %(q)s AND j.state = 2
      AND (%(id)s::text IS NULL OR j.id = %(id)s)
    RETURNING j.id, j.dependents),
revived AS MATERIALIZED (
    SELECT coalesce((SELECT {schema}.nb_revive(%(q)s, array_agg(r.id), %(t)s)
                     FROM requeued AS r WHERE r.dependents HAVING count(*) > 0), 0) AS n),
tally AS MATERIALIZED (
    SELECT c0.p + revived.n AS p, c0.d, c0.f, c0.k - revived.n AS k,
           CASE WHEN c0.w0 > 0 THEN pg_notify({schema}.nb_channel('r', %(q)s), '')::text
           END AS woke
    FROM (SELECT count(*) AS p, -count(*) AS d, 0 AS f, 0 AS k, count(*) AS w0
          FROM requeued) AS c0, revived),
{counted}
SELECT id FROM requeued
