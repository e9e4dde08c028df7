-- Version 3: no counting triggers. Each statement (queries/) counts and
-- notifies what it changed (parts/counted.sql), which takes the trigger's
-- transition tables and plpgsql call off every enqueue, lease and ack:
-- measured after 20 ms idle, as a worker's pickup runs, an enqueue 1.07 ->
-- 0.95 ms and a lease 1.37 -> 1.19 ms (300 of each, one process,
-- interleaved). The counters keep `live` (pending + leased) instead of
-- pending and leased apart, so that a lease writes no counter row: stats()
-- counts the leased rows. What the statements notify about a finish still
-- reads `watches` with a snapshot of its own: nb_finished is VOLATILE, so a
-- watch committed while the statement waited for a row's lock is seen, as
-- the AFTER trigger saw it (wakeups.py's _watch); in plpgsql, whose plan is
-- kept per session (an SQL function is planned on every call: server CPU per
-- job of lease + ack 533 -> 420 us, `bench-postgres --ab`).

DROP TRIGGER jobs_insert ON {schema}.jobs;
DROP TRIGGER jobs_update ON {schema}.jobs;
DROP TRIGGER jobs_delete ON {schema}.jobs;
DROP FUNCTION {schema}.nb_count_insert();
DROP FUNCTION {schema}.nb_count_update();
DROP FUNCTION {schema}.nb_count_delete();
ALTER TABLE {schema}.counters RENAME COLUMN pending TO live;
UPDATE {schema}.counters SET live = live + leased;
ALTER TABLE {schema}.counters DROP COLUMN leased;
CREATE FUNCTION {schema}.nb_finished(q text, ids text[]) RETURNS bigint
    LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    n bigint;
    one text;
BEGIN
    SELECT count(*), min(id) INTO n, one FROM {schema}.watches WHERE queue = q AND id = ANY(ids);
    IF n > 0 THEN
        PERFORM pg_notify({schema}.nb_channel('f', q), CASE WHEN n = 1 THEN one ELSE '*' END);
    END IF;
    RETURN n;
END $$;
