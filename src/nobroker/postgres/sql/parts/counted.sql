-- Counting and wake-ups, in the statement that changes the rows.
--
-- Every statement that changes job rows ends with these CTEs (up to schema
-- version 2 triggers did this; migrations/0003 says why no longer):
--   finishing: the ids of the jobs it finished (done, dead, cancelled) and of
--     the live jobs it deleted. nb_finished (migrations/0003) NOTIFYs those a
--     waiter watches, reading `watches` with a snapshot of its own, so a watch
--     committed while this statement waited for the row's lock is seen.
--   tally (MATERIALIZED: one row, so each NOTIFY is sent once): one row per
--     source CTE (c0, c1), each counting how the rows it changed move the
--     counters, from their states before and after: p, live (state <= 1:
--     waiting, ready or leased); d, dead; f, done (acks ever made, so deleting
--     a done row takes none back); k, kept with an outcome (nb_kept). A lease
--     moves no counter (stats() counts the leased rows in their index), a
--     waiting row made ready neither. `woke` NOTIFYs the ready channel when a
--     row became pending (a waiting one too: its due time may come before an
--     idle worker's planned wake).
--   counted (this part): the tally added to the counter row of the
--     connection's slot (session.py), written only when a count changed.
counted AS (
    INSERT INTO {schema}.counters AS c (queue, slot, live, dead, done, kept)
    SELECT %(q)s, coalesce(nullif(current_setting('nobroker.slot', true), '')::integer, -1),
           t.p, t.d, t.f, t.k
    FROM tally AS t
    WHERE t.p <> 0 OR t.d <> 0 OR t.f <> 0 OR t.k <> 0
    ON CONFLICT (queue, slot) DO UPDATE
    SET live = c.live + excluded.live, dead = c.dead + excluded.dead,
        done = c.done + excluded.done, kept = c.kept + excluded.kept)
