-- Version 11: a keyed job's result is gone at its result_ttl, while its row (its
-- key) is kept for key_retention, when that is longer, so that the key still
-- deduplicates (the file engine's ACK "rkeep", memory://'s result_until). The ack
-- (parts/acked.sql) sets `result_until` then; NULL: the result lasts as long as
-- the row. get.sql and list_jobs.sql show no result from then on; the sweep
-- deletes the row at expires_at, as before. Additive: a nullable column, no
-- rewrite of the table.
ALTER TABLE {schema}.jobs ADD COLUMN result_until float8;
