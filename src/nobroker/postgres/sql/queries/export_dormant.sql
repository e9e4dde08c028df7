-- The revivable cancelled dependents still kept (migrations/0007), in enqueue
-- order, for nobroker migrate: each row, its key flag and limit keys, its
-- unmet and failed prerequisites in the order given, and its concurrency cap. One whose failed
-- prerequisite is gone is left out: it is cancelled for good.
SELECT {job_columns}, j.keyed, j.rate_key, j.conc_key,
       ARRAY(SELECT o.prerequisite FROM {schema}.dormant AS o
             WHERE o.queue = j.queue AND o.dependent = j.id AND NOT o.failed ORDER BY o.pos),
       ARRAY(SELECT o.prerequisite FROM {schema}.dormant AS o
             WHERE o.queue = j.queue AND o.dependent = j.id AND o.failed ORDER BY o.pos),
       j.conc_cap
FROM {schema}.jobs AS j, (SELECT {schema}.nb_now(%(t)s::float8) AS now) AS t
WHERE j.queue = %(q)s AND j.state = 4 AND j.expires_at > t.now
  AND j.id IN (SELECT o.dependent FROM {schema}.dormant AS o WHERE o.queue = %(q)s)
  AND NOT EXISTS (
      SELECT 1 FROM {schema}.dormant AS o
      WHERE o.queue = j.queue AND o.dependent = j.id AND o.failed
        AND NOT EXISTS (SELECT 1 FROM {schema}.jobs AS p
                        WHERE p.queue = j.queue AND p.id = o.prerequisite))
ORDER BY j.seq
