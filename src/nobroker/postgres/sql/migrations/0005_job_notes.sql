-- Version 5: a running job's progress and metadata (current_job().progress and
-- set_meta, format 1.2 in the file engine), JSON text like payload and result:
-- `progress` is [fraction, note or null], `meta` an object; NULL for a job
-- that has neither. They live in the job's row, so they are kept exactly as
-- long as the row is (its result, its key, the dead-letter queue) and go with
-- it. Additive: nullable columns, no rewrite of the table.
ALTER TABLE {schema}.jobs ADD COLUMN progress text, ADD COLUMN meta text;
