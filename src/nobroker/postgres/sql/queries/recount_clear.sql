DELETE FROM {schema}.counters
