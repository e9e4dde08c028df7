-- The rows in `picked` leased: an attempt, a fencing token, a deadline.
leased AS (
    UPDATE {schema}.jobs AS j SET state = 1, attempts = j.attempts + 1,
        token = nextval('{schema}.lease_token'), lease_until = t.now + %(vt)s
    FROM picked, t WHERE j.queue = %(q)s AND j.id = picked.id
    RETURNING {job_columns})
