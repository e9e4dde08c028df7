-- What follows the candidates in queries/lease.sql (queries/limited_lease.sql
-- chooses in nb_limited_lease instead and shares only parts/lease_end.sql):
-- the best of `ready` and `due` picked, leased, counted and notified, then the
-- statement's end (parts/lease_end.sql: rows, reclaims' deaths settled).
-- Needs the CTEs `t`, `reclaimed`, `ready` and `due`.
picked AS (
    SELECT c.id FROM (SELECT * FROM ready UNION ALL SELECT * FROM due) AS c
    WHERE NOT EXISTS (SELECT 1 FROM {schema}.queues WHERE name = %(q)s AND paused)
    ORDER BY c.priority DESC, c.seq LIMIT %(n)s),
{readied},
{leased},
{lease_end}
