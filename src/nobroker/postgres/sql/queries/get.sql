-- One job, unless it is a finished row past its retention (not swept yet).
SELECT {job_columns}, {waiting_for}
FROM {schema}.jobs AS j, (SELECT {schema}.nb_now(%(t)s::float8) AS now) AS t
WHERE j.queue = %(q)s AND j.id = %(id)s AND (j.state < 3 OR j.expires_at > t.now)
