-- What a lease may take: the best ready rows, and the waiting rows now due (by
-- due time, 100 at most, the deadline bounding the index scan as in
-- reclaimed.sql). Needs the CTE `t`.
due AS (
    SELECT j.id, j.priority, j.seq FROM {schema}.jobs AS j
    WHERE j.queue = %(q)s AND j.state = -1
      AND j.available_at <= (SELECT now FROM t)
    ORDER BY j.available_at LIMIT 100 FOR UPDATE OF j SKIP LOCKED),
ready AS (
    SELECT j.id, j.priority, j.seq FROM {schema}.jobs AS j, t
    WHERE j.queue = %(q)s AND j.state = 0 AND j.available_at <= t.now
    ORDER BY j.priority DESC, j.seq LIMIT %(n)s FOR UPDATE OF j SKIP LOCKED)
