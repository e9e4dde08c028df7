-- One job, unless it is a finished row past its retention (not swept yet). Last
-- columns: whether its payload is shown; a finished job's (done, cancelled) is
-- not, as on files and memory://, but a revivable cancelled one's (migrations/0007);
-- whether its result is gone (a keyed job's, past result_until: migrations/0011).
SELECT {job_columns}, {waiting_for},
       j.state < 3 OR (j.state = 4 AND EXISTS (
           SELECT 1 FROM {schema}.dormant AS d WHERE d.queue = j.queue AND d.dependent = j.id)),
       j.result_until <= t.now
FROM {schema}.jobs AS j, (SELECT {schema}.nb_now(%(t)s::float8) AS now) AS t
WHERE j.queue = %(q)s AND j.id = %(id)s AND (j.state < 3 OR j.expires_at > t.now)
