-- Leased jobs acked without results: the ids of those whose lease was current
-- (the caller rolls back unless all were). Their waiting dependents are
-- settled in the same statement (parts/settled.sql), and a freed concurrency
-- slot wakes the idle workers.
-- The row is found by its key: `state + 0` (parts/acked.sql says why).
WITH acked AS (
    UPDATE {schema}.jobs AS j SET
        state = 3, finished_at = t.now, available_at = t.now, token = NULL,
        lease_until = NULL,
        expires_at = t.now + CASE WHEN j.keyed THEN %(kr)s::float8 ELSE %(ur)s::float8 END
    FROM unnest(%(ids)s::text[], %(toks)s::bigint[]) AS a(id, tok),
         (SELECT {schema}.nb_now(%(t)s::float8) AS now) AS t
    WHERE j.queue = %(q)s AND j.id = a.id AND j.state + 0 = 1 AND j.token = a.tok
    RETURNING j.id, j.dependents, j.conc_key <> '' AS held),
finishing AS (SELECT acked.id, 3 AS st, acked.dependents FROM acked),
{settled},
tally AS MATERIALIZED (
    SELECT c0.p - settled.n AS p, c0.d, c0.f, c0.k + settled.n AS k,
           CASE WHEN c0.w0 > 0 THEN pg_notify({schema}.nb_channel('r', %(q)s), '')::text
           END AS woke
    FROM (SELECT -count(*) AS p, 0 AS d, count(*) AS f, 0 AS k,
                 count(*) FILTER (WHERE acked.held) AS w0 FROM acked) AS c0,
         settled),
{counted}
SELECT id FROM acked
