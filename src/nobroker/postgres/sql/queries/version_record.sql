-- The version a migration reached, as the only row.
WITH cleared AS (DELETE FROM {schema}.schema_version)
INSERT INTO {schema}.schema_version VALUES (%(version)s)
