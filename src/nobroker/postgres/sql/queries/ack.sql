-- One leased job acked (parts/acked.sql); no row if the lease is not current.
-- Its waiting dependents are settled in the same statement (parts/settled.sql),
-- and a slot of a concurrency key it frees wakes the idle workers.
WITH t AS (SELECT {schema}.nb_now(%(t)s::float8) AS now),
{acked},
finishing AS (SELECT acked.id, 3 AS st, acked.dependents FROM acked),
{settled},
tally AS MATERIALIZED (
    SELECT c0.p - settled.n AS p, c0.d, c0.f, c0.k + settled.n AS k,
           CASE WHEN c0.w0 > 0 THEN pg_notify({schema}.nb_channel('r', %(q)s), '')::text
           END AS woke
    FROM (SELECT -count(*) AS p, 0 AS d, count(*) AS f,
                 count(*) FILTER (WHERE acked.kept) AS k,
                 count(*) FILTER (WHERE acked.ck <> '') AS w0
          FROM acked) AS c0, settled),
{counted}
SELECT id FROM acked
