-- The lock a limited lease takes on its queue's row (migrations/0008), taken by
-- nobroker migrate before it reads and writes the rate windows: no lease's starts
-- are lost between its read and its write.
SELECT 1 FROM {schema}.queues AS qs WHERE qs.name = %(q)s FOR NO KEY UPDATE
