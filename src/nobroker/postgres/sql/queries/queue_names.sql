-- Every queue of the queue set (a row per queue opened for writing).
SELECT name FROM {schema}.queues ORDER BY name
