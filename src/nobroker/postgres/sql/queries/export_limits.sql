-- The limit keys (migrations/0006) and stored concurrency cap (0008) of every
-- job export_jobs.sql hands out that has keys (nobroker migrate).
SELECT j.id, j.rate_key, j.conc_key, j.conc_cap
FROM {schema}.jobs AS j
WHERE j.queue = %(q)s AND j.state BETWEEN -2 AND 2
  AND (j.rate_key <> '' OR j.conc_key <> '')
