-- Version 1: the tables, the functions, and counting triggers.

CREATE TABLE {schema}.queues (
    name text PRIMARY KEY,
    paused boolean NOT NULL DEFAULT false
);
CREATE SEQUENCE {schema}.job_seq;
CREATE SEQUENCE {schema}.lease_token;
CREATE TABLE {schema}.jobs (
    queue text NOT NULL,
    id text NOT NULL,
    seq bigint NOT NULL,
    state smallint NOT NULL,
    priority bigint NOT NULL,
    available_at float8 NOT NULL,
    enqueued_at float8 NOT NULL,
    max_attempts bigint NOT NULL,
    attempts bigint NOT NULL DEFAULT 0,
    keyed boolean NOT NULL DEFAULT false,
    token bigint,
    lease_until float8,
    last_error text,
    payload text NOT NULL,
    result text,
    finished_at float8,
    expires_at float8,
    PRIMARY KEY (queue, id)
);
CREATE INDEX jobs_ready ON {schema}.jobs (queue, priority DESC, seq) WHERE state = 0;
CREATE INDEX jobs_due ON {schema}.jobs (queue, available_at) WHERE state = 0;
CREATE INDEX jobs_leases ON {schema}.jobs (queue, lease_until) WHERE state = 1;
CREATE INDEX jobs_order ON {schema}.jobs (queue, seq);
CREATE INDEX jobs_finished ON {schema}.jobs (queue, expires_at) WHERE state >= 3;
-- Jobs a wait_finished waits for: only their finish is NOTIFYed (wakeups.py).
CREATE TABLE {schema}.watches (
    queue text NOT NULL,
    id text NOT NULL,
    PRIMARY KEY (queue, id)
);
CREATE TABLE {schema}.counters (
    queue text NOT NULL,
    slot integer NOT NULL,
    pending bigint NOT NULL DEFAULT 0,
    leased bigint NOT NULL DEFAULT 0,
    dead bigint NOT NULL DEFAULT 0,
    done bigint NOT NULL DEFAULT 0,
    kept bigint NOT NULL DEFAULT 0,  -- finished rows kept with an outcome (result, cancel)
    PRIMARY KEY (queue, slot)
);
-- The time a statement acts at: the caller's clock if it passed one (tests
-- inject one), else the server's, so hosts with skewed clocks agree.
CREATE FUNCTION {schema}.nb_now(given float8) RETURNS float8 LANGUAGE sql STABLE
    AS $$ SELECT coalesce(given, extract(epoch FROM now())::float8) $$;
CREATE FUNCTION {schema}.nb_channel(kind text, queue text) RETURNS text LANGUAGE sql IMMUTABLE
    AS $$ SELECT 'nb_' || kind || '_' || left(md5({schema_literal} || '.' || queue), 24) $$;
-- Kept with its outcome, for get() and result(): acked with a result, or cancelled.
CREATE FUNCTION {schema}.nb_kept(state smallint, result text) RETURNS boolean
    LANGUAGE sql IMMUTABLE AS $$ SELECT state = 4 OR (state = 3 AND result IS NOT NULL) $$;
CREATE FUNCTION {schema}.nb_count() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    slot_no integer := coalesce(nullif(current_setting('nobroker.slot', true), '')::integer, -1);
    r record;
BEGIN
    IF TG_OP = 'INSERT' THEN
        FOR r IN SELECT queue, count(*) FILTER (WHERE state = 0) AS p,
                        count(*) FILTER (WHERE state = 1) AS l,
                        count(*) FILTER (WHERE state = 2) AS d,
                        count(*) FILTER (WHERE state = 3) AS f,
                        count(*) FILTER (WHERE state = 0) AS ready, 0 AS fin, NULL::text AS one
                 FROM new_rows GROUP BY queue LOOP
            PERFORM {schema}.nb_apply(r.queue, slot_no, r.p, r.l, r.d, r.f, 0, r.ready, r.fin,
                                 r.one);
        END LOOP;
    ELSIF TG_OP = 'DELETE' THEN
        -- purge and delete_dead: a waiter for a deleted live job learns it is gone
        FOR r IN SELECT queue, -count(*) FILTER (WHERE state = 0) AS p,
                        -count(*) FILTER (WHERE state = 1) AS l,
                        -count(*) FILTER (WHERE state = 2) AS d,
                        -count(*) FILTER (WHERE {schema}.nb_kept(state, result)) AS k,
                        count(*) FILTER (WHERE state < 3 AND w.id IS NOT NULL) AS fin,
                        min(o.id) FILTER (WHERE state < 3 AND w.id IS NOT NULL) AS one
                 FROM old_rows AS o LEFT JOIN {schema}.watches AS w USING (queue, id)
                 GROUP BY queue LOOP
            PERFORM {schema}.nb_apply(r.queue, slot_no, r.p, r.l, r.d, 0, r.k, 0, r.fin, r.one);
        END LOOP;
    ELSE
        -- ready: rows that became pending, or pending rows whose time moved;
        -- fin: watched rows that became finished (done, dead, cancelled). An
        -- ack nobody waits for sends no NOTIFY: a transaction that notifies
        -- takes a lock that serialises every notifying commit of the server.
        FOR r IN SELECT n.queue,
                        sum((n.state = 0)::int - (o.state = 0)::int) AS p,
                        sum((n.state = 1)::int - (o.state = 1)::int) AS l,
                        sum((n.state = 2)::int - (o.state = 2)::int) AS d,
                        sum((n.state = 3)::int - (o.state = 3)::int) AS f,
                        sum({schema}.nb_kept(n.state, n.result)::int
                            - {schema}.nb_kept(o.state, o.result)::int) AS k,
                        count(*) FILTER (WHERE n.state = 0 AND (o.state <> 0
                                         OR n.available_at <> o.available_at)) AS ready,
                        count(*) FILTER (WHERE n.state >= 2 AND o.state < 2
                                         AND w.id IS NOT NULL) AS fin,
                        min(n.id) FILTER (WHERE n.state >= 2 AND o.state < 2
                                          AND w.id IS NOT NULL) AS one
                 FROM new_rows AS n JOIN old_rows AS o ON o.queue = n.queue AND o.id = n.id
                      LEFT JOIN {schema}.watches AS w ON w.queue = n.queue AND w.id = n.id
                 GROUP BY n.queue LOOP
            PERFORM {schema}.nb_apply(r.queue, slot_no, r.p, r.l, r.d, r.f, r.k, r.ready, r.fin,
                                 r.one);
        END LOOP;
    END IF;
    RETURN NULL;
END $$;
CREATE FUNCTION {schema}.nb_apply(q text, slot_no integer, p bigint, l bigint, d bigint,
                             f bigint, k bigint, ready bigint, fin bigint, one text)
    RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF p <> 0 OR l <> 0 OR d <> 0 OR f <> 0 OR k <> 0 THEN
        INSERT INTO {schema}.counters AS c (queue, slot, pending, leased, dead, done, kept)
        VALUES (q, slot_no, p, l, d, f, k)
        ON CONFLICT (queue, slot) DO UPDATE
        SET pending = c.pending + excluded.pending, leased = c.leased + excluded.leased,
            dead = c.dead + excluded.dead, done = c.done + excluded.done,
            kept = c.kept + excluded.kept;
    END IF;
    IF ready > 0 THEN
        PERFORM pg_notify({schema}.nb_channel('r', q), '');
    END IF;
    IF fin > 0 THEN
        PERFORM pg_notify({schema}.nb_channel('f', q), CASE WHEN fin = 1 THEN one ELSE '*' END);
    END IF;
END $$;
CREATE TRIGGER jobs_insert AFTER INSERT ON {schema}.jobs REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION {schema}.nb_count();
CREATE TRIGGER jobs_update AFTER UPDATE ON {schema}.jobs
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION {schema}.nb_count();
CREATE TRIGGER jobs_delete AFTER DELETE ON {schema}.jobs REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION {schema}.nb_count();
