-- Version 12: nb_limited_lease_unrated, the limited lease of a process that
-- declared concurrency limits and no rate limit (queries/unrated_lease.sql and
-- unrated_ack_and_lease.sql, which such a process sends: postgres/limited.py;
-- with a rate limit, nb_limited_lease as before). A lease of one job (every
-- ack_and_lease's) takes the same lock on the queue's row, then tries the best
-- due job alone in one small statement: its concurrency key's holders counted
-- (index jobs_held), the row leased if the key has room; else, or for more than
-- one job, nb_limited_lease (migrations/0010), which takes the lock again (held
-- already: no wait) and chooses as before. The same choice as nb_limited_lease's
-- first try, without its rate windows: that statement's CTEs for windows and
-- starts (empty here) made a concurrency-limited ack_and_lease cost 1.3x an
-- unlimited one with fsync off (server time 470 us against 305 us, this
-- function's 326 us, pg_stat_statements, loaded 2-core machine), though each of
-- them read or wrote nothing: the time went to the statement's size, not its work.
CREATE FUNCTION {schema}.nb_limited_lease_unrated(
    q text, n integer, vt float8, given float8, freed text[], families text[], caps integer[])
RETURNS SETOF {schema}.jobs LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    now_ float8;
BEGIN
    IF n = 1 THEN
        IF (SELECT qs.paused FROM {schema}.queues AS qs WHERE qs.name = q
            FOR NO KEY UPDATE) THEN
            RETURN;
        END IF;
        now_ := coalesce(given, extract(epoch FROM clock_timestamp())::float8);
        -- The best due job (none while a waiting job is due: the walk orders those),
        -- leased if its key has room: the cap of the first declared family that
        -- names it, less its holders but the slots this statement freed (`freed`).
        -- A row locked meanwhile (an unlimited process's lease) is left to the walk.
        RETURN QUERY
        WITH cand AS MATERIALIZED (
            SELECT j.id, j.ctid AS at, j.conc_key AS ck FROM {schema}.jobs AS j
            WHERE j.queue = q AND j.state = 0 AND j.available_at <= now_
              AND NOT EXISTS (SELECT 1 FROM {schema}.jobs AS w
                              WHERE w.queue = q AND w.state = -1 AND w.available_at <= now_)
            ORDER BY j.priority DESC, j.seq LIMIT 1)
        UPDATE {schema}.jobs AS j SET state = 1, attempts = j.attempts + 1,
            token = nextval('{schema}.lease_token'), lease_until = now_ + vt
        WHERE j.ctid = (
            SELECT l.ctid FROM cand, {schema}.jobs AS l
            WHERE l.ctid = cand.at AND l.queue = q AND l.id = cand.id AND l.state = 0
              AND (cand.ck = '' OR coalesce(
                  (SELECT u.cap FROM unnest(families, caps) WITH ORDINALITY AS u(f, cap, o)
                   WHERE cand.ck = u.f OR starts_with(cand.ck, u.f || '\0')
                   ORDER BY u.o LIMIT 1) - (
                  SELECT count(*) FROM {schema}.jobs AS h
                  WHERE h.queue = q AND h.state = 1 AND h.conc_key = cand.ck
                    AND h.conc_key <> '' AND h.id <> ALL(freed)), 1) > 0)
            FOR UPDATE OF l SKIP LOCKED)
        RETURNING j.*;
        IF FOUND THEN
            RETURN;
        END IF;
    END IF;
    -- The walk, with no rate key declared (it takes the lock again: held, no wait).
    RETURN QUERY SELECT * FROM {schema}.nb_limited_lease(q, n, vt, given, freed, '{}', '{}',
        '{}', '{}', families, caps);
END $$;

-- nb_lease_next's lease query (migrations/0011) on the plan it would keep. A
-- plpgsql statement with parameters is planned for its values 5 times, then kept
-- on a generic plan unless that plan's estimate is dearer than theirs; its
-- `LIMIT n` is unknown to a generic plan, estimated at a tenth of the ready rows,
-- so once the jobs table had statistics counting many ready rows (an ANALYZE or
-- autovacuum run right after a large enqueue) the query was planned again on
-- every call: as many plans as calls in pg_stat_statements (track = all), about
-- 350 us of planning each on a ~80 us query, and an unlimited ack_and_lease's
-- server time 726-743 us against 289-303 us with this setting (2,000 calls,
-- loaded 2-core machine). The generic plan is the index plan (jobs_ready,
-- jobs_waiting, the primary key) on an empty table, on 20,000 un-analyzed rows
-- (where a custom plan read all of them through jobs_due: 17 ms) and once
-- analyzed. The setting costs under 1 us a call (its save and restore).
ALTER FUNCTION {schema}.nb_lease_next(text, integer, float8, float8, boolean)
    SET plan_cache_mode = force_generic_plan;
