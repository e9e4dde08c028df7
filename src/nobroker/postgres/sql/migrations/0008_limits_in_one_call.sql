-- Version 8: a limited ack-and-lease in one round trip, a bounded count of a
-- key's holders, and the concurrency cap a job's enqueuer declared.
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

-- nb_limited_lease: a limited lease, in the statement that calls it
-- (queries/limited_ack_and_lease.sql): up to n jobs leased for vt seconds,
-- chosen as limits.Budget chooses on files and memory://, from the limits the
-- calling process declared: its rate keys (`rate_keys` as limit_windows names
-- them, `rate_stored` as the jobs' rate_key holds them, '' the queue's own)
-- with their counts and periods, and its concurrency families (stored form)
-- with their caps. The jobs in `freed` (the caller's ack and reclaims, in the
-- same statement) hold no slot any more. Their starts go into limit_windows.
--
-- Exact across processes and hosts: it first locks the queue's row (as
-- queries/limited_lock.sql does, held to the commit), and, VOLATILE, reads
-- with a snapshot taken after each lock: every limited lease of the queue
-- decides after the one before it committed, and reads all it wrote. Only the
-- rows it leased count as starts (a chosen row that an unlimited process holds
-- is skipped). The lease's time, its deadline's base, is its starts' (`now_`:
-- the clock read after the lock, never before a start already counted).
--
-- Reads: one probe per pair of keys with due jobs (index jobs_limited), the
-- heads of the pairs, and the holders of each concurrency key it considers
-- (index jobs_held, at most the key's cap of them).
CREATE FUNCTION {schema}.nb_limited_lease(
    q text, n integer, vt float8, given float8, freed text[],
    rate_keys text[], rate_stored text[], rate_counts integer[], rate_periods float8[],
    families text[], caps integer[])
RETURNS SETOF {schema}.jobs LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    now_ float8;
    rooms integer[] := rate_counts;
    held_keys text[] := '{}';
    frees integer[] := '{}';
    chosen text[] := '{}';
    chosen_rk text[] := '{}';
    leased text[];
    ids text[] := '{}';
    prios bigint[] := '{}';
    seqs bigint[] := '{}';
    rks integer[] := '{}';
    cks integer[] := '{}';
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
    SELECT greatest(now_, max(w.starts[cardinality(w.starts)])) INTO now_
    FROM {schema}.limit_windows AS w WHERE w.queue = q AND w.key = ANY(rate_keys);
    FOR i IN 1 .. coalesce(cardinality(rate_keys), 0) LOOP
        SELECT greatest(0, rate_counts[i] - count(*)) INTO k
        FROM {schema}.limit_windows AS w, unnest(w.starts) AS s(x)
        WHERE w.queue = q AND w.key = rate_keys[i] AND s.x > now_ - rate_periods[i];
        rooms[i] := k;
    END LOOP;
    -- The pairs of keys with pending jobs, one probe each; the heads (best n due
    -- jobs) of those whose keys have room. Simple queries, each planned once per
    -- session (a generic plan), where one recursive query was planned per call.
    SELECT j.rate_key, j.conc_key INTO p FROM {schema}.jobs AS j
    WHERE j.queue = q AND j.state <= 0 ORDER BY j.rate_key, j.conc_key LIMIT 1;
    WHILE FOUND LOOP
        i := CASE WHEN p.rate_key <> '' THEN array_position(rate_stored, p.rate_key) END;
        k := array_position(held_keys, p.conc_key);  -- a key seen with another rate key
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
        IF (i IS NULL OR rooms[i] > 0) AND (k IS NULL OR frees[k] > 0) THEN
            FOR c IN SELECT j.id, j.priority, j.seq FROM {schema}.jobs AS j
                     WHERE j.queue = q AND j.state <= 0 AND j.rate_key = p.rate_key
                       AND j.conc_key = p.conc_key AND j.state <> -2 AND j.available_at <= now_
                     ORDER BY j.priority DESC, j.seq LIMIT n LOOP
                ids := ids || c.id;
                prios := prios || c.priority;
                seqs := seqs || c.seq;
                rks := rks || i;
                cks := cks || k;
            END LOOP;
        END IF;
        SELECT j.rate_key, j.conc_key INTO p FROM {schema}.jobs AS j
        WHERE j.queue = q AND j.state <= 0 AND (j.rate_key, j.conc_key) > (p.rate_key, p.conc_key)
        ORDER BY j.rate_key, j.conc_key LIMIT 1;
    END LOOP;
    -- The choice, best first, as limits.Budget makes it.
    FOR c IN SELECT u.id, u.ri, u.ki FROM unnest(ids, prios, seqs, rks, cks) AS u(id, pr, sq, ri, ki)
             ORDER BY u.pr DESC, u.sq LOOP
        EXIT WHEN cardinality(chosen) >= n OR (own IS NOT NULL AND rooms[own] <= 0);
        CONTINUE WHEN (c.ri IS NOT NULL AND rooms[c.ri] <= 0)
                   OR (c.ki IS NOT NULL AND frees[c.ki] <= 0);
        IF c.ki IS NOT NULL THEN
            frees[c.ki] := frees[c.ki] - 1;
        END IF;
        IF own IS NOT NULL THEN
            rooms[own] := rooms[own] - 1;
        END IF;
        IF c.ri IS NOT NULL THEN
            rooms[c.ri] := rooms[c.ri] - 1;
        END IF;
        chosen := chosen || c.id;
        chosen_rk := chosen_rk || rate_keys[c.ri];
    END LOOP;
    IF cardinality(chosen) = 0 THEN
        RETURN;
    END IF;
    SELECT coalesce(array_agg(l.id), '{}') INTO leased FROM (
        SELECT l.id FROM {schema}.jobs AS l
        WHERE l.queue = q AND l.id = ANY(chosen) AND l.state IN (-1, 0)
        FOR UPDATE OF l SKIP LOCKED) AS l;
    RETURN QUERY UPDATE {schema}.jobs AS j SET state = 1, attempts = j.attempts + 1,
        token = nextval('{schema}.lease_token'), lease_until = now_ + vt
    WHERE j.queue = q AND j.id = ANY(leased)
    RETURNING j.*;
    -- The starts of the jobs leased: the queue's own, and each one's rate key.
    INSERT INTO {schema}.limit_windows AS w (queue, key, starts)
    SELECT q, s.key, array_fill(now_, ARRAY[count(*)::integer])
    FROM (SELECT u.rk AS key FROM unnest(chosen, chosen_rk) AS u(id, rk)
          WHERE u.id = ANY(leased) AND u.rk IS NOT NULL
          UNION ALL
          SELECT '' FROM unnest(leased) WHERE own IS NOT NULL) AS s
    GROUP BY s.key
    ON CONFLICT (queue, key) DO UPDATE SET starts = (w.starts || excluded.starts)[
        greatest(1, cardinality(w.starts) + cardinality(excluded.starts)
                    - rate_counts[array_position(rate_keys, w.key)] + 1):];
END $$;
