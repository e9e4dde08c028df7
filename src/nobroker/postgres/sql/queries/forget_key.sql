-- An expired finished row frees its key; a cancelled one frees it at once, and
-- its `dormant` rows go with it (migrations/0007).
WITH gone AS (
    DELETE FROM {schema}.jobs AS j USING (SELECT {schema}.nb_now(%(t)s::float8) AS now) AS t
    WHERE j.queue = %(q)s AND j.id = %(id)s AND j.state >= 3
      AND (j.expires_at <= t.now OR j.state = 4)
    RETURNING j.id, j.state, {schema}.nb_kept(j.state, j.result) AS kept),
unwatched AS (
    DELETE FROM {schema}.dormant AS o USING gone
    WHERE o.queue = %(q)s AND o.dependent = gone.id AND gone.state = 4),
tally AS MATERIALIZED (
    SELECT c0.p, c0.d, c0.f, c0.k
    FROM (SELECT 0 AS p, 0 AS d, 0 AS f, -count(*) FILTER (WHERE gone.kept) AS k
          FROM gone) AS c0),
{counted}
SELECT count(*) FROM gone
