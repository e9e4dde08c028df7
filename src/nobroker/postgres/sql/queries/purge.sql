-- Every pending job (waiting or ready) deleted; leased ones stay. A waiter for
-- a deleted job learns it is gone.
WITH gone AS (
    DELETE FROM {schema}.jobs WHERE queue = %(q)s AND state <= 0
    RETURNING id),
finishing AS (SELECT gone.id FROM gone),
tally AS MATERIALIZED (
    SELECT c0.p, c0.d, c0.f, c0.k,
           (SELECT {schema}.nb_finished(%(q)s, array_agg(f.id)) FROM finishing AS f
            HAVING count(*) > 0) AS told
    FROM (SELECT -count(*) AS p, 0 AS d, 0 AS f, 0 AS k FROM gone) AS c0),
{counted}
SELECT count(*) FROM gone
