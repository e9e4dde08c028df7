-- The jobs of a graph (and of an enqueue with depends_on=), with the states
-- graphs.py planned: -2 waiting for prerequisites (a `waits` row and a
-- `prerequisites` row per unmet one), 0 pending (-1 while its delay runs), or
-- 4 cancelled at once (a prerequisite had failed). Prerequisites already in
-- the queue (locked by lock_prerequisites.sql) are flagged as having
-- dependents. Ids already taken: no row (the caller rolls back). `ms`: each job's
-- metadata from the start (enqueue's meta=, migrations/0005), NULL for none;
-- `rks`, `cks`: its limit keys (migrations/0006), '' for none; `ccs`: the
-- concurrency cap declared for its key (migrations/0008), NULL for none.
WITH t AS (SELECT {schema}.nb_now(%(t)s::float8) AS now),
added AS (
    INSERT INTO {schema}.jobs AS j (queue, id, seq, state, priority, available_at,
                                    enqueued_at, max_attempts, keyed, payload, meta,
                                    last_error, finished_at, expires_at, dependents,
                                    rate_key, conc_key, conc_cap)
    SELECT %(q)s, u.id, u.seq,
           CASE WHEN u.state = 0 AND u.delay > 0 THEN -1 ELSE u.state END, u.pr,
           t.now + u.delay, t.now, u.ma, u.keyed, u.p, u.m, u.err,
           CASE WHEN u.state = 4 THEN t.now END,
           CASE WHEN u.state = 4 THEN t.now + %(ttl)s::float8 END, u.deps, u.rk, u.ck, u.cc
    FROM unnest(%(ids)s::text[], %(seqs)s::bigint[], %(states)s::smallint[],
                %(prs)s::bigint[], %(delays)s::float8[], %(mas)s::bigint[],
                %(ks)s::boolean[], %(ps)s::text[], %(ms)s::text[], %(errs)s::text[],
                %(deps)s::boolean[], %(rks)s::text[], %(cks)s::text[], %(ccs)s::integer[])
         AS u(id, seq, state, pr, delay, ma, keyed, p, m, err, deps, rk, ck, cc), t
    ON CONFLICT (queue, id) DO NOTHING
    RETURNING {job_columns}),
flagged AS (
    UPDATE {schema}.jobs SET dependents = true
    WHERE queue = %(q)s AND id = ANY(%(flag)s::text[]) AND NOT dependents),
waiting AS (
    INSERT INTO {schema}.waits (queue, id, unmet, mode)
    SELECT %(q)s, w.id, w.unmet, w.mode
    FROM unnest(%(w_ids)s::text[], %(w_unmet)s::integer[], %(w_modes)s::smallint[])
         AS w(id, unmet, mode)),
edges AS (
    INSERT INTO {schema}.prerequisites (queue, prerequisite, dependent, pos)
    SELECT %(q)s, e.pre, e.dep, e.pos
    FROM unnest(%(e_pre)s::text[], %(e_dep)s::text[], %(e_pos)s::integer[])
         AS e(pre, dep, pos)),
tally AS MATERIALIZED (
    SELECT c0.p, c0.d, c0.f, c0.k,
           CASE WHEN c0.w0 > 0 THEN pg_notify({schema}.nb_channel('r', %(q)s), '')::text
           END AS woke
    FROM (SELECT count(*) FILTER (WHERE added.state <= 1) AS p, 0 AS d, 0 AS f,
                 count(*) FILTER (WHERE added.state = 4) AS k,
                 count(*) FILTER (WHERE added.state IN (-1, 0)) AS w0
          FROM added) AS c0),
{counted}
SELECT * FROM added
