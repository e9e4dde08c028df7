-- limited_ack_and_lease.sql for a process that declared concurrency limits and
-- no rate limit: the lease is nb_limited_lease_unrated's (migrations/0012).
WITH t AS (SELECT {schema}.nb_now(%(t)s::float8) AS now),
{acked},
{reclaimed},
l AS MATERIALIZED (
    SELECT * FROM {schema}.nb_limited_lease_unrated(%(q)s,
        CASE WHEN EXISTS (SELECT 1 FROM acked) THEN %(n)s ELSE 0 END, %(vt)s, %(t)s::float8,
        ARRAY(SELECT id FROM acked UNION ALL SELECT id FROM reclaimed), %(fs)s::text[],
        %(caps)s::integer[])),
{limited_ack_tail}
