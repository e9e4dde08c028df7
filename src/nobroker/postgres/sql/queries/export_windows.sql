-- Every rate key's window (migrations/0008: a ring of `size` slots, NULL until
-- laid out) with its starts, oldest first, for nobroker migrate; read by
-- import_windows under lock_windows's lock, to merge a copy into.
SELECT w.key, w.size, ARRAY(SELECT s.at FROM {schema}.limit_starts AS s
                            WHERE s.queue = w.queue AND s.key = w.key ORDER BY s.at)
FROM {schema}.limit_windows AS w
WHERE w.queue = %(q)s AND (%(keys)s::text[] IS NULL OR w.key = ANY(%(keys)s::text[]))
ORDER BY w.key
