-- Rate windows copied from another queue (nobroker migrate), merged with this
-- queue's in Python (postgres/copying.py) and laid out as a lease lays a ring out
-- again (migrations/0010): starts oldest first in slots 0 .. n-1 of `size`,
-- `next` = n mod size, `last` the latest. Each key's slots from n on go, those
-- below n are written over or added (disjoint rows: one statement).
WITH w AS (
    SELECT u.key, u.size, u.n, u.last
    FROM unnest(%(keys)s::text[], %(sizes)s::integer[], %(ns)s::integer[],
                %(lasts)s::float8[]) AS u(key, size, n, last)),
gone AS (
    DELETE FROM {schema}.limit_starts AS s USING w
    WHERE s.queue = %(q)s AND s.key = w.key AND s.slot >= w.n),
put AS (
    INSERT INTO {schema}.limit_starts AS s (queue, key, slot, at)
    SELECT %(q)s, u.key, u.slot, u.at
    FROM unnest(%(s_keys)s::text[], %(s_slots)s::integer[], %(s_ats)s::float8[])
         AS u(key, slot, at)
    ON CONFLICT (queue, key, slot) DO UPDATE SET at = excluded.at)
INSERT INTO {schema}.limit_windows AS lw (queue, key, starts, size, next, last)
SELECT %(q)s, w.key, '{}', w.size, mod(w.n, w.size), w.last FROM w
ON CONFLICT (queue, key) DO UPDATE SET size = excluded.size, next = excluded.next,
                                       last = excluded.last
