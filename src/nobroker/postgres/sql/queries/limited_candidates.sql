-- The best n jobs due now of each pair of keys (rate key, concurrency key; ''
-- for none) that an idle limited worker's wait considers (postgres/limited.py:
-- when does a job next become leasable), each with its concurrency key's
-- holders (NULL for none; index jobs_held, whose predicate `conc_key <> ''` the
-- count states): the unlimited pair ('', ''), then the unparked rows of
-- limit_pairs (migrations/0014, index limit_pairs_open). A parked pair's key
-- was found full by a walk, which skips it until a freed slot unparks it, and
-- that ack wakes the idle workers (NOTIFY): it has no time of its own to wait
-- for, so its backlog costs the wait nothing (it stepped through every pair
-- with pending jobs in index jobs_limited before, parked or not: O(keys) a
-- wait). A pair whose rate key is in full_rates (a window the caller found
-- full: it waits for its opening) or concurrency key in full_conc is never
-- read. A job waiting for prerequisites (-2) is never a candidate: it would
-- take a place that a ready job of its pair could have.
WITH t AS (SELECT {schema}.nb_now(%(t)s::float8) AS now),
pairs AS (
    SELECT ''::text AS rk, ''::text AS ck
    UNION ALL
    SELECT p.rate_key, p.conc_key FROM {schema}.limit_pairs AS p
    WHERE p.queue = %(q)s AND NOT p.parked AND p.rate_key <> ALL(%(full_rates)s::text[]))
SELECT c.id, c.priority, c.seq, p.rk, p.ck, CASE WHEN p.ck <> '' THEN (
           SELECT count(*) FROM {schema}.jobs AS h
           WHERE h.queue = %(q)s AND h.state = 1 AND h.conc_key = p.ck
             AND h.conc_key <> '') END
FROM pairs AS p, t, LATERAL (
    SELECT j.id, j.priority, j.seq FROM {schema}.jobs AS j
    WHERE j.queue = %(q)s AND j.state <= 0 AND j.rate_key = p.rk AND j.conc_key = p.ck
      AND j.state <> -2 AND j.available_at <= t.now AND p.ck <> ALL(%(full_conc)s::text[])
    ORDER BY j.priority DESC, j.seq LIMIT %(n)s) AS c
