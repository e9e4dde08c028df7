-- A live job (waiting, ready or leased) cancelled, kept `ttl` seconds. Its
-- state before is read under the row's lock (a lease committed meanwhile is
-- seen): the UPDATE's RETURNING has only the new one.
WITH live AS (
    SELECT j.id, j.state FROM {schema}.jobs AS j
    WHERE j.queue = %(q)s AND j.id = %(id)s AND j.state IN (-1, 0, 1)
    FOR UPDATE),
cancelled AS (
    UPDATE {schema}.jobs AS j SET state = 4, finished_at = t.now, token = NULL,
        lease_until = NULL, expires_at = t.now + %(ttl)s::float8
    FROM live, (SELECT {schema}.nb_now(%(t)s::float8) AS now) AS t
    WHERE j.queue = %(q)s AND j.id = live.id
    RETURNING j.id, live.state),
finishing AS (SELECT cancelled.id FROM cancelled),
tally AS MATERIALIZED (
    SELECT c0.p, c0.d, c0.f, c0.k,
           (SELECT {schema}.nb_finished(%(q)s, array_agg(f.id)) FROM finishing AS f
            HAVING count(*) > 0) AS told
    FROM (SELECT -count(*) AS p, 0 AS d, 0 AS f, count(*) AS k FROM cancelled) AS c0),
{counted}
SELECT id FROM cancelled
