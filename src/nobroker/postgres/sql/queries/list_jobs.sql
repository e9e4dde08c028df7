-- Jobs in the given states, oldest first; a done job only if kept. Last columns
-- as get.sql's: its payload shown, and whether its result is gone (migrations/0011).
SELECT {job_columns}, {waiting_for}, true, j.result_until <= t.now
FROM {schema}.jobs AS j, (SELECT {schema}.nb_now(%(t)s::float8) AS now) AS t
WHERE j.queue = %(q)s AND j.state = ANY(%(codes)s::smallint[])
  AND (j.state < 3 OR j.expires_at > t.now)
  AND (j.state <> 3 OR j.result IS NOT NULL)
ORDER BY j.seq LIMIT %(n)s OFFSET %(off)s
