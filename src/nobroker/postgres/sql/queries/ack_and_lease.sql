-- A worker's ack and its next lease (of one job) in one statement: the lease
-- happens only if the ack did (its lease was current). First column: 1 if
-- acked; then the leased job's columns, or NULLs when none was leased. The
-- waiting dependents of the jobs it finished are settled in it (parts/settled.sql).
WITH t AS (SELECT {schema}.nb_now(%(t)s::float8) AS now),
{acked},
{reclaimed},
{candidates},
picked AS (
    SELECT c.id FROM (SELECT * FROM ready UNION ALL SELECT * FROM due) AS c
    WHERE NOT EXISTS (SELECT 1 FROM {schema}.queues WHERE name = %(q)s AND paused)
      AND EXISTS (SELECT 1 FROM acked)
    ORDER BY c.priority DESC, c.seq LIMIT %(n)s),
{readied},
{leased},
finishing AS (
    SELECT id, 3 AS st, dependents FROM acked
    UNION ALL SELECT id, 2, dependents FROM reclaimed WHERE state = 2),
{settled},
tally AS MATERIALIZED (
    SELECT c0.p + c1.p - settled.n AS p, c0.d + c1.d AS d, c0.f + c1.f AS f,
           c0.k + c1.k + settled.n AS k,
           CASE WHEN c1.w0 > 0 THEN pg_notify({schema}.nb_channel('r', %(q)s), '')::text
           END AS woke
    FROM (SELECT -count(*) AS p, 0 AS d, count(*) AS f,
                 count(*) FILTER (WHERE acked.kept) AS k
          FROM acked) AS c0,
         (SELECT -count(*) FILTER (WHERE state = 2) AS p,
                 count(*) FILTER (WHERE state = 2) AS d, 0 AS f, 0 AS k,
                 count(*) FILTER (WHERE state = -1) AS w0
          FROM reclaimed) AS c1, settled),
{counted}
SELECT (SELECT count(*) FROM acked), leased.* FROM (SELECT 1) AS one LEFT JOIN leased ON true
