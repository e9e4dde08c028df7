-- Version 6: rate limits and concurrency limits per key (nobroker.limits).
-- A job's limit keys, computed at enqueue ('' for none: no declared key is
-- empty, and '' keeps the keys comparable in one index without NULLs).
ALTER TABLE {schema}.jobs ADD COLUMN rate_key text NOT NULL DEFAULT '',
                          ADD COLUMN conc_key text NOT NULL DEFAULT '';
-- The waiting and ready jobs of each pair of keys, best first: a limited lease
-- steps from one pair to the next and reads the head of each pair it may start
-- (queries/limited_candidates.sql), so a saturated key's backlog is never scanned.
CREATE INDEX jobs_limited ON {schema}.jobs (queue, rate_key, conc_key, priority DESC, seq)
    WHERE state <= 0;
-- The latest starts of each rate key (the queue's own is ''), oldest first, at
-- most the limit's count of them: what a sliding window needs to know. Written
-- by a limited lease under the lock on its queue's row (postgres/limited.py).
CREATE TABLE {schema}.limit_windows (
    queue text NOT NULL,
    key text NOT NULL,
    starts float8[] NOT NULL,
    PRIMARY KEY (queue, key));
