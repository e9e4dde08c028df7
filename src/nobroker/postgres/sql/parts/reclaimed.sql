-- Expired leases taken back, 100 at most per statement: each was an attempt,
-- so the job is pending again after its backoff (waiting, -1), or dead if it
-- was the last. Needs the CTE `t` (the acting time).
--
-- The deadline is compared with a scalar subquery, not with a join to t: an
-- InitPlan's value bounds the scan of jobs_leases (an Index Cond), so a lease
-- reads the expired leases only; as a join filter it read every leased row of
-- the queue, on every lease (10,000 held: 4.7 ms a lease).
--
-- The backoff is BackoffPolicy.delay with the policy's numbers bound
-- (statements.backoff_params): from the exponent `backoff_cap` on (the first
-- whose delay reaches the maximum, or overflows) the maximum, as in Python;
-- below it, base * factor ** n exactly; then the jitter (0: none).
expired AS (
    SELECT j.id FROM {schema}.jobs AS j
    WHERE j.queue = %(q)s AND j.state = 1 AND j.lease_until <= (SELECT now FROM t)
    ORDER BY j.lease_until LIMIT 100 FOR UPDATE OF j SKIP LOCKED),
reclaimed AS (
    UPDATE {schema}.jobs AS j SET
        state = CASE WHEN j.attempts >= j.max_attempts THEN 2 ELSE -1 END,
        available_at = CASE WHEN j.attempts >= j.max_attempts THEN j.available_at
                       ELSE t.now + (
                           CASE WHEN greatest(j.attempts - 1, 0) >= %(backoff_cap)s::integer
                                THEN %(backoff_max)s::float8
                                ELSE least(%(backoff_max)s::float8, %(backoff_base)s::float8
                                           * power(%(backoff_factor)s::float8,
                                                   greatest(j.attempts - 1, 0))) END
                           * (1.0 - %(backoff_jitter)s::float8 * random())) END,
        finished_at = CASE WHEN j.attempts >= j.max_attempts THEN t.now END,
        last_error = 'lease expired (attempt ' || j.attempts || ')',
        token = NULL, lease_until = NULL
    FROM expired, t WHERE j.queue = %(q)s AND j.id = expired.id
    RETURNING j.id, j.state, j.dependents)
