-- The end of limited_ack_and_lease.sql and unrated_ack_and_lease.sql, after the
-- CTE `l` (the jobs leased): the finished jobs settled, counted and notified (an
-- ack that frees a concurrency slot wakes the idle workers, unless `l` took a
-- job of that key), then the rows, and last the starts granted to this process
-- (nb_limited_lease_granted, migrations/0016: NULL or '' for none). Needs the
-- CTEs `t`, `acked`, `reclaimed`, `l`.
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
       (SELECT array_agg(id) FROM finishing WHERE st = 2),
       current_setting('nobroker.grant', true)  -- after `l` ran: a join's target list
FROM (SELECT 1) AS one LEFT JOIN leased ON true
