-- The jobs a limited lease chose (ids, postgres/limited.py) leased, as lease.sql
-- leases its candidates: those still waiting or ready; a row another lease
-- holds is skipped. Run under the lock on the queue's row (limited_lock.sql).
WITH t AS (SELECT {schema}.nb_now(%(t)s::float8) AS now),
{reclaimed},
due AS (
    SELECT j.id, j.priority, j.seq FROM {schema}.jobs AS j
    WHERE j.queue = %(q)s AND j.id = ANY(%(ids)s::text[]) AND j.state = -1
    FOR UPDATE OF j SKIP LOCKED),
ready AS (
    SELECT j.id, j.priority, j.seq FROM {schema}.jobs AS j
    WHERE j.queue = %(q)s AND j.id = ANY(%(ids)s::text[]) AND j.state = 0
    FOR UPDATE OF j SKIP LOCKED),
{lease_tail}
