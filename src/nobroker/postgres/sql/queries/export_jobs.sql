-- Every pending, leased, dead and waiting job (nobroker migrate), in enqueue
-- order: each row with what it waits for, and its key flag.
SELECT {job_columns}, {waiting_for}, j.keyed
FROM {schema}.jobs AS j
WHERE j.queue = %(q)s AND j.state BETWEEN -2 AND 2
ORDER BY j.seq
