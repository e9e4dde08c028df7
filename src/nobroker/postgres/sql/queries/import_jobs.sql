-- Jobs copied from another backend (nobroker migrate), ids, attempts, errors,
-- limit keys and concurrency caps kept, in the order given; a pending one not
-- yet due arrives waiting. Ids already here are skipped: the states of those
-- inserted.
WITH src AS (
    SELECT u.*, nextval('{schema}.job_seq') AS seq
    FROM unnest(%(ids)s::text[], %(states)s::smallint[], %(prs)s::bigint[],
                %(ats)s::float8[], %(ts)s::float8[], %(mas)s::bigint[],
                %(atts)s::bigint[], %(ks)s::boolean[], %(errs)s::text[],
                %(ps)s::text[], %(rks)s::text[], %(cks)s::text[],
                %(ccs)s::integer[]) WITH ORDINALITY
         AS u(id, state, priority, available_at, enqueued_at, max_attempts,
              attempts, keyed, last_error, payload, rate_key, conc_key, conc_cap, o)
    ORDER BY u.o),
added AS (
    INSERT INTO {schema}.jobs (queue, id, seq, state, priority, available_at, enqueued_at,
                               max_attempts, attempts, keyed, last_error, payload,
                               finished_at, rate_key, conc_key, conc_cap)
    SELECT %(q)s, id, seq,
           CASE WHEN state = 0 AND available_at > t.now THEN -1 ELSE state END,
           priority, available_at, enqueued_at, max_attempts,
           attempts, keyed, last_error, payload,
           CASE WHEN state = 2 THEN available_at END, rate_key, conc_key, conc_cap
    FROM src, (SELECT {schema}.nb_now(%(t)s::float8) AS now) AS t
    ON CONFLICT (queue, id) DO NOTHING
    RETURNING id, state),
tally AS MATERIALIZED (
    SELECT c0.p, c0.d, c0.f, c0.k,
           CASE WHEN c0.w0 > 0 OR c0.w1 > 0
                THEN pg_notify({schema}.nb_channel('r', %(q)s), '')::text END AS woke
    FROM (SELECT count(*) FILTER (WHERE added.state <= 0) AS p,
                 count(*) FILTER (WHERE added.state = 2) AS d, 0 AS f, 0 AS k,
                 count(*) FILTER (WHERE added.state = -1) AS w0,
                 count(*) FILTER (WHERE added.state = 0) AS w1
          FROM added) AS c0),
{counted}
SELECT state FROM added
