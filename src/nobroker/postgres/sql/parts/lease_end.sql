-- The end of a lease statement (parts/lease_tail.sql, queries/limited_lease.sql),
-- after its CTE `leased`: a lease taken back on its last attempt dies and
-- settles its waiting dependents (parts/settled.sql), the reclaims counted and
-- notified. Needs the CTEs `t`, `reclaimed` and `leased`. Rows: the leased
-- jobs' columns, then the ids of the jobs this reclaim killed (NULL: none; the
-- `dead` hook, rows.lease_rows), on every row; with nothing leased, one row of
-- NULL job columns carries them.
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
