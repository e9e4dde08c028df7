-- One leased job acked (parts/acked.sql); no row if the lease is not current.
-- Its waiting dependents are settled in the same statement (parts/settled.sql).
WITH t AS (SELECT {schema}.nb_now(%(t)s::float8) AS now),
{acked},
finishing AS (SELECT acked.id, 3 AS st, acked.dependents FROM acked),
{settled},
tally AS MATERIALIZED (
    SELECT c0.p - settled.n AS p, c0.d, c0.f, c0.k + settled.n AS k
    FROM (SELECT -count(*) AS p, 0 AS d, count(*) AS f,
                 count(*) FILTER (WHERE acked.kept) AS k
          FROM acked) AS c0, settled),
{counted}
SELECT id FROM acked
