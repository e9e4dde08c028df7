-- Up to n jobs leased, best first: expired leases taken back first (they are
-- leasable from the next call), then the best of the ready and the due rows.
-- With n = 0 (purge) it only takes the expired leases back. A lease that dies
-- settles its waiting dependents (parts/settled.sql).
WITH t AS (SELECT {schema}.nb_now(%(t)s::float8) AS now),
{reclaimed},
{candidates},
picked AS (
    SELECT c.id FROM (SELECT * FROM ready UNION ALL SELECT * FROM due) AS c
    WHERE NOT EXISTS (SELECT 1 FROM {schema}.queues WHERE name = %(q)s AND paused)
    ORDER BY c.priority DESC, c.seq LIMIT %(n)s),
{readied},
{leased},
finishing AS (
    SELECT reclaimed.id, 2 AS st, reclaimed.dependents FROM reclaimed
    WHERE reclaimed.state = 2),
{settled},
tally AS MATERIALIZED (
    SELECT c0.p - settled.n AS p, c0.d, c0.f, c0.k + settled.n AS k,
           CASE WHEN c0.w0 > 0 THEN pg_notify({schema}.nb_channel('r', %(q)s), '')::text
           END AS woke
    FROM (SELECT -count(*) FILTER (WHERE reclaimed.state = 2) AS p,
                 count(*) FILTER (WHERE reclaimed.state = 2) AS d, 0 AS f, 0 AS k,
                 count(*) FILTER (WHERE reclaimed.state = -1) AS w0
          FROM reclaimed) AS c0, settled),
{counted}
SELECT * FROM leased
