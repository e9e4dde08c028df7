-- Version 7: revival (nobroker.revivals, as the file engine and memory:// keep
-- it). A waiting job (mode 0) that a prerequisite's death cancels, or the
-- cancel of such a job (not a cancel by hand), is *dormant*: its row, state 4,
-- keeps its payload and limit keys as any cancelled row does, and `dormant`
-- holds what it still waited for, one row per prerequisite (`pos`: the order
-- given), `failed` for the dead or cancelled ones that keep it cancelled. As
-- each prerequisite goes on (nb_settle, below), its rows move: one that
-- succeeds is struck off, one that dies or is cancelled is failed.
-- `requeue_dead` of a dead job calls nb_revive in its statement (so the same
-- transaction): its rows are unmet again, and a dormant job that no failed row
-- keeps cancelled any longer waits again (state -2, its `waits` and
-- `prerequisites` rows written back from `dormant`), and so on for its own
-- dormant dependents. A failed prerequisite that is gone (deleted from the
-- dead-letter queue, swept, purged) is never requeued: its rows stay failed,
-- and the job cancelled for good; a dormant job swept or forgotten takes its
-- rows with it (sweep.sql, forget_key.sql), and one past its retention, still
-- unswept, is not revived (it is invisible already).
--
-- Exactly once, as in nb_settle (migrations/0004): whoever moves a dormant
-- job's rows first locks its job row, so a revival and the finish of one of
-- its unmet prerequisites in two transactions go one after the other, the
-- second reading the rows the first committed. O(1) per finish still: a
-- finished prerequisite reads its own `dormant` rows by key, and only when its
-- `dependents` flag says some job ever waited for it.

CREATE TABLE {schema}.dormant (
    queue text NOT NULL,
    prerequisite text NOT NULL,
    dependent text NOT NULL,
    pos integer NOT NULL,
    failed boolean NOT NULL,
    PRIMARY KEY (queue, prerequisite, dependent)
);
CREATE INDEX dormant_of ON {schema}.dormant (queue, dependent, pos);

-- nb_settle of migrations/0004, and: the rows of the jobs dormant on each
-- finished one are moved (struck off or failed), their job rows locked with the
-- waiting dependents'; a mode 0 dependent cancelled by a death (outcome 2) or
-- by a revivable cancel (5, this function's own code for the cancel of a
-- dormant job: a 4 to everything else) is made dormant, its unmet
-- `prerequisites` rows moved into `dormant` with the failed one.
CREATE OR REPLACE FUNCTION {schema}.nb_settle(q text, ids text[], states integer[],
                                              given float8, ttl float8) RETURNS bigint
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
    revives boolean;
    released bigint := 0;
    cancelled text[] := '{}';
BEGIN
    -- Every direct dependent's job row locked at once, in id order, before any
    -- is touched (dormant ones too): two ack_many calls that share dependents
    -- lock them in the same order (the loop below locks a cancelled
    -- dependent's own ones).
    PERFORM 1 FROM {schema}.jobs AS j
        WHERE j.queue = q AND j.id IN (SELECT p.dependent FROM {schema}.prerequisites AS p
                                       WHERE p.queue = q AND p.prerequisite = ANY(ids)
                                       UNION ALL
                                       SELECT o.dependent FROM {schema}.dormant AS o
                                       WHERE o.queue = q AND o.prerequisite = ANY(ids)
                                         AND NOT o.failed)
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
                                           WHERE p.queue = q AND p.prerequisite = gone
                                           UNION ALL
                                           SELECT o.dependent FROM {schema}.dormant AS o
                                           WHERE o.queue = q AND o.prerequisite = gone
                                             AND NOT o.failed)
            ORDER BY j.id FOR UPDATE;
        IF outcome = 3 THEN
            DELETE FROM {schema}.dormant
                WHERE queue = q AND prerequisite = gone AND NOT failed;
        ELSE
            UPDATE {schema}.dormant SET failed = true
                WHERE queue = q AND prerequisite = gone AND NOT failed;
        END IF;
        FOR d IN
            WITH edges AS (
                DELETE FROM {schema}.prerequisites
                WHERE queue = q AND prerequisite = gone RETURNING dependent, pos)
            UPDATE {schema}.waits AS w SET unmet = w.unmet - 1
            FROM edges WHERE w.queue = q AND w.id = edges.dependent
            RETURNING w.id, w.unmet, w.mode, edges.pos
        LOOP
            why := NULL;  -- NULL: still waiting; '': released; else cancelled, why
            revives := false;
            IF d.mode = 2 THEN
                IF outcome = 2 THEN
                    why := '';
                ELSIF d.unmet = 0 THEN
                    why := 'prerequisites finished without a failure';
                END IF;
            ELSIF d.mode = 0 AND outcome <> 3 THEN
                why := 'prerequisite ' || gone || CASE WHEN outcome = 2
                       THEN ' was dead-lettered' ELSE ' was cancelled' END;
                revives := outcome IN (2, 5);
            ELSIF d.unmet = 0 THEN
                why := '';
            END IF;
            CONTINUE WHEN why IS NULL;
            DELETE FROM {schema}.waits WHERE queue = q AND id = d.id;
            IF revives THEN
                WITH moved AS (
                    DELETE FROM {schema}.prerequisites
                    WHERE queue = q AND dependent = d.id RETURNING prerequisite, pos)
                INSERT INTO {schema}.dormant (queue, prerequisite, dependent, pos, failed)
                SELECT q, m.prerequisite, d.id, m.pos, false FROM moved AS m
                UNION ALL SELECT q, gone, d.id, d.pos, true;
            ELSE
                DELETE FROM {schema}.prerequisites WHERE queue = q AND dependent = d.id;
            END IF;
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
                    outcomes := outcomes || CASE WHEN revives THEN 5 ELSE 4 END;
                ELSIF revives THEN
                    DELETE FROM {schema}.dormant WHERE queue = q AND dependent = d.id;
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

-- Jobs `ids` wait or run again (dead ones requeued), at nb_now(`given`): the
-- dormant jobs that no failed prerequisite keeps cancelled any longer wait
-- again (last_error cleared, available from now), recursively. Returns how many
-- it revived (the caller's tally takes them from `kept` into `live`).
CREATE FUNCTION {schema}.nb_revive(q text, ids text[], given float8) RETURNS bigint
    LANGUAGE plpgsql VOLATILE SET enable_seqscan = off
    AS $$
DECLARE
    at float8 := {schema}.nb_now(given);
    todo text[] := ids;
    i integer := 1;
    back text;
    s record;
    unmet integer;
    revived bigint := 0;
BEGIN
    WHILE i <= cardinality(todo) LOOP
        back := todo[i];
        i := i + 1;
        -- Locked before their rows are read, as nb_settle locks them (above).
        PERFORM 1 FROM {schema}.jobs AS j
            WHERE j.queue = q AND j.id IN (SELECT o.dependent FROM {schema}.dormant AS o
                                           WHERE o.queue = q AND o.prerequisite = back
                                             AND o.failed)
            ORDER BY j.id FOR UPDATE;
        FOR s IN
            UPDATE {schema}.dormant SET failed = false
            WHERE queue = q AND prerequisite = back AND failed RETURNING dependent
        LOOP
            CONTINUE WHEN EXISTS (SELECT 1 FROM {schema}.dormant AS o
                                  WHERE o.queue = q AND o.dependent = s.dependent AND o.failed);
            UPDATE {schema}.jobs SET state = -2, available_at = at, finished_at = NULL,
                                     expires_at = NULL, last_error = NULL
                WHERE queue = q AND id = s.dependent AND state = 4 AND expires_at > at;
            IF FOUND THEN
                WITH moved AS (
                    DELETE FROM {schema}.dormant
                    WHERE queue = q AND dependent = s.dependent RETURNING prerequisite, pos)
                INSERT INTO {schema}.prerequisites (queue, prerequisite, dependent, pos)
                SELECT q, m.prerequisite, s.dependent, m.pos FROM moved AS m;
                GET DIAGNOSTICS unmet = ROW_COUNT;
                INSERT INTO {schema}.waits (queue, id, unmet, mode)
                    VALUES (q, s.dependent, unmet, 0);
                revived := revived + 1;
                todo := todo || s.dependent;
            ELSE  -- gone or past its retention: never revived
                DELETE FROM {schema}.dormant WHERE queue = q AND dependent = s.dependent;
            END IF;
        END LOOP;
    END LOOP;
    RETURN revived;
END $$;
