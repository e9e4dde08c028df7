-- The leased job (id, token) acked: done, with its result if any, kept until
-- expires_at (kr: a keyed job's retention, ur: an unkeyed one's), the result
-- shown until result_until (rt: its ttl when the key's is longer, else NULL:
-- as long as the row; migrations/0011). Needs `t`.
-- `ck`: the concurrency key whose slot it held ('' none), which its ack frees.
-- `state + 0 = 1`, not `state = 1`: the row is found by its key (jobs_pkey); with
-- `state = 1` the planner may take the partial index jobs_leases instead (by
-- queue: every leased job read, hundreds with prefetching workers) whenever its
-- statistics say few jobs are leased. nack, snooze, extend, write_notes and
-- ack_many find their leased job the same way.
acked AS (
    UPDATE {schema}.jobs AS j SET
        state = 3, finished_at = t.now, available_at = t.now, token = NULL,
        lease_until = NULL,
        expires_at = t.now + CASE WHEN j.keyed THEN %(kr)s ELSE %(ur)s END,
        result = %(r)s::text, result_until = t.now + %(rt)s
    FROM t
    WHERE j.queue = %(q)s AND j.id = %(id)s AND j.state + 0 = 1
      AND j.token = %(tok)s
    RETURNING j.id, j.result IS NOT NULL AS kept, j.dependents, j.conc_key AS ck)
