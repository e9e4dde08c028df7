-- Version 8: a limited lease (and ack-and-lease) in one statement, each start
-- of a rate window one row written, a key's holders counted by reading them
-- alone, and the concurrency cap a job's enqueuer declared.
--
-- conc_cap: the holders at once that the process which enqueued the job
-- declared for its concurrency key (NULL: none, or enqueued before version 8).
-- Display only (Queue.limit_use() in a process that did not declare the key
-- reports the cap of the key's latest live job); a lease obeys its own
-- process's declaration.
ALTER TABLE {schema}.jobs ADD COLUMN conc_cap integer;
-- The leased jobs of each concurrency key: a key's holders are counted by
-- reading them alone (at most its cap), never every leased row of the queue.
CREATE INDEX jobs_held ON {schema}.jobs (queue, conc_key) WHERE state = 1 AND conc_key <> '';
-- The live jobs (waiting, pending, leased) of each concurrency key, latest last:
-- a key's cap as limit_use reports it is its latest live job's.
CREATE INDEX jobs_of_key ON {schema}.jobs (queue, conc_key, seq)
    WHERE conc_key <> '' AND state BETWEEN -2 AND 1;

-- A rate key's window as a ring of `size` slots (at least its limit's count):
-- the latest `size` starts, one row each in limit_starts, slot `next` the one
-- the next start overwrites, `last` the latest start. A start under a count C
-- is allowed while the C-th latest start (slot next - C) is none or a period
-- old: limits.Window.room's test, one row read and one written per start, where
-- the array `starts` was read and written whole on every lease (O(count):
-- 100,000 a second made each lease rewrite thousands of floats). A count
-- declared above the size lays the ring out again, larger, keeping every start;
-- a smaller one reads the same ring, so that processes declaring the key
-- differently never lose each other's starts. The arrays written up to version
-- 7 move into the ring, its size unknown (NULL: laid out at the next lease);
-- `starts` stays, empty.
ALTER TABLE {schema}.limit_windows ADD COLUMN size integer,
                                   ADD COLUMN next integer NOT NULL DEFAULT 0,
                                   ADD COLUMN last float8;
CREATE TABLE {schema}.limit_starts (
    queue text NOT NULL,
    key text NOT NULL,
    slot integer NOT NULL,
    at float8 NOT NULL,
    PRIMARY KEY (queue, key, slot));
INSERT INTO {schema}.limit_starts (queue, key, slot, at)
SELECT w.queue, w.key, (u.o - 1)::integer, u.x
FROM {schema}.limit_windows AS w, unnest(w.starts) WITH ORDINALITY AS u(x, o);
UPDATE {schema}.limit_windows
SET next = coalesce(cardinality(starts), 0), last = starts[cardinality(starts)], starts = '{}';

-- Whether the ring slot `slot` of a rate key is free for a start: no start in it
-- after `since` (the time a period ago).
CREATE FUNCTION {schema}.nb_slot_free(q text, k text, ring_slot integer, since float8)
RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT NOT EXISTS (SELECT 1 FROM {schema}.limit_starts AS s
                       WHERE s.queue = q AND s.key = k AND s.slot = ring_slot
                         AND s.at > since) $$;

-- nb_limited_lease: a limited lease, in the statement that calls it
-- (queries/limited_lease.sql, limited_ack_and_lease.sql): up to n jobs leased
-- for vt seconds, chosen as limits.Budget chooses on files and memory://, from
-- the limits the calling process declared: its rate keys (`rate_keys` as
-- limit_windows names them, `rate_stored` as the jobs' rate_key holds them, ''
-- the queue's own) with their counts and periods, and its concurrency families
-- (stored form) with their caps. The jobs in `freed` (the caller's ack and
-- reclaims, in the same statement) hold no slot any more. The starts of the
-- rows it leased go into their windows' rings.
--
-- Exact across processes and hosts: it first locks the queue's row (as the
-- limited lease of version 6 did, held to the commit), and, VOLATILE, reads
-- with a snapshot taken after the lock: every limited lease of the queue
-- decides after the one before it committed, and reads all it wrote. Only the
-- rows it leased count as starts (a chosen row that an unlimited process holds
-- is skipped). The lease's time, its deadline's base, is its starts' (`now_`:
-- the clock read after the lock, never before a start already counted).
--
-- Reads: a ring's head per rate key and start, one probe per pair of keys with
-- pending jobs (index jobs_limited), the heads of the pairs with room, and the
-- holders of each concurrency key it meets (index jobs_held, at most its cap).
-- Each query is simple, so that it is planned once per session (a generic
-- plan), where one recursive query was planned on every call.
CREATE FUNCTION {schema}.nb_limited_lease(
    q text, n integer, vt float8, given float8, freed text[],
    rate_keys text[], rate_stored text[], rate_counts integer[], rate_periods float8[],
    families text[], caps integer[])
RETURNS SETOF {schema}.jobs LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    now_ float8;
    nrates integer := coalesce(cardinality(rate_keys), 0);
    nexts integer[] := array_fill(0, ARRAY[nrates]);
    sizes integer[] := rate_counts;
    taken integer[] := array_fill(0, ARRAY[nrates]);
    held_keys text[] := '{}';
    frees integer[] := '{}';
    chosen text[] := '{}';
    chosen_ri integer[] := '{}';
    ids text[] := '{}';
    prios bigint[] := '{}';
    seqs bigint[] := '{}';
    ris integer[] := '{}';
    kis integer[] := '{}';
    kept float8[];
    w record;
    p record;
    c record;
    i integer;
    k integer;
    f integer;
    own integer := array_position(rate_keys, '');
BEGIN
    IF n <= 0 OR (SELECT qs.paused FROM {schema}.queues AS qs WHERE qs.name = q
                  FOR NO KEY UPDATE) THEN
        RETURN;
    END IF;
    now_ := coalesce(given, extract(epoch FROM clock_timestamp())::float8);
    FOR i IN 1 .. nrates LOOP
        SELECT lw.size, lw.next, lw.last INTO w FROM {schema}.limit_windows AS lw
        WHERE lw.queue = q AND lw.key = rate_keys[i];
        IF FOUND AND (w.size IS NULL OR w.size < rate_counts[i]) THEN
            -- Laid out again, at least as large as declared: every start, oldest at 0.
            kept := ARRAY(SELECT s.at FROM {schema}.limit_starts AS s
                          WHERE s.queue = q AND s.key = rate_keys[i] ORDER BY s.at);
            DELETE FROM {schema}.limit_starts AS s WHERE s.queue = q AND s.key = rate_keys[i];
            INSERT INTO {schema}.limit_starts (queue, key, slot, at)
            SELECT q, rate_keys[i], (u.o - 1)::integer, u.x
            FROM unnest(kept) WITH ORDINALITY AS u(x, o);
            sizes[i] := greatest(rate_counts[i], cardinality(kept));
            nexts[i] := cardinality(kept) % sizes[i];
            UPDATE {schema}.limit_windows AS lw SET size = sizes[i], next = nexts[i]
            WHERE lw.queue = q AND lw.key = rate_keys[i];
            now_ := greatest(now_, w.last);
        ELSIF FOUND THEN
            sizes[i] := w.size;
            nexts[i] := w.next;
            now_ := greatest(now_, w.last);
        END IF;
    END LOOP;
    IF own IS NOT NULL AND NOT {schema}.nb_slot_free(q, '', (nexts[own] - rate_counts[own]
            + sizes[own]) % sizes[own], now_ - rate_periods[own]) THEN
        RETURN;  -- the queue's own window is full
    END IF;
    -- The pairs of keys with pending jobs, one probe each, and the heads (best n
    -- due jobs) of those whose keys have room now.
    SELECT j.rate_key, j.conc_key INTO p FROM {schema}.jobs AS j
    WHERE j.queue = q AND j.state <= 0 ORDER BY j.rate_key, j.conc_key LIMIT 1;
    WHILE FOUND LOOP
        i := CASE WHEN p.rate_key <> '' THEN array_position(rate_stored, p.rate_key) END;
        k := array_position(held_keys, p.conc_key);  -- a key met with another rate key
        IF k IS NULL AND p.conc_key <> '' THEN
            FOR f IN 1 .. coalesce(cardinality(families), 0) LOOP
                IF p.conc_key = families[f] OR starts_with(p.conc_key, families[f] || '\0')
                THEN
                    held_keys := held_keys || p.conc_key;
                    frees := frees || (caps[f] - (
                        SELECT count(*) FROM {schema}.jobs AS j
                        WHERE j.queue = q AND j.state = 1 AND j.conc_key = p.conc_key
                          AND j.conc_key <> '' AND j.id <> ALL(freed)))::integer;
                    k := cardinality(held_keys);
                    EXIT;
                END IF;
            END LOOP;
        END IF;
        IF (k IS NULL OR frees[k] > 0) AND (i IS NULL OR {schema}.nb_slot_free(q, rate_keys[i],
                (nexts[i] - rate_counts[i] + sizes[i]) % sizes[i], now_ - rate_periods[i])) THEN
            FOR c IN SELECT j.id, j.priority, j.seq FROM {schema}.jobs AS j
                     WHERE j.queue = q AND j.state <= 0 AND j.rate_key = p.rate_key
                       AND j.conc_key = p.conc_key AND j.state <> -2 AND j.available_at <= now_
                     ORDER BY j.priority DESC, j.seq LIMIT n LOOP
                ids := ids || c.id;
                prios := prios || c.priority;
                seqs := seqs || c.seq;
                ris := ris || i;
                kis := kis || k;
            END LOOP;
        END IF;
        SELECT j.rate_key, j.conc_key INTO p FROM {schema}.jobs AS j
        WHERE j.queue = q AND j.state <= 0 AND (j.rate_key, j.conc_key) > (p.rate_key, p.conc_key)
        ORDER BY j.rate_key, j.conc_key LIMIT 1;
    END LOOP;
    -- The choice, best first, as limits.Budget makes it: the j-th start this call
    -- makes under a count C is allowed if the C-th latest start before it (slot
    -- next + j - C) is a period old.
    FOR c IN SELECT u.id, u.ri, u.ki FROM unnest(ids, prios, seqs, ris, kis) AS u(id, pr, sq, ri, ki)
             ORDER BY u.pr DESC, u.sq LOOP
        EXIT WHEN cardinality(chosen) >= n;
        IF own IS NOT NULL AND (taken[own] >= rate_counts[own] OR NOT {schema}.nb_slot_free(
                q, '', (nexts[own] + taken[own] - rate_counts[own] + sizes[own]) % sizes[own],
                now_ - rate_periods[own])) THEN
            EXIT;
        END IF;
        CONTINUE WHEN c.ki IS NOT NULL AND frees[c.ki] <= 0;
        CONTINUE WHEN c.ri IS NOT NULL AND (taken[c.ri] >= rate_counts[c.ri]
            OR NOT {schema}.nb_slot_free(q, rate_keys[c.ri], (nexts[c.ri] + taken[c.ri]
                - rate_counts[c.ri] + sizes[c.ri]) % sizes[c.ri], now_ - rate_periods[c.ri]));
        IF c.ki IS NOT NULL THEN
            frees[c.ki] := frees[c.ki] - 1;
        END IF;
        IF own IS NOT NULL THEN
            taken[own] := taken[own] + 1;
        END IF;
        IF c.ri IS NOT NULL THEN
            taken[c.ri] := taken[c.ri] + 1;
        END IF;
        chosen := chosen || c.id;
        chosen_ri := chosen_ri || c.ri;
    END LOOP;
    IF cardinality(chosen) = 0 THEN
        RETURN;
    END IF;
    -- One row at a time, by its key (`id = ANY(array)`, planned generically, may
    -- read every row of the queue), counting the starts of those leased: the
    -- queue's own, and each one's rate key.
    taken := array_fill(0, ARRAY[nrates]);
    FOR i IN 1 .. cardinality(chosen) LOOP
        RETURN QUERY UPDATE {schema}.jobs AS j SET state = 1, attempts = j.attempts + 1,
            token = nextval('{schema}.lease_token'), lease_until = now_ + vt
        WHERE j.queue = q AND j.id = (
            SELECT l.id FROM {schema}.jobs AS l
            WHERE l.queue = q AND l.id = chosen[i] AND l.state IN (-1, 0)
            FOR UPDATE SKIP LOCKED)  -- none: an unlimited process's lease holds it
        RETURNING j.*;
        CONTINUE WHEN NOT FOUND;
        IF own IS NOT NULL THEN
            taken[own] := taken[own] + 1;
        END IF;
        IF chosen_ri[i] IS NOT NULL THEN
            taken[chosen_ri[i]] := taken[chosen_ri[i]] + 1;
        END IF;
    END LOOP;
    FOR i IN 1 .. nrates LOOP
        CONTINUE WHEN taken[i] = 0;
        INSERT INTO {schema}.limit_starts AS s (queue, key, slot, at)
        SELECT q, rate_keys[i], (nexts[i] + g) % sizes[i], now_
        FROM generate_series(0, taken[i] - 1) AS g
        ON CONFLICT (queue, key, slot) DO UPDATE SET at = excluded.at;
        INSERT INTO {schema}.limit_windows AS lw (queue, key, starts, size, next, last)
        VALUES (q, rate_keys[i], '{}', sizes[i], (nexts[i] + taken[i]) % sizes[i], now_)
        ON CONFLICT (queue, key) DO UPDATE
        SET size = excluded.size, next = excluded.next, last = excluded.last;
    END LOOP;
END $$;
