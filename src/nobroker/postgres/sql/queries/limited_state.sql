-- What limit_use and a limited wait decide from (postgres/limited.py), one row
-- each: 'now', the acting time; 'next', when something next changes without a
-- write (a lease's deadline, a delayed job's due time; NULL while paused or if
-- none), with n = 1 while paused; 'held', if `held`, the holders of each
-- concurrency key (its leased jobs) with the cap its latest live job carries
-- (migrations/0008; NULL if none): limit_use's, one row a key held (a wait
-- counts only its candidates' keys, limited_candidates.sql); 'window', the latest
-- starts of a rate key of `keys` (its ring, migrations/0008, oldest first). The
-- time is read now, not at the transaction's start (now()).
WITH t AS (SELECT coalesce(%(t)s::float8, extract(epoch FROM clock_timestamp())::float8) AS now)
SELECT 'now', NULL::text, 0::bigint, NULL::float8[], t.now, NULL::integer FROM t
UNION ALL
SELECT 'next', NULL, q.paused::int, NULL, CASE WHEN NOT q.paused THEN least(
    (SELECT min(j.lease_until) FROM {schema}.jobs AS j WHERE j.queue = %(q)s AND j.state = 1),
    (SELECT min(j.available_at) FROM {schema}.jobs AS j
     WHERE j.queue = %(q)s AND j.state = 0 AND j.available_at > t.now),
    (SELECT min(j.available_at) FROM {schema}.jobs AS j
     WHERE j.queue = %(q)s AND j.state = -1 AND j.available_at > t.now)) END, NULL
FROM t, {schema}.queues AS q WHERE q.name = %(q)s
UNION ALL
SELECT 'held', h.conc_key, h.n, NULL, NULL, (
    SELECT j.conc_cap FROM {schema}.jobs AS j
    WHERE j.queue = %(q)s AND j.conc_key = h.conc_key AND j.conc_key <> ''
      AND j.state BETWEEN -2 AND 1 ORDER BY j.seq DESC LIMIT 1)
FROM (SELECT j.conc_key, count(*) AS n FROM {schema}.jobs AS j
      WHERE %(held)s AND j.queue = %(q)s AND j.state = 1 AND j.conc_key <> ''
      GROUP BY j.conc_key) AS h
UNION ALL
SELECT 'window', w.key, 0, ARRAY(SELECT s.at FROM {schema}.limit_starts AS s
                                  WHERE s.queue = w.queue AND s.key = w.key ORDER BY s.at),
       NULL, NULL FROM {schema}.limit_windows AS w
WHERE w.queue = %(q)s AND w.key = ANY(%(keys)s::text[])
