-- The jobs this statement finished, told (nb_finish, migrations/0004): their
-- watched finishes NOTIFYed, their waiting dependents settled in the same
-- statement. Needs the CTE `finishing` (id; st: the outcome's state code, 3
-- done, 2 dead, 4 cancelled or purged; dependents: the row's flag). One row,
-- `n`: how many dependents it cancelled, which the tally moves from live to
-- kept.
settled AS MATERIALIZED (
    SELECT coalesce((SELECT {schema}.nb_finish(%(q)s, array_agg(id), array_agg(st),
                                               array_agg(dependents), %(t)s, %(ttl)s)
                     FROM finishing HAVING count(*) > 0), 0) AS n)
