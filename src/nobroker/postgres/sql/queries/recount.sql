-- Per queue: the counters' sums (live, dead, kept), the same counted from the
-- rows, and the done sum (acks ever made: not countable from rows).
WITH counted AS (
    SELECT queue, sum(live) AS live, sum(dead) AS dead, sum(kept) AS kept,
           sum(done) AS done
    FROM {schema}.counters GROUP BY queue),
truth AS (
    SELECT queue, count(*) FILTER (WHERE state <= 1) AS live,
           count(*) FILTER (WHERE state = 2) AS dead,
           count(*) FILTER (WHERE {schema}.nb_kept(state, result)) AS kept
    FROM {schema}.jobs GROUP BY queue)
SELECT coalesce(t.queue, c.queue), coalesce(c.live, 0), coalesce(c.dead, 0),
       coalesce(c.kept, 0), coalesce(t.live, 0), coalesce(t.dead, 0),
       coalesce(t.kept, 0), coalesce(c.done, 0)
FROM truth AS t FULL JOIN counted AS c ON c.queue = t.queue
ORDER BY 1
