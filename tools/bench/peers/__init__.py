"""nobroker against other job queues: Huey, RQ, persist-queue, litequeue, SQLite (bench-peers)."""
