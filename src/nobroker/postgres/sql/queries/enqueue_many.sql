-- A batch of jobs with generated ids, in the order given (ORDINALITY); `ms`:
-- each job's metadata (JSON text, NULL for none).
WITH added AS (
    INSERT INTO {schema}.jobs AS j (queue, id, seq, state, priority, available_at,
                                    enqueued_at, max_attempts, keyed, payload, meta,
                                    rate_key, conc_key, conc_cap)
    SELECT %(q)s, lpad(to_hex(n.seq), 16, '0'), n.seq,
           CASE WHEN %(delay)s::float8 > 0 THEN -1 ELSE 0 END, %(pr)s,
           t.now + %(delay)s, t.now, %(ma)s, false, n.p, n.m, n.rk, n.ck, n.cc
    FROM (SELECT nextval('{schema}.job_seq') AS seq, u.p, u.m, u.rk, u.ck, u.cc
          FROM unnest(%(ps)s::text[], %(ms)s::text[], %(rks)s::text[], %(cks)s::text[],
                      %(ccs)s::integer[]) WITH ORDINALITY AS u(p, m, rk, ck, cc, o)
          ORDER BY u.o) AS n,
         (SELECT {schema}.nb_now(%(t)s::float8) AS now) AS t
    ON CONFLICT (queue, id) DO NOTHING
    RETURNING j.id, j.seq, j.state, j.priority, j.available_at, j.enqueued_at),
tally AS MATERIALIZED (
    SELECT c0.p, c0.d, c0.f, c0.k,
           CASE WHEN c0.w0 > 0 THEN pg_notify({schema}.nb_channel('r', %(q)s), '')::text
           END AS woke
    FROM (SELECT count(*) AS p, 0 AS d, 0 AS f, 0 AS k, count(*) AS w0 FROM added) AS c0),
{counted}
SELECT * FROM added
