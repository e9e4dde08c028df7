-- Watches left by waiters that timed out, once their job finished or is gone.
DELETE FROM {schema}.watches AS w WHERE w.queue = %(q)s AND NOT EXISTS (
    SELECT 1 FROM {schema}.jobs AS j WHERE j.queue = w.queue AND j.id = w.id
      AND j.state < 2)
