-- Finished rows past their retention deleted, 1,000 at most, a dormant
-- cancelled job's `dormant` rows with it (migrations/0007); and, 1,000 at
-- most, the results past their result_until (a keyed job's, whose row stays
-- till expires_at) cleared, so the row is kept without an outcome from then
-- on (migrations/0011); how many of both.
WITH t AS (SELECT {schema}.nb_now(%(t)s::float8) AS now),
gone AS (
    DELETE FROM {schema}.jobs AS d USING (
        SELECT j.id
        FROM {schema}.jobs AS j, t
        WHERE j.queue = %(q)s AND j.state >= 3 AND j.expires_at <= t.now
        LIMIT 1000 FOR UPDATE OF j SKIP LOCKED) AS old
    WHERE d.queue = %(q)s AND d.id = old.id
    RETURNING d.id, d.state, {schema}.nb_kept(d.state, d.result) AS kept),
faded AS (
    UPDATE {schema}.jobs AS r SET result = NULL, result_until = NULL FROM (
        SELECT j.id
        FROM {schema}.jobs AS j, t
        WHERE j.queue = %(q)s AND j.result_until <= t.now AND j.expires_at > t.now
        LIMIT 1000 FOR UPDATE OF j SKIP LOCKED) AS old
    WHERE r.queue = %(q)s AND r.id = old.id
    RETURNING r.id),
unwatched AS (
    DELETE FROM {schema}.dormant AS o USING gone
    WHERE o.queue = %(q)s AND o.dependent = gone.id AND gone.state = 4),
tally AS MATERIALIZED (
    SELECT c0.p, c0.d, c0.f, c0.k
    FROM (SELECT 0 AS p, 0 AS d, 0 AS f,
                 -count(*) FILTER (WHERE gone.kept) - (SELECT count(*) FROM faded) AS k
          FROM gone) AS c0),
{counted}
SELECT (SELECT count(*) FROM gone) + (SELECT count(*) FROM faded)
