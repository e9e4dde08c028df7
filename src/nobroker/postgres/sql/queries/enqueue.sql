-- One job: the key `id` if given (nothing inserted if a row has it), else a
-- generated id from the sequence. Waiting (-1) when delayed, else ready (0):
-- both count as live and wake the idle workers alike. `m`: its metadata, if any.
WITH added AS (
    INSERT INTO {schema}.jobs AS j (queue, id, seq, state, priority, available_at,
                                    enqueued_at, max_attempts, keyed, payload, meta,
                                    rate_key, conc_key, conc_cap)
    SELECT %(q)s, coalesce(%(id)s::text, lpad(to_hex(n.seq), 16, '0')), n.seq,
           CASE WHEN %(delay)s::float8 > 0 THEN -1 ELSE 0 END, %(pr)s,
           t.now + %(delay)s,
           t.now, %(ma)s, %(id)s::text IS NOT NULL, %(p)s, %(m)s::text, %(rk)s, %(ck)s,
           %(cc)s::integer
    FROM (SELECT nextval('{schema}.job_seq') AS seq) AS n,
         (SELECT {schema}.nb_now(%(t)s::float8) AS now) AS t
    ON CONFLICT (queue, id) DO NOTHING
    RETURNING {job_columns}),
tally AS MATERIALIZED (
    SELECT c0.p, c0.d, c0.f, c0.k,
           CASE WHEN c0.w0 > 0 THEN pg_notify({schema}.nb_channel('r', %(q)s), '')::text
           END AS woke
    FROM (SELECT count(*) AS p, 0 AS d, 0 AS f, 0 AS k, count(*) AS w0 FROM added) AS c0),
{counted}
SELECT * FROM added
