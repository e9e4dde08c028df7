-- A job's unmet prerequisites, in the order given (Job.waiting_for), for a job
-- waiting for them (state -2, migrations/0004); NULL for any other.
CASE WHEN j.state = -2 THEN ARRAY(
    SELECT p.prerequisite FROM {schema}.prerequisites AS p
    WHERE p.queue = j.queue AND p.dependent = j.id ORDER BY p.pos) END
