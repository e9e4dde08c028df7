-- Finished rows past their retention deleted, 1,000 at most, a dormant
-- cancelled job's `dormant` rows with it (migrations/0007); how many.
WITH gone AS (
    DELETE FROM {schema}.jobs AS d USING (
        SELECT j.id
        FROM {schema}.jobs AS j, (SELECT {schema}.nb_now(%(t)s::float8) AS now) AS t
        WHERE j.queue = %(q)s AND j.state >= 3 AND j.expires_at <= t.now
        LIMIT 1000 FOR UPDATE OF j SKIP LOCKED) AS old
    WHERE d.queue = %(q)s AND d.id = old.id
    RETURNING d.id, d.state, {schema}.nb_kept(d.state, d.result) AS kept),
unwatched AS (
    DELETE FROM {schema}.dormant AS o USING gone
    WHERE o.queue = %(q)s AND o.dependent = gone.id AND gone.state = 4),
tally AS MATERIALIZED (
    SELECT c0.p, c0.d, c0.f, c0.k
    FROM (SELECT 0 AS p, 0 AS d, 0 AS f, -count(*) FILTER (WHERE gone.kept) AS k
          FROM gone) AS c0),
{counted}
SELECT count(*) FROM gone
