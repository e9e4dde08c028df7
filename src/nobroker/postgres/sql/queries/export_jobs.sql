-- Every pending, leased, dead and waiting job (nobroker migrate), in enqueue
-- order: each row with what it waits for, its key flag, its limit keys
-- (migrations/0006) and the concurrency cap stored with them (0008).
SELECT {job_columns}, {waiting_for}, j.keyed, j.rate_key, j.conc_key, j.conc_cap
FROM {schema}.jobs AS j
WHERE j.queue = %(q)s AND j.state BETWEEN -2 AND 2
ORDER BY j.seq
