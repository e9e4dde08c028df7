-- limited_lease.sql for a process that declared concurrency limits and no rate
-- limit: the lease is nb_limited_lease_unrated's (migrations/0012).
WITH t AS (SELECT {schema}.nb_now(%(t)s::float8) AS now),
{reclaimed},
leased AS MATERIALIZED (
    SELECT {job_columns} FROM {schema}.nb_limited_lease_unrated(%(q)s, %(n)s, %(vt)s,
        %(t)s::float8, ARRAY(SELECT id FROM reclaimed), %(fs)s::text[], %(caps)s::integer[]) AS j),
{lease_end}
