"""One log file: its framing, its records, writing and group commit, and what
the bytes at its end mean (a torn tail or corruption)."""
