-- One queue's recounted row: queue, live, dead, done, kept.
INSERT INTO {schema}.counters (queue, slot, live, dead, done, kept)
VALUES (%s, -1, %s, %s, %s, %s)
