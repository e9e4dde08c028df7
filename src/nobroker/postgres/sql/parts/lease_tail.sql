-- What follows the candidates in a lease (queries/lease.sql, lease_chosen.sql):
-- the best of `ready` and `due` picked, leased, counted and notified. Needs
-- the CTEs `t`, `reclaimed`, `ready` and `due`.
picked AS (
    SELECT c.id FROM (SELECT * FROM ready UNION ALL SELECT * FROM due) AS c
    WHERE NOT EXISTS (SELECT 1 FROM {schema}.queues WHERE name = %(q)s AND paused)
    ORDER BY c.priority DESC, c.seq LIMIT %(n)s),
{readied},
{leased},
finishing AS (SELECT reclaimed.id FROM reclaimed WHERE reclaimed.state = 2),
tally AS MATERIALIZED (
    SELECT c0.p, c0.d, c0.f, c0.k,
           CASE WHEN c0.w0 > 0 THEN pg_notify({schema}.nb_channel('r', %(q)s), '')::text
           END AS woke,
           (SELECT {schema}.nb_finished(%(q)s, array_agg(f.id)) FROM finishing AS f
            HAVING count(*) > 0) AS told
    FROM (SELECT -count(*) FILTER (WHERE reclaimed.state = 2) AS p,
                 count(*) FILTER (WHERE reclaimed.state = 2) AS d, 0 AS f, 0 AS k,
                 count(*) FILTER (WHERE reclaimed.state = -1) AS w0
          FROM reclaimed) AS c0),
{counted}
SELECT * FROM leased
