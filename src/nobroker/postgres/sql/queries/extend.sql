-- A current lease's deadline moved to `s` seconds from now.
-- The row is found by its key: `state + 0` (parts/acked.sql says why).
UPDATE {schema}.jobs AS j SET lease_until = t.now + %(s)s::float8
FROM (SELECT {schema}.nb_now(%(t)s::float8) AS now) AS t
WHERE j.queue = %(q)s AND j.id = %(id)s AND j.state + 0 = 1 AND j.token = %(tok)s
RETURNING {job_columns}
