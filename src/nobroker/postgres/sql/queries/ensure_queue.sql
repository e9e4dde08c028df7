-- The queue's row in `queues`, made when a writing connection opens.
INSERT INTO {schema}.queues (name) VALUES (%(q)s) ON CONFLICT DO NOTHING
