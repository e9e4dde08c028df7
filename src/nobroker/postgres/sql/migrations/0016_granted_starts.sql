-- Version 16: granted starts. A rate-limited lease of one job on PostgreSQL wrote
-- its start under the lock on the queue's row, each time: its window's row and a
-- ring slot, about 1.15x-1.2x an unlimited ack_and_lease end to end however the
-- ring is laid out (docs/BENCHMARKS.md, "PostgreSQL rate limits: what the rest of
-- the cost is made of"). Now such a lease, when its window will be at most half
-- used, also takes up to `want` more starts (a quarter of the count at most) for
-- the process that made it, recorded at once at `until`: now plus a twentieth
-- of the period, at most 0.05 s, the latest time the process may use them.
-- Until then its ack_and_lease uses one with no lock and no write but the
-- job's, if the best due job's start counts in that window alone and it has no
-- concurrency key; a start granted and not used (the process stopped, was
-- killed, or leased another job) counts as made. Why it stays exact: a start
-- is never recorded before it happened, and every check counts all starts
-- recorded after now minus the period, later ones included. Take any window of
-- the period and, of the decisions that put starts in it, the last one, at time
-- t (a decision's starts happen at t or later, within the window): each earlier
-- start in the window happened after t minus the period, so was recorded then
-- or later, so that decision counted it with its own.
--
-- So the walk (nb_limited_lease, its body of version 15) now checks windows,
-- readies delayed jobs and sets lease deadlines at now, and only records its
-- starts at the window's latest start if that is later (it used that later time
-- for everything: a start granted would have shifted the checks by up to 0.05 s,
-- and let another process start one more in a window). nb_limited_lease_granted
-- replaces nb_limited_lease_rated (migrations/0013, kept for a process of an
-- earlier version) in limited_lease.sql (want 0: no grant) and
-- limited_ack_and_lease.sql; its lean lease records its start the same way, so
-- a window with starts granted ahead is no longer left to the walk.
CREATE OR REPLACE FUNCTION {schema}.nb_limited_lease(
    q text, n integer, vt float8, given float8, freed text[],
    rate_keys text[], rate_stored text[], rate_counts integer[], rate_periods float8[],
    families text[], caps integer[])
RETURNS SETOF {schema}.jobs LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    now_ float8;
    at_ float8;  -- when its starts are recorded: never before one recorded
    nrates integer := coalesce(cardinality(rate_keys), 0);
    nexts integer[];
    sizes integer[];
    taken integer[];
    held_keys text[] := '{}';
    frees integer[] := '{}';
    chosen text[] := '{}';
    chosen_ri integer[] := '{}';
    chosen_at tid[] := '{}';
    ids text[] := '{}';
    ats tid[] := '{}';
    prios bigint[] := '{}';
    seqs bigint[] := '{}';
    ris integer[] := '{}';
    kis integer[] := '{}';
    kept float8[];
    wkeys text[];
    wsizes integer[];
    wnexts integer[];
    wlasts float8[];
    rk text;
    ck text;
    cids text[];
    cprios bigint[];
    cseqs bigint[];
    cats tid[];
    c record;
    i integer;
    k integer;
    f integer;
    cap integer;
    free_ integer;
    own integer := array_position(rate_keys, '');
    first_rk text;
    met text;
    at_rk text;
    at_ck text;
    full_keys text[] := '{}';
    full_caps integer[] := '{}';
    empty_rks text[] := '{}';
    empty_cks text[] := '{}';
    pend boolean;
BEGIN
    IF n <= 0 OR (SELECT qs.paused FROM {schema}.queues AS qs WHERE qs.name = q
                  FOR NO KEY UPDATE) THEN
        RETURN;
    END IF;
    now_ := coalesce(given, extract(epoch FROM clock_timestamp())::float8);
    at_ := now_;
    -- The common case in one statement: one job wanted, and the best due one (as
    -- an unlimited lease picks it: the first the walk's choice would consider)
    -- within its keys' limits (its rate key's window laid out as declared, its
    -- concurrency key with room); none waiting and due (their order is the walk's).
    -- Then the walk's choice is that job: leased, its starts written.
    IF n = 1 THEN
        RETURN QUERY
        WITH t AS (
            SELECT greatest(now_, max(lw.last)) AS at FROM {schema}.limit_windows AS lw
            WHERE nrates > 0 AND lw.queue = q AND lw.key = ANY(rate_keys)),  -- none: not read
        cand AS MATERIALIZED (
            SELECT j.id, j.ctid AS at, j.conc_key AS ck,
                   CASE WHEN j.rate_key <> '' THEN array_position(rate_stored, j.rate_key)
                   END AS ri
            FROM {schema}.jobs AS j, t
            WHERE j.queue = q AND j.state = 0 AND j.available_at <= now_
              AND NOT EXISTS (SELECT 1 FROM {schema}.jobs AS w
                              WHERE w.queue = q AND w.state = -1 AND w.available_at <= now_)
            ORDER BY j.priority DESC, j.seq LIMIT 1),
        win AS MATERIALIZED (  -- the windows its start counts in: the queue's own, its rate key's
            SELECT u.k, lw.key IS NOT NULL AS known, coalesce(lw.size, rate_counts[u.k]) AS size,
                   coalesce(lw.next, 0) AS next, lw.size >= rate_counts[u.k] AS laid,
                   lw.ctid AS w_at, (SELECT s.ctid FROM {schema}.limit_starts AS s
                                     WHERE s.queue = q AND s.key = lw.key AND s.slot = lw.next
                                    ) AS s_at  -- the slot its start overwrites, if written
            FROM cand CROSS JOIN unnest(ARRAY[own, cand.ri]) AS u(k)
            LEFT JOIN {schema}.limit_windows AS lw ON lw.queue = q AND lw.key = rate_keys[u.k]
            WHERE u.k IS NOT NULL),
        pick AS MATERIALIZED (
            SELECT cand.id, cand.at FROM cand, t
            WHERE NOT EXISTS (
                SELECT 1 FROM win WHERE win.known AND (win.laid IS NOT TRUE OR EXISTS (
                    SELECT 1 FROM {schema}.limit_starts AS s
                    WHERE s.queue = q AND s.key = rate_keys[win.k]
                      AND s.slot = (win.next - rate_counts[win.k] + win.size) % win.size
                      AND s.at > now_ - rate_periods[win.k])))
              AND CASE WHEN cand.ck = '' THEN true  -- no concurrency key: no holders read
                       ELSE coalesce((SELECT u.cap FROM unnest(families, caps) WITH ORDINALITY
                                          AS u(f, cap, o)
                                      WHERE cand.ck = u.f OR starts_with(cand.ck, u.f || '\0')
                                      ORDER BY u.o LIMIT 1) - (
                                SELECT count(*) FROM {schema}.jobs AS h
                                WHERE h.queue = q AND h.state = 1 AND h.conc_key = cand.ck
                                  AND h.conc_key <> '' AND h.id <> ALL(freed)), 1) > 0 END),
        up AS (
            UPDATE {schema}.jobs AS j SET state = 1, attempts = j.attempts + 1,
                token = nextval('{schema}.lease_token'), lease_until = now_ + vt
            FROM t
            WHERE j.ctid = (SELECT l.ctid FROM {schema}.jobs AS l
                            WHERE l.ctid = (SELECT pick.at FROM pick) AND l.queue = q
                              AND l.id = (SELECT pick.id FROM pick) AND l.state = 0
                            FOR UPDATE SKIP LOCKED)
            RETURNING j.*),
        -- Its starts: each ring slot `next` and window row written with a plain
        -- UPDATE where it exists, found by the version `win` read after the lock
        -- (ctid: a TID scan whatever the statistics), an INSERT where not; an
        -- upsert (ON CONFLICT DO UPDATE) locks the row first, one WAL record more.
        started AS (
            UPDATE {schema}.limit_starts AS s SET at = t.at FROM t
            WHERE EXISTS (SELECT 1 FROM up)
              AND (s.ctid = (SELECT win.s_at FROM win WHERE win.k = own)  -- two at most: a TID scan
                   OR s.ctid = (SELECT win.s_at FROM win WHERE win.k IS DISTINCT FROM own))),
        started_first AS (
            INSERT INTO {schema}.limit_starts (queue, key, slot, at)
            SELECT q, rate_keys[win.k], win.next, t.at FROM win, t
            WHERE EXISTS (SELECT 1 FROM up) AND win.s_at IS NULL),
        windows AS (
            UPDATE {schema}.limit_windows AS lw
            SET next = (win.next + 1) % win.size, last = t.at FROM win, t
            WHERE EXISTS (SELECT 1 FROM up) AND lw.ctid = win.w_at),
        windows_first AS (
            INSERT INTO {schema}.limit_windows (queue, key, starts, size, next, last)
            SELECT q, rate_keys[win.k], '{}', win.size, 1 % win.size, t.at FROM win, t
            WHERE EXISTS (SELECT 1 FROM up) AND win.w_at IS NULL)
        SELECT up.* FROM up;
        IF FOUND THEN
            RETURN;
        END IF;
    END IF;
    -- The keys of the slots this statement freed (`freed`: its ack, its reclaims)
    -- unparked now: the triggers that unpark them fire at the statement's end. A
    -- row locked is being unparked by another writer (no wait under the lock: that
    -- writer may wait for it, in a transaction of its own).
    IF cardinality(freed) > 0 THEN
        UPDATE {schema}.limit_pairs AS p SET parked = false FROM (
            SELECT x.at FROM (SELECT DISTINCT j.conc_key FROM {schema}.jobs AS j
                              WHERE j.queue = q AND j.id = ANY(freed) AND j.conc_key <> ''
                             ) AS f(ck), LATERAL (
                SELECT l.ctid AS at FROM {schema}.limit_pairs AS l
                WHERE l.queue = q AND l.parked AND l.conc_key = f.ck
                FOR NO KEY UPDATE OF l SKIP LOCKED) AS x) AS u
        WHERE p.ctid = u.at;
    END IF;
    nexts := array_fill(0, ARRAY[nrates]);
    sizes := rate_counts;
    taken := array_fill(0, ARRAY[nrates]);
    -- Read after the lock: the declared rate keys' windows, and the first pair of
    -- keys with pending jobs: the unlimited one ('', '', index jobs_limited) if it
    -- has any, else the first unparked row of limit_pairs.
    SELECT w.keys, w.sizes, w.nexts, w.lasts, fp.rate_key, fp.conc_key
    INTO wkeys, wsizes, wnexts, wlasts, rk, ck
    FROM (SELECT array_agg(lw.key) AS keys, array_agg(lw.size) AS sizes,
                 array_agg(lw.next) AS nexts, array_agg(lw.last) AS lasts
          FROM {schema}.limit_windows AS lw
          WHERE lw.queue = q AND lw.key = ANY(rate_keys)) AS w
    LEFT JOIN LATERAL (
        (SELECT ''::text AS rate_key, ''::text AS conc_key WHERE EXISTS (
             SELECT 1 FROM {schema}.jobs AS j
             WHERE j.queue = q AND j.state <= 0 AND j.rate_key = '' AND j.conc_key = ''))
        UNION ALL
        (SELECT p.rate_key, p.conc_key FROM {schema}.limit_pairs AS p
         WHERE p.queue = q AND NOT p.parked ORDER BY p.rate_key, p.conc_key LIMIT 1)
        LIMIT 1) AS fp ON true;
    FOR i IN 1 .. nrates LOOP
        k := array_position(wkeys, rate_keys[i]);
        CONTINUE WHEN k IS NULL;  -- no start yet
        at_ := greatest(at_, wlasts[k]);
        IF wsizes[k] IS NULL OR wsizes[k] < rate_counts[i] THEN
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
        ELSE
            sizes[i] := wsizes[k];
            nexts[i] := wnexts[k];
        END IF;
    END LOOP;
    -- A start under a count C is allowed while the C-th latest start (ring slot
    -- next - C) is none or a period old (limits.Window.room).
    IF own IS NOT NULL AND EXISTS (SELECT 1 FROM {schema}.limit_starts AS s
            WHERE s.queue = q AND s.key = '' AND s.slot = (nexts[own] - rate_counts[own]
                + sizes[own]) % sizes[own] AND s.at > now_ - rate_periods[own]) THEN
        RETURN;  -- the queue's own window is full
    END IF;
    -- Each pair of keys with pending jobs but a parked one, one query each: its
    -- rate key's room for a first start, its concurrency key's holders if the
    -- rate key has room and the pair a pending job (a pair's row outlives its last
    -- one until a walk meets it; at most its cap, index jobs_held; once a call for
    -- a key with room, counted again if a full key is met again with another rate
    -- key), its head (the best n due jobs) if both allow, and the next unparked
    -- pair (one probe of limit_pairs): past the last pair of its rate key when
    -- that key's window is full, as no pair of it may start a job in this call.
    first_rk := rk;
    WHILE rk IS NOT NULL LOOP
        at_rk := rk;
        at_ck := ck;
        i := CASE WHEN rk <> '' THEN array_position(rate_stored, rk) END;
        -- A key met before, with an earlier rate key (pairs come by rate key, then
        -- concurrency key): none while the walk is at its first rate key.
        k := CASE WHEN rk <> first_rk THEN array_position(held_keys, ck) END;
        cap := NULL;
        IF k IS NULL AND ck <> '' THEN
            FOR f IN 1 .. coalesce(cardinality(families), 0) LOOP
                IF ck = families[f] OR starts_with(ck, families[f] || '\0') THEN
                    cap := caps[f];
                    met := ck;  -- kept after the query if it has room (it reads the next pair)
                    EXIT;
                END IF;
            END LOOP;
        END IF;
        SELECT h.free_, hd.ids, hd.prios, hd.seqs, hd.ats, x.rate_key, x.conc_key, h.pend
        INTO free_, cids, cprios, cseqs, cats, rk, ck, pend
        FROM (SELECT CASE WHEN cap IS NOT NULL AND pe.pend AND NOT pe.rate_full THEN cap - (
                         SELECT count(*) FROM {schema}.jobs AS j
                         WHERE j.queue = q AND j.state = 1 AND j.conc_key = ck
                           AND j.conc_key <> '' AND j.id <> ALL(freed))::integer END AS free_,
                     pe.pend AND NOT pe.rate_full AS room, pe.pend, pe.rate_full
              FROM (SELECT EXISTS (SELECT 1 FROM {schema}.jobs AS j
                                   WHERE j.queue = q AND j.state IN (-1, 0)
                                     AND j.rate_key = rk AND j.conc_key = ck) AS pend,
                           i IS NOT NULL AND EXISTS (
                               SELECT 1 FROM {schema}.limit_starts AS s
                               WHERE s.queue = q AND s.key = rate_keys[i] AND s.slot = (nexts[i]
                                   - rate_counts[i] + sizes[i]) % sizes[i]
                                 AND s.at > now_ - rate_periods[i]) AS rate_full) AS pe
             ) AS h
        LEFT JOIN LATERAL (
            SELECT array_agg(l.id) AS ids, array_agg(l.priority) AS prios,
                   array_agg(l.seq) AS seqs, array_agg(l.ctid) AS ats
            FROM (SELECT j.id, j.priority, j.seq, j.ctid FROM {schema}.jobs AS j
                  WHERE h.room AND coalesce(h.free_, frees[k], 1) > 0
                    AND j.queue = q AND j.state <= 0 AND j.rate_key = rk AND j.conc_key = ck
                    AND j.state <> -2 AND j.available_at <= now_
                  ORDER BY j.priority DESC, j.seq LIMIT n) AS l) AS hd ON true
        LEFT JOIN LATERAL (  -- past every pair of a full rate key, in one probe
            (SELECT p.rate_key, p.conc_key FROM {schema}.limit_pairs AS p
             WHERE NOT h.rate_full AND p.queue = q AND NOT p.parked
               AND (p.rate_key, p.conc_key) > (rk, ck)
             ORDER BY p.rate_key, p.conc_key LIMIT 1)
            UNION ALL
            (SELECT p.rate_key, p.conc_key FROM {schema}.limit_pairs AS p
             WHERE h.rate_full AND p.queue = q AND NOT p.parked AND p.rate_key > rk
             ORDER BY p.rate_key, p.conc_key LIMIT 1)
            LIMIT 1) AS x ON true;
        IF cap IS NOT NULL AND free_ > 0 THEN  -- kept, its free slots for the choice
            held_keys := held_keys || met;
            frees := frees || free_;
            k := cardinality(held_keys);
        ELSIF cap IS NOT NULL AND free_ <= 0 THEN  -- full: parked below if still full then
            full_keys := full_keys || met;
            full_caps := full_caps || cap;
        END IF;
        IF NOT pend AND (at_rk <> '' OR at_ck <> '') THEN  -- none pending: deleted below
            empty_rks := empty_rks || at_rk;
            empty_cks := empty_cks || at_ck;
        END IF;
        IF cids IS NOT NULL THEN
            ids := ids || cids;
            prios := prios || cprios;
            seqs := seqs || cseqs;
            ats := ats || cats;
            ris := ris || array_fill(i, ARRAY[cardinality(cids)]);
            kis := kis || array_fill(k, ARRAY[cardinality(cids)]);
        END IF;
    END LOOP;
    -- The full keys met parked: each pair of one whose holders, locked (FOR
    -- SHARE, its cap of them at most) and counted after the lock, still fill its
    -- cap. A holder being finished meanwhile is locked by its finisher: skipped
    -- (SKIP LOCKED, no wait under the queue's lock), so the key is not parked;
    -- one finished after this lock waits for this commit, and its trigger
    -- (nb_pair_changed) then unparks the key. A pair's row being unparked by
    -- another writer is skipped too (an enqueue's FOR KEY SHARE does not stop it).
    IF cardinality(full_keys) > 0 THEN
        UPDATE {schema}.limit_pairs AS p SET parked = true FROM (
            SELECT x.at FROM unnest(full_keys, full_caps) AS f(ck, cap), LATERAL (
                SELECT l.ctid AS at FROM {schema}.limit_pairs AS l
                WHERE l.queue = q AND l.conc_key = f.ck AND NOT l.parked
                  AND (SELECT count(*) FROM (
                          SELECT 1 FROM {schema}.jobs AS h
                          WHERE h.queue = q AND h.state = 1 AND h.conc_key = f.ck
                            AND h.conc_key <> '' AND h.id <> ALL(freed)
                          LIMIT f.cap FOR SHARE OF h SKIP LOCKED) AS held) >= f.cap
                FOR NO KEY UPDATE OF l SKIP LOCKED) AS x) AS u
        WHERE p.ctid = u.at;
    END IF;
    -- The pairs met with no pending job deleted, unless a writer making one of
    -- their jobs pending holds the row (FOR KEY SHARE: SKIP LOCKED); a job made
    -- pending since the walk read the pair (committed before the lock) puts it
    -- back, read after the DELETE.
    IF cardinality(empty_rks) > 0 THEN
        WITH gone AS (
            DELETE FROM {schema}.limit_pairs AS p USING (
                SELECT x.at FROM unnest(empty_rks, empty_cks) AS e(rk, ck), LATERAL (
                    SELECT l.ctid AS at FROM {schema}.limit_pairs AS l
                    WHERE l.queue = q AND l.rate_key = e.rk AND l.conc_key = e.ck
                    FOR UPDATE OF l SKIP LOCKED) AS x) AS e
            WHERE p.ctid = e.at
            RETURNING p.rate_key, p.conc_key)
        SELECT array_agg(gone.rate_key), array_agg(gone.conc_key) INTO empty_rks, empty_cks
        FROM gone;
        INSERT INTO {schema}.limit_pairs (queue, rate_key, conc_key)
        SELECT q, g.rk, g.ck FROM unnest(empty_rks, empty_cks) AS g(rk, ck), LATERAL (
            SELECT 1 FROM {schema}.jobs AS j
            WHERE j.queue = q AND j.state IN (-1, 0) AND j.rate_key = g.rk
              AND j.conc_key = g.ck LIMIT 1) AS pending
        ON CONFLICT DO NOTHING;
    END IF;
    -- The choice, best first, as limits.Budget makes it: the j-th start this call
    -- makes under a count C is allowed if the C-th latest start before it (slot
    -- next + j - C) is a period old; the first (j = 0) was tested above, so a
    -- single candidate is chosen without a query.
    IF cardinality(ids) = 1 THEN
        chosen := ids;
        chosen_ri := ris;
        chosen_at := ats;
    ELSE
        FOR c IN SELECT u.id, u.ri, u.ki, u.at
                 FROM unnest(ids, prios, seqs, ris, kis, ats) AS u(id, pr, sq, ri, ki, at)
                 ORDER BY u.pr DESC, u.sq LOOP
            EXIT WHEN cardinality(chosen) >= n;
            IF own IS NOT NULL AND taken[own] > 0 AND (taken[own] >= rate_counts[own]
                    OR EXISTS (SELECT 1 FROM {schema}.limit_starts AS s
                        WHERE s.queue = q AND s.key = '' AND s.slot = (nexts[own] + taken[own]
                            - rate_counts[own] + sizes[own]) % sizes[own]
                          AND s.at > now_ - rate_periods[own])) THEN
                EXIT;
            END IF;
            CONTINUE WHEN c.ki IS NOT NULL AND frees[c.ki] <= 0;
            CONTINUE WHEN c.ri IS NOT NULL AND taken[c.ri] > 0 AND (taken[c.ri] >= rate_counts[c.ri]
                OR EXISTS (SELECT 1 FROM {schema}.limit_starts AS s
                    WHERE s.queue = q AND s.key = rate_keys[c.ri] AND s.slot = (nexts[c.ri]
                        + taken[c.ri] - rate_counts[c.ri] + sizes[c.ri]) % sizes[c.ri]
                      AND s.at > now_ - rate_periods[c.ri]));
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
            chosen_at := chosen_at || c.at;
        END LOOP;
    END IF;
    IF cardinality(chosen) = 0 THEN
        RETURN;
    END IF;
    -- One row at a time, by the row version the walk read (ctid: a TID scan
    -- whatever the statistics; by id, the generic plan chose by the queue alone on
    -- a table not analyzed yet and read every row of it, 230 us a lease beside 340
    -- jobs; `id = ANY(array)` may too), counting the starts of those leased: the
    -- queue's own, and each one's rate key. A row changed since the walk read it
    -- is not found (an unlimited process's lease took it), as a locked one.
    taken := array_fill(0, ARRAY[nrates]);
    FOR i IN 1 .. cardinality(chosen) LOOP
        RETURN QUERY UPDATE {schema}.jobs AS j SET state = 1, attempts = j.attempts + 1,
            token = nextval('{schema}.lease_token'), lease_until = now_ + vt
        WHERE j.ctid = (
            SELECT l.ctid FROM {schema}.jobs AS l
            WHERE l.ctid = chosen_at[i] AND l.queue = q AND l.id = chosen[i]
              AND l.state IN (-1, 0)
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
        WITH started AS (
            INSERT INTO {schema}.limit_starts AS s (queue, key, slot, at)
            SELECT q, rate_keys[i], (nexts[i] + g) % sizes[i], at_
            FROM generate_series(0, taken[i] - 1) AS g
            ON CONFLICT (queue, key, slot) DO UPDATE SET at = excluded.at)
        INSERT INTO {schema}.limit_windows AS lw (queue, key, starts, size, next, last)
        VALUES (q, rate_keys[i], '{}', sizes[i], (nexts[i] + taken[i]) % sizes[i], at_)
        ON CONFLICT (queue, key) DO UPDATE
        SET size = excluded.size, next = excluded.next, last = excluded.last;
    END LOOP;
END $$;

CREATE FUNCTION {schema}.nb_limited_lease_granted(
    q text, n integer, vt float8, given float8, freed text[],
    rate_keys text[], rate_stored text[], rate_counts integer[], rate_periods float8[],
    families text[], caps integer[], grant_key text, grant_until float8, want integer)
RETURNS SETOF {schema}.jobs LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    now_ float8 := coalesce(given, extract(epoch FROM clock_timestamp())::float8);
    own integer := array_position(rate_keys, '');
    gk integer := array_position(rate_keys, grant_key);
    r record;
    until_ float8;
BEGIN
    PERFORM set_config('nobroker.grant', '', true);  -- none granted, unless below
    IF n = 1 AND gk IS NOT NULL AND now_ <= grant_until THEN
        -- A start this process was granted: the best due job, as an unlimited
        -- lease picks it, if its start counts in that window alone and it has no
        -- concurrency key (holders are counted under the lock); no lock, no write
        -- but the job's. Else (another job is best, a waiting one is due) on.
        RETURN QUERY
        UPDATE {schema}.jobs AS j SET state = 1, attempts = j.attempts + 1,
            token = nextval('{schema}.lease_token'), lease_until = now_ + vt
        WHERE j.ctid = (
            SELECT l.ctid FROM {schema}.jobs AS l
            WHERE l.queue = q AND l.state = 0 AND l.available_at <= now_
              AND NOT EXISTS (SELECT 1 FROM {schema}.jobs AS w
                              WHERE w.queue = q AND w.state = -1 AND w.available_at <= now_)
              AND NOT EXISTS (SELECT 1 FROM {schema}.queues AS qs
                              WHERE qs.name = q AND qs.paused)
            ORDER BY l.priority DESC, l.seq LIMIT 1 FOR UPDATE OF l SKIP LOCKED)
          AND j.conc_key = ''
          AND (own IS NULL OR j.rate_key = '' OR j.rate_key <> ALL(rate_stored))
          AND coalesce(own, CASE WHEN j.rate_key <> '' THEN array_position(rate_stored, j.rate_key)
                            END) = gk
        RETURNING j.*;
        IF FOUND THEN
            PERFORM set_config('nobroker.grant', '0', true);  -- one used, none granted
            RETURN;
        END IF;
    END IF;
    IF n = 1 THEN
        IF (SELECT qs.paused FROM {schema}.queues AS qs WHERE qs.name = q
            FOR NO KEY UPDATE) THEN
            RETURN;
        END IF;
        -- As nb_limited_lease_rated (migrations/0013), but the start is recorded at
        -- the window's latest start if that is later (a start granted, or a clock
        -- stepped back), so that the ring stays in order; the window is checked at
        -- now_ all the same. `g`: the starts it may grant (below), none for a job
        -- with a concurrency key (a grant could not lease it).
        WITH cand AS MATERIALIZED (
            SELECT j.id, j.ctid AS at, j.conc_key AS ck, own IS NOT NULL AND j.rate_key <> ''
                       AND j.rate_key = ANY(rate_stored) AS two,
                   coalesce(own, CASE WHEN j.rate_key <> ''
                                      THEN array_position(rate_stored, j.rate_key) END) AS k
            FROM {schema}.jobs AS j
            WHERE j.queue = q AND j.state = 0 AND j.available_at <= now_
              AND NOT EXISTS (SELECT 1 FROM {schema}.jobs AS w
                              WHERE w.queue = q AND w.state = -1 AND w.available_at <= now_)
            ORDER BY j.priority DESC, j.seq LIMIT 1),
        win AS MATERIALIZED (
            SELECT lw.ctid AS w_at, lw.key, lw.size, lw.next, greatest(now_, lw.last) AS at,
                   cand.k, CASE WHEN cand.ck = '' THEN least(want, rate_counts[cand.k] / 4)
                                ELSE 0 END AS g,
                   (SELECT s.ctid FROM {schema}.limit_starts AS s
                    WHERE s.queue = q AND s.key = lw.key AND s.slot = lw.next) AS s_at,
                   (SELECT s.at FROM {schema}.limit_starts AS s
                    WHERE s.queue = q AND s.key = lw.key
                      AND s.slot = (lw.next - rate_counts[cand.k] + lw.size) % lw.size
                   ) > now_ - rate_periods[cand.k] AS full_
            FROM cand, {schema}.limit_windows AS lw
            WHERE lw.queue = q AND lw.key = rate_keys[cand.k]
              AND lw.size >= rate_counts[cand.k]),
        up AS (
            UPDATE {schema}.jobs AS j SET state = 1, attempts = j.attempts + 1,
                token = nextval('{schema}.lease_token'), lease_until = now_ + vt
            WHERE j.ctid = (
                SELECT l.ctid FROM cand, {schema}.jobs AS l
                WHERE l.ctid = cand.at AND l.queue = q AND l.id = cand.id AND l.state = 0
                  AND NOT cand.two
                  AND (cand.k IS NULL OR EXISTS (SELECT 1 FROM win WHERE win.full_ IS NOT TRUE))
                  AND (cand.ck = '' OR coalesce(
                      (SELECT u.cap FROM unnest(families, caps) WITH ORDINALITY AS u(f, cap, o)
                       WHERE cand.ck = u.f OR starts_with(cand.ck, u.f || '\0')
                       ORDER BY u.o LIMIT 1) - (
                      SELECT count(*) FROM {schema}.jobs AS h
                      WHERE h.queue = q AND h.state = 1 AND h.conc_key = cand.ck
                        AND h.conc_key <> '' AND h.id <> ALL(freed)), 1) > 0)
                FOR UPDATE OF l SKIP LOCKED)
            RETURNING j),
        started AS (
            UPDATE {schema}.limit_starts AS s SET at = (SELECT win.at FROM win)
            WHERE s.ctid = (SELECT win.s_at FROM win) AND EXISTS (SELECT 1 FROM up)),
        started_first AS (
            INSERT INTO {schema}.limit_starts (queue, key, slot, at)
            SELECT q, win.key, win.next, win.at FROM win
            WHERE win.s_at IS NULL AND EXISTS (SELECT 1 FROM up)),
        windows AS (
            UPDATE {schema}.limit_windows AS lw SET next = (win.next + 1) % win.size, last = win.at
            FROM win WHERE lw.ctid = (SELECT win.w_at FROM win) AND EXISTS (SELECT 1 FROM up))
        SELECT up.j AS job, win.key, win.next, win.size, win.at, win.k, win.g INTO r
        FROM up LEFT JOIN win ON true;
        IF FOUND THEN
            -- Grant `g` more starts if at most half the window is used with them (at
            -- most C/2 - g starts in it now, this one included: its (C/2 - g + 1)-th
            -- latest start none or a period old), recorded at `until` (now_ + a
            -- twentieth of the period, at most 0.05 s), the latest time they may be
            -- used, and tell the caller (nobroker.grant: "g until key", `until` the
            -- float8's 8 bytes in hex: its text depends on extra_float_digits), which
            -- leases with them above until then. In a statement of its own: a
            -- lease that grants nothing sets up no plan for it.
            IF r.g > 0 AND rate_counts[r.k] / 2 - r.g >= 1 THEN
                until_ := now_ + least(rate_periods[r.k] / 20, 0.05);
                WITH ok AS MATERIALIZED (
                    SELECT 1 WHERE coalesce((
                        SELECT s.at FROM {schema}.limit_starts AS s
                        WHERE s.queue = q AND s.key = r.key
                          AND s.slot = (r.next - rate_counts[r.k] / 2 + r.g + r.size) % r.size
                        ) <= now_ - rate_periods[r.k], true)),
                grants AS (
                    INSERT INTO {schema}.limit_starts AS s (queue, key, slot, at)
                    SELECT q, r.key, (r.next + i) % r.size, greatest(until_, r.at)
                    FROM ok, generate_series(1, r.g) AS i
                    ON CONFLICT (queue, key, slot) DO UPDATE SET at = excluded.at)
                UPDATE {schema}.limit_windows AS lw
                SET next = (r.next + 1 + r.g) % r.size, last = greatest(until_, r.at)
                FROM ok WHERE lw.queue = q AND lw.key = r.key;
                IF FOUND THEN
                    PERFORM set_config('nobroker.grant', r.g || ' '  -- until_ exact, in hex
                        || encode(float8send(until_), 'hex') || ' ' || r.key, true);
                END IF;
            END IF;
            RETURN NEXT r.job;
            RETURN;
        END IF;
    END IF;
    -- The walk, for anything else (it takes the lock again: held, no wait).
    RETURN QUERY SELECT * FROM {schema}.nb_limited_lease(q, n, vt, given, freed, rate_keys,
        rate_stored, rate_counts, rate_periods, families, caps);
END $$;
