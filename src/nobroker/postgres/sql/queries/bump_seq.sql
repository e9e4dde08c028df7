-- After an import: generated-form ids copied in must not be generated again.
SELECT setval('{schema}.job_seq', greatest(
    (SELECT last_value FROM {schema}.job_seq),
    (SELECT coalesce(max(('x' || id)::bit(64)::bigint), 1) FROM {schema}.jobs
     WHERE queue = %(q)s AND id ~ '^0000[0-9a-f]{12}$')))
