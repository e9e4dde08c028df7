-- The rate keys' windows a limited lease changed (keys, and starts as array
-- literals), written under its lock (limited_lock.sql).
INSERT INTO {schema}.limit_windows AS w (queue, key, starts)
SELECT %(q)s, u.k, u.s::float8[] FROM unnest(%(keys)s::text[], %(starts)s::text[]) AS u(k, s)
ON CONFLICT (queue, key) DO UPDATE SET starts = excluded.starts
