-- A job's state and lease token: why a fenced change found no row.
SELECT j.state, j.token
FROM {schema}.jobs AS j, (SELECT {schema}.nb_now(%(t)s::float8) AS now) AS t
WHERE j.queue = %(q)s AND j.id = %(id)s AND (j.state < 3 OR j.expires_at > t.now)
