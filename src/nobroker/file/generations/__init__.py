"""Generations of the log: checkpoints of the replay state, compaction into a new
generation, and rebuilding a log file's state from its checkpoint and records."""
