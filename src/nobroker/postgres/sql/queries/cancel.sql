-- A live job (waiting for prerequisites or its time, ready or leased) cancelled,
-- kept `ttl` seconds, and its dependents settled (parts/settled.sql). Its
-- state before is read under the row's lock (a lease committed meanwhile is
-- seen): the UPDATE's RETURNING has only the new one.
WITH live AS (
    SELECT j.id, j.state, j.dependents FROM {schema}.jobs AS j
    WHERE j.queue = %(q)s AND j.id = %(id)s AND j.state IN (-2, -1, 0, 1)
    FOR UPDATE),
cancelled AS (
    UPDATE {schema}.jobs AS j SET state = 4, finished_at = t.now, token = NULL,
        lease_until = NULL, expires_at = t.now + %(ttl)s::float8
    FROM live, (SELECT {schema}.nb_now(%(t)s::float8) AS now) AS t
    WHERE j.queue = %(q)s AND j.id = live.id
    RETURNING j.id, live.state),
finishing AS (
    SELECT live.id, 4 AS st, live.dependents OR live.state = -2 AS dependents
    FROM live JOIN cancelled USING (id)),
{settled},
tally AS MATERIALIZED (
    SELECT c0.p - settled.n AS p, c0.d, c0.f, c0.k + settled.n AS k
    FROM (SELECT -count(*) AS p, 0 AS d, 0 AS f, count(*) AS k FROM cancelled) AS c0,
         settled),
{counted}
SELECT id FROM cancelled
