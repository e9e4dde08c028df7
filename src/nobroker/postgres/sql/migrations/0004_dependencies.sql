-- Version 4: dependencies (depends_on=, enqueue_graph). A job waiting for
-- prerequisites has state -2: live (it counts in `live`, as pending and
-- leased rows do; stats() counts the waiting ones in jobs_blocked), never
-- leased, not pending. Its row in `waits` holds how many prerequisites it
-- still waits for (`unmet`) and what it waits for (`mode`: 0 every one to
-- succeed, 1 every one to finish, 2 one to be dead-lettered); `prerequisites`
-- holds one row per unmet prerequisite (`pos`: the order given, for
-- Job.waiting_for). A prerequisite row's `dependents` says that some job
-- waits for it, so that a statement finishing a job without dependents (every
-- job of a queue that uses no dependencies) calls no nb_settle.
--
-- Exactly once: the release of a waiting job is decided by the UPDATE that
-- takes its `unmet` to 0. nb_settle locks the waiting job's row (then its
-- waits row) until the end of the transaction before it decrements, so two
-- acks of its last two prerequisites decrement one after the other (the
-- second, in READ COMMITTED, reads the row the first committed): one sees 0,
-- one releases. O(1) per finished prerequisite: the
-- rows read are the finished job's own `prerequisites` rows (by primary key)
-- and its dependents' `waits` rows, never the other prerequisites of a group.

ALTER TABLE {schema}.jobs ADD COLUMN dependents boolean NOT NULL DEFAULT false;
CREATE INDEX jobs_blocked ON {schema}.jobs (queue) WHERE state = -2;
CREATE TABLE {schema}.waits (
    queue text NOT NULL,
    id text NOT NULL,
    unmet integer NOT NULL,
    mode smallint NOT NULL,
    PRIMARY KEY (queue, id)
);
CREATE TABLE {schema}.prerequisites (
    queue text NOT NULL,
    prerequisite text NOT NULL,
    dependent text NOT NULL,
    pos integer NOT NULL,
    PRIMARY KEY (queue, prerequisite, dependent)
);
CREATE INDEX prerequisites_of ON {schema}.prerequisites (queue, dependent, pos);

-- Jobs `ids` finished with `states` (3 done, 2 dead, 4 cancelled, also a
-- pending job purged), at nb_now(`given`): each stops waiting itself (a
-- waiting job cancelled), and its waiting dependents are released (state 0,
-- or -1 while their own delay runs) or cancelled (kept `ttl` seconds,
-- last_error saying why, as nobroker.dependencies words it), recursively.
-- Returns how many it cancelled (the caller's tally takes them from `live`
-- into `kept`); it NOTIFYs the releases and the watched cancels itself. VOLATILE: each query
-- reads with a fresh snapshot, so it sees a dependent committed while the
-- calling statement waited for the prerequisite's row lock. Every query in it
-- looks up rows by key: enable_seqscan off keeps them on their indexes when
-- the tables' statistics are not there yet (a chord of 10,000 members just
-- enqueued, before autovacuum analyzed it, had each of its acks scan them all).
CREATE FUNCTION {schema}.nb_settle(q text, ids text[], states integer[], given float8,
                                   ttl float8) RETURNS bigint
    LANGUAGE plpgsql VOLATILE SET enable_seqscan = off
    AS $$
DECLARE
    at float8 := {schema}.nb_now(given);
    todo text[] := ids;
    outcomes integer[] := states;
    i integer := 1;
    gone text;
    outcome integer;
    d record;
    why text;
    released bigint := 0;
    cancelled text[] := '{}';
BEGIN
    -- Every direct dependent's job row locked at once, in id order, before any
    -- is touched: two ack_many calls that share dependents lock them in the
    -- same order (the loop below locks a cancelled dependent's own ones).
    PERFORM 1 FROM {schema}.jobs AS j
        WHERE j.queue = q AND j.id IN (SELECT p.dependent FROM {schema}.prerequisites AS p
                                       WHERE p.queue = q AND p.prerequisite = ANY(ids))
        ORDER BY j.id FOR UPDATE;
    WHILE i <= cardinality(todo) LOOP
        gone := todo[i];
        outcome := outcomes[i];
        i := i + 1;
        DELETE FROM {schema}.waits WHERE queue = q AND id = gone;
        DELETE FROM {schema}.prerequisites WHERE queue = q AND dependent = gone;
        -- The dependents' job rows locked first, in id order, as cancel locks a
        -- job's row before its waits row: two finishes that share dependents,
        -- or a finish and a cancel of its dependent, wait, never deadlock.
        PERFORM 1 FROM {schema}.jobs AS j
            WHERE j.queue = q AND j.id IN (SELECT p.dependent FROM {schema}.prerequisites AS p
                                           WHERE p.queue = q AND p.prerequisite = gone)
            ORDER BY j.id FOR UPDATE;
        FOR d IN
            WITH edges AS (
                DELETE FROM {schema}.prerequisites
                WHERE queue = q AND prerequisite = gone RETURNING dependent)
            UPDATE {schema}.waits AS w SET unmet = w.unmet - 1
            FROM edges WHERE w.queue = q AND w.id = edges.dependent
            RETURNING w.id, w.unmet, w.mode
        LOOP
            why := NULL;  -- NULL: still waiting; '': released; else cancelled, why
            IF d.mode = 2 THEN
                IF outcome = 2 THEN
                    why := '';
                ELSIF d.unmet = 0 THEN
                    why := 'prerequisites finished without a failure';
                END IF;
            ELSIF d.mode = 0 AND outcome <> 3 THEN
                why := 'prerequisite ' || gone || CASE WHEN outcome = 2
                       THEN ' was dead-lettered' ELSE ' was cancelled' END;
            ELSIF d.unmet = 0 THEN
                why := '';
            END IF;
            CONTINUE WHEN why IS NULL;
            DELETE FROM {schema}.waits WHERE queue = q AND id = d.id;
            DELETE FROM {schema}.prerequisites WHERE queue = q AND dependent = d.id;
            IF why = '' THEN
                UPDATE {schema}.jobs SET state = CASE WHEN available_at > at THEN -1 ELSE 0 END
                    WHERE queue = q AND id = d.id AND state = -2;
                IF FOUND THEN
                    released := released + 1;
                END IF;
            ELSE
                UPDATE {schema}.jobs SET state = 4, finished_at = at, expires_at = at + ttl,
                                         last_error = why
                    WHERE queue = q AND id = d.id AND state = -2;
                IF FOUND THEN
                    cancelled := cancelled || d.id;
                    todo := todo || d.id;
                    outcomes := outcomes || 4;
                END IF;
            END IF;
        END LOOP;
    END LOOP;
    IF released > 0 THEN
        PERFORM pg_notify({schema}.nb_channel('r', q), '');
    END IF;
    IF cardinality(cancelled) > 0 THEN
        PERFORM {schema}.nb_finished(q, cancelled);
    END IF;
    RETURN cardinality(cancelled);
END $$;

-- What a statement that finishes jobs calls once (parts/settled.sql), instead
-- of nb_finished (migrations/0003): NOTIFYs the finishes a waiter watches, as
-- nb_finished does, and settles the dependents of the jobs flagged as having
-- some (`deps`) with nb_settle. One plpgsql call per finishing statement, as
-- before: a job without dependents costs nothing more.
CREATE FUNCTION {schema}.nb_finish(q text, ids text[], states integer[], deps boolean[],
                                   given float8, ttl float8) RETURNS bigint
    LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    n bigint;
    one text;
    flagged text[];
    outcomes integer[];
BEGIN
    SELECT count(*), min(id) INTO n, one FROM {schema}.watches WHERE queue = q AND id = ANY(ids);
    IF n > 0 THEN
        PERFORM pg_notify({schema}.nb_channel('f', q), CASE WHEN n = 1 THEN one ELSE '*' END);
    END IF;
    IF NOT (true = ANY(deps)) THEN
        RETURN 0;
    END IF;
    SELECT array_agg(u.id), array_agg(u.st) INTO flagged, outcomes
        FROM unnest(ids, states, deps) AS u(id, st, dep) WHERE u.dep;
    RETURN {schema}.nb_settle(q, flagged, outcomes, given, ttl);
END $$;
