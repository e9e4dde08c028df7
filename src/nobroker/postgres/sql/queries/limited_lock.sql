-- A limited lease's lock, held to its commit: the queue's row, so that every
-- limited lease of the queue, in any process on any host, decides after the
-- last one committed the starts and holders it counts. NO KEY UPDATE: the
-- rows' foreign-key checks (KEY SHARE) do not wait for it.
SELECT 1 FROM {schema}.queues WHERE name = %(q)s FOR NO KEY UPDATE
