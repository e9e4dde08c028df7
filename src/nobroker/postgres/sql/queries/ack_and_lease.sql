-- A worker's ack and its next lease (of one job) in one statement: the lease
-- happens only if the ack did (its lease was current). First column: 1 if
-- acked; then the leased job's columns, or NULLs when none was leased.
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
    SELECT acked.id FROM acked
    UNION ALL SELECT reclaimed.id FROM reclaimed WHERE reclaimed.state = 2),
tally AS MATERIALIZED (
    SELECT c0.p + c1.p AS p, c0.d + c1.d AS d, c0.f + c1.f AS f, c0.k + c1.k AS k,
           CASE WHEN c1.w0 > 0 THEN pg_notify({schema}.nb_channel('r', %(q)s), '')::text
           END AS woke,
           (SELECT {schema}.nb_finished(%(q)s, array_agg(f.id)) FROM finishing AS f
            HAVING count(*) > 0) AS told
    FROM (SELECT -count(*) AS p, 0 AS d, count(*) AS f,
                 count(*) FILTER (WHERE acked.kept) AS k
          FROM acked) AS c0,
         (SELECT -count(*) FILTER (WHERE reclaimed.state = 2) AS p,
                 count(*) FILTER (WHERE reclaimed.state = 2) AS d, 0 AS f, 0 AS k,
                 count(*) FILTER (WHERE reclaimed.state = -1) AS w0
          FROM reclaimed) AS c1),
{counted}
SELECT (SELECT count(*) FROM acked), leased.* FROM (SELECT 1) AS one LEFT JOIN leased ON true
