-- Pause or resume the queue; a resume wakes the idle workers (`chan`).
WITH changed AS (
    INSERT INTO {schema}.queues AS qs (name, paused) VALUES (%(q)s, %(paused)s)
    ON CONFLICT (name) DO UPDATE SET paused = excluded.paused RETURNING paused)
SELECT CASE WHEN NOT paused THEN pg_notify(%(chan)s, '') END FROM changed
