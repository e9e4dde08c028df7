-- A result waiter's watch: a job's finish is NOTIFYed once it has a row here
-- (wakeups.py).
INSERT INTO {schema}.watches (queue, id) VALUES (%(q)s, %(id)s) ON CONFLICT DO NOTHING
