-- Version 2: the waiting state (-1) and its index; counting triggers without a
-- nested call, one function per operation (V1's one function for all three
-- operations, with a nested plpgsql call, cost a lease about a quarter of its
-- server time: EXPLAIN ANALYZE, V1 against V2). Rows pending but not yet due
-- become waiting. An ack nobody waits for sends no NOTIFY: a transaction that
-- notifies takes a lock that serialises every notifying commit of the server.

CREATE INDEX jobs_waiting ON {schema}.jobs (queue, available_at) WHERE state = -1;
DROP TRIGGER jobs_insert ON {schema}.jobs;
DROP TRIGGER jobs_update ON {schema}.jobs;
DROP TRIGGER jobs_delete ON {schema}.jobs;
DROP FUNCTION {schema}.nb_count();
DROP FUNCTION {schema}.nb_apply(text, integer, bigint, bigint, bigint, bigint, bigint, bigint, bigint, text);

CREATE FUNCTION {schema}.nb_count_insert() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT queue AS q, count(*) FILTER (WHERE state <= 0) AS p,
                    count(*) FILTER (WHERE state = 1) AS l,
                    count(*) FILTER (WHERE state = 2) AS d,
                    count(*) FILTER (WHERE state = 3) AS f, 0 AS k,
                    count(*) FILTER (WHERE state <= 0) AS ready
             FROM new_rows GROUP BY queue LOOP
        IF r.p <> 0 OR r.l <> 0 OR r.d <> 0 OR r.f <> 0 OR r.k <> 0 THEN
            INSERT INTO {schema}.counters AS c (queue, slot, pending, leased, dead, done, kept)
            VALUES (r.q, coalesce(nullif(current_setting('nobroker.slot', true), '')::integer,
                                  -1), r.p, r.l, r.d, r.f, r.k)
            ON CONFLICT (queue, slot) DO UPDATE
            SET pending = c.pending + excluded.pending, leased = c.leased + excluded.leased,
                dead = c.dead + excluded.dead, done = c.done + excluded.done,
                kept = c.kept + excluded.kept;
        END IF;
        IF r.ready > 0 THEN
            PERFORM pg_notify({schema}.nb_channel('r', r.q), '');
        END IF;
    END LOOP;
    RETURN NULL;
END $$;

CREATE FUNCTION {schema}.nb_count_update() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT n.queue AS q,
                    sum((n.state <= 0)::int - (o.state <= 0)::int) AS p,
                    sum((n.state = 1)::int - (o.state = 1)::int) AS l,
                    sum((n.state = 2)::int - (o.state = 2)::int) AS d,
                    sum((n.state = 3)::int - (o.state = 3)::int) AS f,
                    sum({schema}.nb_kept(n.state, n.result)::int
                        - {schema}.nb_kept(o.state, o.result)::int) AS k,
                    -- became pending, or pending with its time moved (a waiting
                    -- row turned ready by a lease keeps its time: no wake-up)
                    count(*) FILTER (WHERE n.state <= 0 AND (o.state > 0
                                     OR n.available_at <> o.available_at)) AS ready,
                    count(*) FILTER (WHERE n.state >= 2 AND o.state < 2
                                     AND w.id IS NOT NULL) AS fin,
                    min(n.id) FILTER (WHERE n.state >= 2 AND o.state < 2
                                      AND w.id IS NOT NULL) AS one
             FROM new_rows AS n JOIN old_rows AS o ON o.queue = n.queue AND o.id = n.id
                  LEFT JOIN {schema}.watches AS w ON w.queue = n.queue AND w.id = n.id
             GROUP BY n.queue LOOP
        IF r.p <> 0 OR r.l <> 0 OR r.d <> 0 OR r.f <> 0 OR r.k <> 0 THEN
            INSERT INTO {schema}.counters AS c (queue, slot, pending, leased, dead, done, kept)
            VALUES (r.q, coalesce(nullif(current_setting('nobroker.slot', true), '')::integer,
                                  -1), r.p, r.l, r.d, r.f, r.k)
            ON CONFLICT (queue, slot) DO UPDATE
            SET pending = c.pending + excluded.pending, leased = c.leased + excluded.leased,
                dead = c.dead + excluded.dead, done = c.done + excluded.done,
                kept = c.kept + excluded.kept;
        END IF;
        IF r.ready > 0 THEN
            PERFORM pg_notify({schema}.nb_channel('r', r.q), '');
        END IF;
        IF r.fin > 0 THEN
            PERFORM pg_notify({schema}.nb_channel('f', r.q),
                              CASE WHEN r.fin = 1 THEN r.one ELSE '*' END);
        END IF;
    END LOOP;
    RETURN NULL;
END $$;

CREATE FUNCTION {schema}.nb_count_delete() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT o.queue AS q, -count(*) FILTER (WHERE state <= 0) AS p,
                    -count(*) FILTER (WHERE state = 1) AS l,
                    -count(*) FILTER (WHERE state = 2) AS d, 0 AS f,
                    -count(*) FILTER (WHERE {schema}.nb_kept(state, result)) AS k,
                    count(*) FILTER (WHERE state < 3 AND w.id IS NOT NULL) AS fin,
                    min(o.id) FILTER (WHERE state < 3 AND w.id IS NOT NULL) AS one
             FROM old_rows AS o LEFT JOIN {schema}.watches AS w USING (queue, id)
             GROUP BY o.queue LOOP
        IF r.p <> 0 OR r.l <> 0 OR r.d <> 0 OR r.f <> 0 OR r.k <> 0 THEN
            INSERT INTO {schema}.counters AS c (queue, slot, pending, leased, dead, done, kept)
            VALUES (r.q, coalesce(nullif(current_setting('nobroker.slot', true), '')::integer,
                                  -1), r.p, r.l, r.d, r.f, r.k)
            ON CONFLICT (queue, slot) DO UPDATE
            SET pending = c.pending + excluded.pending, leased = c.leased + excluded.leased,
                dead = c.dead + excluded.dead, done = c.done + excluded.done,
                kept = c.kept + excluded.kept;
        END IF;
        IF r.fin > 0 THEN
            PERFORM pg_notify({schema}.nb_channel('f', r.q),
                              CASE WHEN r.fin = 1 THEN r.one ELSE '*' END);
        END IF;
    END LOOP;
    RETURN NULL;
END $$;

CREATE TRIGGER jobs_insert AFTER INSERT ON {schema}.jobs REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION {schema}.nb_count_insert();
CREATE TRIGGER jobs_update AFTER UPDATE ON {schema}.jobs
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION {schema}.nb_count_update();
CREATE TRIGGER jobs_delete AFTER DELETE ON {schema}.jobs REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION {schema}.nb_count_delete();
UPDATE {schema}.jobs SET state = -1
    WHERE state = 0 AND available_at > extract(epoch FROM now())::float8;
