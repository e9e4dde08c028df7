-- ack_and_lease.sql for a process that declared limits and a rate limit among
-- them: the ack, and the next lease within them (nb_limited_lease_granted,
-- migrations/0016: a start granted to this process before, `gk` and `gu`, else
-- under the lock on the queue's row, the ack's and the reclaims' slots free,
-- `gw` more starts asked for; else nb_limited_lease, 0008), in one statement;
-- the lease happens only if the ack did. Rows as ack_and_lease.sql's, and the
-- starts granted ("count until key", '' for none). An ack that frees a
-- concurrency slot wakes the idle workers, as ack.sql's does, unless this lease
-- took a job of that key (the slot is held again: a NOTIFY makes the commit take
-- a server-wide lock).
WITH t AS (SELECT {schema}.nb_now(%(t)s::float8) AS now),
{acked},
{reclaimed},
l AS MATERIALIZED (
    SELECT * FROM {schema}.nb_limited_lease_granted(%(q)s,
        CASE WHEN EXISTS (SELECT 1 FROM acked) THEN %(n)s ELSE 0 END, %(vt)s, %(t)s::float8,
        ARRAY(SELECT id FROM acked UNION ALL SELECT id FROM reclaimed), %(rks)s::text[],
        %(rss)s::text[], %(rcs)s::integer[], %(rps)s::float8[], %(fs)s::text[],
        %(caps)s::integer[], %(gk)s::text, %(gu)s::float8, %(gw)s::integer)),
{limited_ack_tail}
