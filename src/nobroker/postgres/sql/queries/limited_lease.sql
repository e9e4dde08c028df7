-- A lease of up to n jobs by a process that declared limits and a rate limit
-- among them: expired leases taken back first (their slots free), then
-- nb_limited_lease_granted (migrations/0016, asking for no start granted: the
-- best job alone if within its limits, else nb_limited_lease's choice, 0008;
-- under the lock on the queue's row) in the same statement. Rows as lease.sql's
-- (parts/lease_end.sql).
WITH t AS (SELECT {schema}.nb_now(%(t)s::float8) AS now),
{reclaimed},
leased AS MATERIALIZED (
    SELECT {job_columns} FROM {schema}.nb_limited_lease_granted(%(q)s, %(n)s, %(vt)s,
        %(t)s::float8, ARRAY(SELECT id FROM reclaimed), %(rks)s::text[],
        %(rss)s::text[], %(rcs)s::integer[], %(rps)s::float8[], %(fs)s::text[],
        %(caps)s::integer[], NULL, NULL, 0) AS j),
{lease_end}
