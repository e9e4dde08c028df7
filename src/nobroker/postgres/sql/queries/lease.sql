-- Up to n jobs leased, best first: expired leases taken back first (they are
-- leasable from the next call), then the best of the ready and the due rows.
-- With n = 0 (purge) it only takes the expired leases back. A lease that dies
-- settles its waiting dependents (parts/settled.sql).
WITH t AS (SELECT {schema}.nb_now(%(t)s::float8) AS now),
{reclaimed},
{candidates},
{lease_tail}
