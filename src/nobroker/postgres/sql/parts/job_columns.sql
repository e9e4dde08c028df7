-- A job's columns, in the order rows.job_from_row unpacks them.
j.id, j.seq, j.state, j.priority, j.available_at, j.enqueued_at, j.max_attempts, j.attempts,
j.token, j.lease_until, j.last_error, j.payload, j.result, j.finished_at, j.progress, j.meta
