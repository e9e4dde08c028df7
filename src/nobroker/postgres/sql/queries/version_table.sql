-- The schema_version table, or NULL where the queue set was never created.
SELECT to_regclass('{schema}.schema_version')
