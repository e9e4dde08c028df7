-- `n` numbers of the job sequence, for the jobs of a graph: a job's order, and
-- its generated id (lpad(to_hex(seq), 16, '0'), as enqueue.sql makes it).
SELECT nextval('{schema}.job_seq') AS seq FROM generate_series(1, %(n)s::integer) ORDER BY 1
