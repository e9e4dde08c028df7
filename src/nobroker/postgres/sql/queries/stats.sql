-- pending, leased, dead, done, paused, kept, waiting. Pending: live rows less
-- the leased ones, which no counter follows (a lease would write a counter
-- row on the pickup path); there are as many as the workers hold, read in the
-- jobs_leases index; less the jobs waiting for prerequisites, read in
-- jobs_blocked (migrations/0004). Kept: the counter, less the kept rows
-- already expired that no sweep took yet, and the results past their
-- result_until that no sweep cleared yet (index jobs_results, migrations/0011).
WITH held AS (SELECT count(*) AS n FROM {schema}.jobs WHERE queue = %(q)s AND state = 1),
blocked AS (SELECT count(*) AS n FROM {schema}.jobs WHERE queue = %(q)s AND state = -2)
SELECT coalesce(sum(live), 0) - (SELECT n FROM held) - (SELECT n FROM blocked),
       (SELECT n FROM held),
       coalesce(sum(dead), 0), coalesce(sum(done), 0),
       coalesce((SELECT paused FROM {schema}.queues WHERE name = %(q)s), false),
       coalesce(sum(kept), 0) - (
           SELECT count(*)
           FROM {schema}.jobs AS j, (SELECT {schema}.nb_now(%(t)s::float8) AS now) AS t
           WHERE j.queue = %(q)s AND j.state >= 3 AND j.expires_at <= t.now
             AND {schema}.nb_kept(j.state, j.result)) - (
           SELECT count(*)
           FROM {schema}.jobs AS j, (SELECT {schema}.nb_now(%(t)s::float8) AS now) AS t
           WHERE j.queue = %(q)s AND j.result_until <= t.now AND j.expires_at > t.now),
       (SELECT n FROM blocked)
FROM {schema}.counters WHERE queue = %(q)s
