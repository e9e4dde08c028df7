-- A lease of up to n jobs by a process that declared limits: expired leases
-- taken back first (their slots free), then nb_limited_lease (migrations/0008:
-- the choice and the lease under the lock on the queue's row) in the same
-- statement. Rows as lease.sql's (parts/lease_tail.sql).
WITH t AS (SELECT {schema}.nb_now(%(t)s::float8) AS now),
{reclaimed},
leased AS MATERIALIZED (
    SELECT {job_columns} FROM {schema}.nb_limited_lease(%(q)s, %(n)s, %(vt)s,
        %(t)s::float8, ARRAY(SELECT id FROM reclaimed), %(rks)s::text[],
        %(rss)s::text[], %(rcs)s::integer[], %(rps)s::float8[], %(fs)s::text[],
        %(caps)s::integer[]) AS j),
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
SELECT leased.*, dead.ids
FROM (SELECT array_agg(id) AS ids FROM reclaimed WHERE state = 2) AS dead
LEFT JOIN leased ON true
