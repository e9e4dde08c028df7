-- Revivable cancelled dependents copied from another backend (nobroker
-- migrate): each row cancelled now, kept `ttl` seconds, with its `dormant` rows
-- (`e_*`: prerequisite, dependent, position, failed; migrations/0007) and its
-- prerequisites flagged as having dependents (one copied in this statement at
-- its insert), so that their finishes and requeues move those rows. Ids
-- already here are skipped: the ids of those inserted.
WITH t AS (SELECT {schema}.nb_now(%(t)s::float8) AS now),
added AS (
    INSERT INTO {schema}.jobs (queue, id, seq, state, priority, available_at, enqueued_at,
                               max_attempts, attempts, keyed, last_error, payload,
                               finished_at, expires_at, rate_key, conc_key, dependents,
                               conc_cap)
    SELECT %(q)s, u.id, nextval('{schema}.job_seq'), 4, u.pr, u.at, u.ts, u.ma, u.atts,
           u.keyed, u.err, u.p, t.now, t.now + %(ttl)s::float8, u.rk, u.ck,
           u.id = ANY(%(e_pre)s::text[]), u.cc
    FROM unnest(%(ids)s::text[], %(prs)s::bigint[], %(ats)s::float8[], %(ts)s::float8[],
                %(mas)s::bigint[], %(atts)s::bigint[], %(ks)s::boolean[], %(errs)s::text[],
                %(ps)s::text[], %(rks)s::text[], %(cks)s::text[], %(ccs)s::integer[])
         WITH ORDINALITY AS u(id, pr, at, ts, ma, atts, keyed, err, p, rk, ck, cc, o), t
    ORDER BY u.o
    ON CONFLICT (queue, id) DO NOTHING
    RETURNING id),
watched AS (
    INSERT INTO {schema}.dormant (queue, prerequisite, dependent, pos, failed)
    SELECT %(q)s, e.pre, e.dep, e.pos, e.failed
    FROM unnest(%(e_pre)s::text[], %(e_dep)s::text[], %(e_pos)s::integer[],
                %(e_failed)s::boolean[]) AS e(pre, dep, pos, failed)
    WHERE e.dep IN (SELECT added.id FROM added)),
flagged AS (
    UPDATE {schema}.jobs SET dependents = true
    WHERE queue = %(q)s AND id = ANY(%(e_pre)s::text[]) AND NOT dependents),
tally AS MATERIALIZED (
    SELECT c0.p, c0.d, c0.f, c0.k
    FROM (SELECT 0 AS p, 0 AS d, 0 AS f, count(*) AS k FROM added) AS c0),
{counted}
SELECT id FROM added
