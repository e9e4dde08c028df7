-- Every pending job (delayed or ready) deleted; leased ones stay, and so do
-- jobs waiting for prerequisites. A waiter for a deleted job learns it is
-- gone; its dependents are settled as a cancelled job's (parts/settled.sql).
WITH gone AS (
    DELETE FROM {schema}.jobs WHERE queue = %(q)s AND state IN (-1, 0)
    RETURNING id, dependents),
finishing AS (SELECT gone.id, 4 AS st, gone.dependents FROM gone),
{settled},
tally AS MATERIALIZED (
    SELECT c0.p - settled.n AS p, c0.d, c0.f, c0.k + settled.n AS k
    FROM (SELECT -count(*) AS p, 0 AS d, 0 AS f, 0 AS k FROM gone) AS c0, settled),
{counted}
SELECT count(*) FROM gone
