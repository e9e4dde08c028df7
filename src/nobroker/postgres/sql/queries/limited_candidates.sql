-- The best n jobs due now of each pair of keys (rate key, concurrency key; ''
-- for none, the unlimited jobs being one pair) that is not saturated. The
-- pairs are found by stepping through the index jobs_limited (one probe per
-- pair), and a pair whose rate key is in full_rates or concurrency key in
-- full_conc is never read: its backlog costs a lease nothing. A job waiting
-- for prerequisites (-2) is in the index, never a candidate: it would take
-- a place that a ready job of its pair could have.
WITH RECURSIVE t AS (SELECT {schema}.nb_now(%(t)s::float8) AS now),
pairs AS (
    (SELECT j.rate_key AS rk, j.conc_key AS ck FROM {schema}.jobs AS j
     WHERE j.queue = %(q)s AND j.state <= 0 ORDER BY j.rate_key, j.conc_key LIMIT 1)
    UNION ALL
    SELECT n.rk, n.ck FROM pairs AS p, LATERAL (
        SELECT j.rate_key, j.conc_key FROM {schema}.jobs AS j
        WHERE j.queue = %(q)s AND j.state <= 0 AND (j.rate_key, j.conc_key) > (p.rk, p.ck)
        ORDER BY j.rate_key, j.conc_key LIMIT 1) AS n(rk, ck))
SELECT c.id, c.priority, c.seq, p.rk, p.ck FROM pairs AS p, t, LATERAL (
    SELECT j.id, j.priority, j.seq FROM {schema}.jobs AS j
    WHERE j.queue = %(q)s AND j.state <= 0 AND j.rate_key = p.rk AND j.conc_key = p.ck
      AND j.state <> -2 AND j.available_at <= t.now
      AND p.rk <> ALL(%(full_rates)s::text[]) AND p.ck <> ALL(%(full_conc)s::text[])
    ORDER BY j.priority DESC, j.seq LIMIT %(n)s) AS c
