-- A worker's ack and its next lease (of one job) in one statement: the lease
-- happens only if the ack did (its lease was current). First column: 1 if
-- acked; then the leased job's columns, or NULLs when none was leased; last,
-- the ids of the jobs its reclaim killed (as parts/lease_tail.sql). The
-- waiting dependents of the jobs it finished are settled in it (parts/settled.sql),
-- and then the lease is made (nb_lease_next, migrations/0011: after the settle,
-- so that a chain step the ack released may be the job it leases).
WITH t AS (SELECT {schema}.nb_now(%(t)s::float8) AS now),
{acked},
{reclaimed},
finishing AS (
    SELECT id, 3 AS st, dependents FROM acked
    UNION ALL SELECT id, 2, dependents FROM reclaimed WHERE state = 2),
{settled},
-- settled.n (never negative) as an argument: the call comes after the settle.
leased AS MATERIALIZED (
    SELECT {job_columns}
    FROM settled, {schema}.nb_lease_next(%(q)s, %(n)s::integer, %(vt)s::float8,
                                         %(t)s::float8, settled.n >= 0 AND EXISTS (TABLE acked)
                                         ) AS j),
tally AS MATERIALIZED (
    SELECT c0.p - c1.d - settled.n AS p, c1.d, c0.f, c0.k + settled.n AS k,
           CASE WHEN c1.w0 > 0 THEN pg_notify({schema}.nb_channel('r', %(q)s), '')::text
           END AS woke
    -- c0 counts the ack (no deaths), c1 the leases taken back (no finishes, none
    -- kept; each death one live job less)
    FROM (SELECT -count(*) AS p, count(*) AS f, count(*) FILTER (WHERE kept) AS k
          FROM acked) AS c0,
         (SELECT count(*) FILTER (WHERE state = 2) AS d,
                 count(*) FILTER (WHERE state = -1) AS w0
          FROM reclaimed) AS c1, settled),
{counted}
SELECT (SELECT count(*) FROM acked), leased.*,
       (SELECT array_agg(id) FROM finishing WHERE st = 2)
FROM (SELECT) AS one LEFT JOIN leased ON true
