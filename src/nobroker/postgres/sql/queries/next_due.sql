-- For an idle wait: the acting time, and the earliest time something becomes
-- leasable (a ready or waiting job's due time, a lease's deadline), or NULL
-- while the queue is paused.
SELECT t.now, CASE WHEN (SELECT paused FROM {schema}.queues WHERE name = %(q)s)
                   THEN NULL ELSE least(
    (SELECT min(available_at) FROM {schema}.jobs WHERE queue = %(q)s AND state = 0),
    (SELECT min(available_at) FROM {schema}.jobs WHERE queue = %(q)s AND state = -1),
    (SELECT min(lease_until) FROM {schema}.jobs WHERE queue = %(q)s AND state = 1)) END
FROM (SELECT {schema}.nb_now(%(t)s::float8) AS now) AS t
