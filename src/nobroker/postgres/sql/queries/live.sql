-- After a compaction: the live jobs, and the keys finished jobs still hold.
SELECT count(*) FILTER (WHERE j.state < 3),
       count(*) FILTER (WHERE j.state >= 3 AND j.keyed)
FROM {schema}.jobs AS j, (SELECT {schema}.nb_now(%(t)s::float8) AS now) AS t
WHERE j.queue = %(q)s AND (j.state < 3 OR j.expires_at > t.now)
