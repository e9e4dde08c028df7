-- Version 13: nb_limited_lease_rated, the limited lease of a process that
-- declared a rate limit (queries/limited_lease.sql, limited_ack_and_lease.sql,
-- which called nb_limited_lease: postgres/limited.py). As
-- nb_limited_lease_unrated (migrations/0012) does for concurrency limits, a
-- lease of one job takes the lock on the queue's row, then tries the best due
-- job alone in one statement, smaller than nb_limited_lease's first try
-- (migrations/0010): the one rate window its start counts in (the queue's own,
-- or its rate key's) read and checked as limits.Window.room does (the C-th
-- latest start, ring slot next - C, none or a period old), its concurrency key's
-- holders counted, the row leased, its ring slot written (INSERT while the ring
-- grows, UPDATE once it wraps) and its window's `next` and `last`. It leaves to
-- nb_limited_lease (which takes the lock again: held, no wait) a job whose
-- start counts in two windows (the queue's own and its key's), a window not
-- written yet or laid out smaller than declared, a full window or key, a
-- latest start after this lease's time (a clock stepped back), a waiting job
-- due, and more than one job wanted.
--
-- Why: setting a statement's plan up costs the server about half what running
-- it does. Profiled (perf, fsync on), about a fifth of a server process's time
-- leasing was the executor's start (standard_ExecutorStart: ExecInitNode, the
-- indexes each written table opens), which pg_stat_statements does not count in
-- a statement's time; the first try of nb_limited_lease set up a plan for two
-- windows, an upsert of a window not written yet and the `t` CTE of their
-- latest starts, whatever it ran. A rate-limited ack_and_lease's server time
-- over an unlimited one's (pg_stat_statements, top-level means, 2,500 calls a
-- side, alternated runs on a loaded 2-core machine): 1.50x-1.81x on main (8
-- runs), 1.27x-1.45x with this function (11 runs); both limits 1.55x-1.98x,
-- 1.36x-1.59x.
CREATE FUNCTION {schema}.nb_limited_lease_rated(
    q text, n integer, vt float8, given float8, freed text[],
    rate_keys text[], rate_stored text[], rate_counts integer[], rate_periods float8[],
    families text[], caps integer[])
RETURNS SETOF {schema}.jobs LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    now_ float8;
    own integer := array_position(rate_keys, '');
BEGIN
    IF n = 1 THEN
        IF (SELECT qs.paused FROM {schema}.queues AS qs WHERE qs.name = q
            FOR NO KEY UPDATE) THEN
            RETURN;
        END IF;
        now_ := coalesce(given, extract(epoch FROM clock_timestamp())::float8);
        -- cand: the best due job (none while a waiting job is due), `k` the window
        -- its start counts in (`two`: two of them, left to the walk). win: that
        -- window if laid out as declared and not ahead of now_, with its row and
        -- whether its C-th latest start is within the period (`full_`), each ring
        -- slot by its key (a scalar subquery: as a join, the slot's computed
        -- number was a filter over every slot of the key, not an index key).
        RETURN QUERY
        WITH cand AS MATERIALIZED (
            SELECT j.id, j.ctid AS at, j.conc_key AS ck, own IS NOT NULL AND j.rate_key <> ''
                       AND j.rate_key = ANY(rate_stored) AS two,
                   coalesce(own, CASE WHEN j.rate_key <> ''
                                      THEN array_position(rate_stored, j.rate_key) END) AS k
            FROM {schema}.jobs AS j
            WHERE j.queue = q AND j.state = 0 AND j.available_at <= now_
              AND NOT EXISTS (SELECT 1 FROM {schema}.jobs AS w
                              WHERE w.queue = q AND w.state = -1 AND w.available_at <= now_)
            ORDER BY j.priority DESC, j.seq LIMIT 1),
        win AS MATERIALIZED (
            SELECT lw.ctid AS w_at, lw.key, lw.size, lw.next,
                   (SELECT s.ctid FROM {schema}.limit_starts AS s
                    WHERE s.queue = q AND s.key = lw.key AND s.slot = lw.next) AS s_at,
                   (SELECT s.at FROM {schema}.limit_starts AS s
                    WHERE s.queue = q AND s.key = lw.key
                      AND s.slot = (lw.next - rate_counts[cand.k] + lw.size) % lw.size
                   ) > now_ - rate_periods[cand.k] AS full_
            FROM cand, {schema}.limit_windows AS lw
            WHERE lw.queue = q AND lw.key = rate_keys[cand.k]
              AND lw.size >= rate_counts[cand.k] AND lw.last <= now_),
        up AS (
            UPDATE {schema}.jobs AS j SET state = 1, attempts = j.attempts + 1,
                token = nextval('{schema}.lease_token'), lease_until = now_ + vt
            WHERE j.ctid = (
                SELECT l.ctid FROM cand, {schema}.jobs AS l
                WHERE l.ctid = cand.at AND l.queue = q AND l.id = cand.id AND l.state = 0
                  AND NOT cand.two
                  AND (cand.k IS NULL OR EXISTS (SELECT 1 FROM win WHERE win.full_ IS NOT TRUE))
                  AND (cand.ck = '' OR coalesce(
                      (SELECT u.cap FROM unnest(families, caps) WITH ORDINALITY AS u(f, cap, o)
                       WHERE cand.ck = u.f OR starts_with(cand.ck, u.f || '\0')
                       ORDER BY u.o LIMIT 1) - (
                      SELECT count(*) FROM {schema}.jobs AS h
                      WHERE h.queue = q AND h.state = 1 AND h.conc_key = cand.ck
                        AND h.conc_key <> '' AND h.id <> ALL(freed)), 1) > 0)
                FOR UPDATE OF l SKIP LOCKED)
            RETURNING j.*),
        -- The start: ring slot `next` overwritten if written, else inserted, and the
        -- window's `next` and `last`, each row found by the version read after the
        -- lock (ctid: a TID scan; plain UPDATEs, no upsert's row lock, as in 0010).
        started AS (
            UPDATE {schema}.limit_starts AS s SET at = now_
            WHERE s.ctid = (SELECT win.s_at FROM win) AND EXISTS (SELECT 1 FROM up)),
        started_first AS (
            INSERT INTO {schema}.limit_starts (queue, key, slot, at)
            SELECT q, win.key, win.next, now_ FROM win
            WHERE win.s_at IS NULL AND EXISTS (SELECT 1 FROM up)),
        windows AS (
            UPDATE {schema}.limit_windows AS lw SET next = (win.next + 1) % win.size, last = now_
            FROM win WHERE lw.ctid = (SELECT win.w_at FROM win) AND EXISTS (SELECT 1 FROM up))
        SELECT * FROM up;
        IF FOUND THEN
            RETURN;
        END IF;
    END IF;
    -- The walk, for anything else (it takes the lock again: held, no wait).
    RETURN QUERY SELECT * FROM {schema}.nb_limited_lease(q, n, vt, given, freed, rate_keys,
        rate_stored, rate_counts, rate_periods, families, caps);
END $$;
