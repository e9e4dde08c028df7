-- The jobs a new dependent names (its prerequisites; a new job's key too),
-- locked in id order until the enqueue commits: an ack of one waits for it,
-- then finds the dependents it added (nb_settle, migrations/0004). Their ids
-- and states; a finished job past its retention is not there.
SELECT j.id, j.state
FROM {schema}.jobs AS j, (SELECT {schema}.nb_now(%(t)s::float8) AS now) AS t
WHERE j.queue = %(q)s AND j.id = ANY(%(ids)s::text[])
  AND (j.state < 3 OR j.expires_at > t.now)
ORDER BY j.id FOR UPDATE OF j
