-- The lease after a wake, when there is nothing to reclaim and no waiting job
-- is due (`clear`): then the best ready rows are what lease.sql would take,
-- found with fewer steps (an idle worker's pickup is about a tenth of a
-- millisecond sooner). Not clear: it takes nothing, and the caller runs
-- lease.sql. A lease counts nothing (counted.sql).
WITH t AS (SELECT {schema}.nb_now(%(t)s::float8) AS now),
clear AS (
    SELECT NOT EXISTS (
               SELECT 1 FROM {schema}.jobs AS j
               WHERE j.queue = %(q)s AND j.state = -1
                 AND j.available_at <= (SELECT now FROM t))
           AND NOT EXISTS (
               SELECT 1 FROM {schema}.jobs AS j
               WHERE j.queue = %(q)s AND j.state = 1
                 AND j.lease_until <= (SELECT now FROM t)) AS ok),
picked AS (
    SELECT j.id FROM {schema}.jobs AS j, t
    WHERE j.queue = %(q)s AND j.state = 0 AND j.available_at <= t.now
      AND (SELECT ok FROM clear)
      AND NOT EXISTS (SELECT 1 FROM {schema}.queues WHERE name = %(q)s AND paused)
    ORDER BY j.priority DESC, j.seq LIMIT %(n)s FOR UPDATE OF j SKIP LOCKED),
{leased}
SELECT clear.ok, leased.* FROM clear LEFT JOIN leased ON true
