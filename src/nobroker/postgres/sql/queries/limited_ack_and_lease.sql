-- ack_and_lease.sql for a process that declared limits: the ack, and the next
-- lease within them (nb_limited_lease, migrations/0008: under the lock on the
-- queue's row, the ack's and the reclaims' slots free), in one statement; the
-- lease happens only if the ack did. Rows as
-- ack_and_lease.sql's. An ack that frees a concurrency slot wakes the idle
-- workers, as ack.sql's does, unless this lease took a job of that key (the
-- slot is held again: a NOTIFY makes the commit take a server-wide lock).
WITH t AS (SELECT {schema}.nb_now(%(t)s::float8) AS now),
{acked},
{reclaimed},
a AS (SELECT CASE WHEN EXISTS (SELECT 1 FROM acked) THEN %(n)s ELSE 0 END AS n,
         ARRAY(SELECT id FROM acked UNION ALL SELECT id FROM reclaimed) AS freed),
-- A process that declared no rate limit: nb_limited_lease_unrated (migrations/0012).
l AS MATERIALIZED (
    SELECT f.* FROM a, {schema}.nb_limited_lease(%(q)s, a.n, %(vt)s, %(t)s::float8, a.freed,
        %(rks)s::text[], %(rss)s::text[], %(rcs)s::integer[], %(rps)s::float8[], %(fs)s::text[],
        %(caps)s::integer[]) AS f WHERE cardinality(%(rks)s::text[]) > 0
    UNION ALL
    SELECT f.* FROM a, {schema}.nb_limited_lease_unrated(%(q)s, a.n, %(vt)s, %(t)s::float8,
        a.freed, %(fs)s::text[], %(caps)s::integer[]) AS f
    WHERE cardinality(%(rks)s::text[]) = 0),
leased AS (SELECT {job_columns} FROM l AS j),
finishing AS (
    SELECT id, 3 AS st, dependents FROM acked
    UNION ALL SELECT id, 2, dependents FROM reclaimed WHERE state = 2),
{settled},
tally AS MATERIALIZED (
    SELECT c0.p - c1.d - settled.n AS p, c1.d, c0.f, c0.k + settled.n AS k,
           CASE WHEN c1.w0 + c0.h > 0 THEN pg_notify({schema}.nb_channel('r', %(q)s), '')::text
           END AS woke
    FROM (SELECT -count(*) AS p, count(*) AS f, count(*) FILTER (WHERE kept) AS k,
                 count(*) FILTER (WHERE ck <> '' AND ck NOT IN (SELECT conc_key FROM l)) AS h
          FROM acked) AS c0,
         (SELECT count(*) FILTER (WHERE state = 2) AS d,
                 count(*) FILTER (WHERE state = -1) AS w0
          FROM reclaimed) AS c1, settled),
{counted}
SELECT (SELECT count(*) FROM acked), leased.*,
       (SELECT array_agg(id) FROM finishing WHERE st = 2)
FROM (SELECT 1) AS one LEFT JOIN leased ON true
