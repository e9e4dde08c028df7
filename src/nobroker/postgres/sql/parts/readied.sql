-- The due rows (candidates.sql) this lease did not pick become ready (state 0,
-- same time), so a backlog of due jobs moves into the ready index a batch per
-- lease; until it has, priority order holds within each batch.
readied AS (
    UPDATE {schema}.jobs AS j SET state = 0 FROM due
    WHERE j.queue = %(q)s AND j.id = due.id
      AND due.id NOT IN (SELECT id FROM picked))
