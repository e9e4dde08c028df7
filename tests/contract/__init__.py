"""The contract every backend passes, through the public API only (make_queue is the hook)."""
