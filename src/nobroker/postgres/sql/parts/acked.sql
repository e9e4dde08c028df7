-- The leased job (id, token) acked: done, with its result if any, kept until
-- expires_at (kr: a keyed job's retention, ur: an unkeyed one's), the result
-- shown until result_until (rt: its ttl when the key's is longer, else NULL:
-- as long as the row; migrations/0011). Needs `t`.
-- `ck`: the concurrency key whose slot it held ('' none), which its ack frees.
acked AS (
    UPDATE {schema}.jobs AS j SET
        state = 3, finished_at = t.now, available_at = t.now, token = NULL,
        lease_until = NULL,
        expires_at = t.now + CASE WHEN j.keyed THEN %(kr)s ELSE %(ur)s END,
        result = %(r)s::text, result_until = t.now + %(rt)s
    FROM t
    WHERE j.queue = %(q)s AND j.id = %(id)s AND j.state = 1
      AND j.token = %(tok)s
    RETURNING j.id, j.result IS NOT NULL AS kept, j.dependents, j.conc_key AS ck)
