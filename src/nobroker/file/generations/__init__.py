"""Generations of the log: checkpoints of the replay state, compaction into a new
generation, NAME.current (which generation is current), and rebuilding a log
file's state from its checkpoint and records."""
