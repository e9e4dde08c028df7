-- The holder's progress and metadata of its leased job (id, token), replacing
-- what the row had; no row if the lease is not current.
-- The row is found by its key: `state + 0` (parts/acked.sql says why).
UPDATE {schema}.jobs AS j SET progress = %(pg)s::text, meta = %(m)s::text
WHERE j.queue = %(q)s AND j.id = %(id)s AND j.state + 0 = 1 AND j.token = %(tok)s
RETURNING j.id
