-- Version 11: a keyed job's result is gone at its result_ttl, while its row (its
-- key) is kept for key_retention, when that is longer, so that the key still
-- deduplicates (the file engine's ACK "rkeep", memory://'s result_until). The ack
-- (parts/acked.sql) sets `result_until` then; NULL: the result lasts as long as
-- the row. get.sql and list_jobs.sql show no result from then on; the sweep
-- clears it then, and deletes the row at expires_at, as before. Additive: a
-- nullable column, no rewrite of the table, and an index of the rows it is set on.
ALTER TABLE {schema}.jobs ADD COLUMN result_until float8;
-- The results a sweep clears at result_until (queries/sweep.sql), so that
-- stats().kept no longer counts a row kept without its outcome, and those
-- stats() subtracts until a sweep has (queries/stats.sql).
CREATE INDEX jobs_results ON {schema}.jobs (queue, result_until)
    WHERE result_until IS NOT NULL;

-- The lease of ack_and_lease.sql, moved out of its statement into a function
-- that the statement calls once its ack has settled the acked job's dependents
-- (nb_finish, parts/settled.sql): its queries run after that, so a chain step
-- the ack released is one more candidate for this lease, as on files and
-- memory:// (a chain of N steps is N statements, not 2N; issue 22), where the
-- statement's own CTEs, reading its snapshot, could not see the release. The
-- same choice as parts/candidates.sql, readied.sql and leased.sql make: the
-- best ready rows and the due waiting ones (100 at most), highest priority
-- first, then oldest; the due rows not taken made ready; nothing while the queue
-- is paused, or unless `acked` (a stale ack leases nothing).
CREATE FUNCTION {schema}.nb_lease_next(q text, n integer, vt float8, given float8,
                                       acked boolean)
RETURNS SETOF {schema}.jobs LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    now_ float8 := {schema}.nb_now(given);
BEGIN
    IF NOT acked OR EXISTS (SELECT 1 FROM {schema}.queues WHERE name = q AND paused) THEN
        RETURN;
    END IF;
    RETURN QUERY
    WITH due AS (
        SELECT j.id, j.priority, j.seq FROM {schema}.jobs AS j
        WHERE j.queue = q AND j.state = -1 AND j.available_at <= now_
        ORDER BY j.available_at LIMIT 100 FOR UPDATE OF j SKIP LOCKED),
    ready AS (
        SELECT j.id, j.priority, j.seq FROM {schema}.jobs AS j
        WHERE j.queue = q AND j.state = 0 AND j.available_at <= now_
        ORDER BY j.priority DESC, j.seq LIMIT n FOR UPDATE OF j SKIP LOCKED),
    picked AS (
        SELECT c.id FROM (SELECT * FROM ready UNION ALL SELECT * FROM due) AS c
        ORDER BY c.priority DESC, c.seq LIMIT n),
    readied AS (
        UPDATE {schema}.jobs AS j SET state = 0 FROM due
        WHERE j.queue = q AND j.id = due.id AND due.id NOT IN (SELECT id FROM picked))
    UPDATE {schema}.jobs AS j SET state = 1, attempts = j.attempts + 1,
        token = nextval('{schema}.lease_token'), lease_until = now_ + vt
    FROM picked WHERE j.queue = q AND j.id = picked.id
    RETURNING j.*;
END $$;
