"""Values stored under a key as jobs, read back as kept results.

The Celery and Dramatiq result backends store each value as a keyed job whose
payload is `{"value": ..., "ttl": seconds, ...}` (the first write of a key wins)
and then settle it: lease it and ack it with its own payload as the result,
kept for its ttl, so the queue forgets it when the ttl ends. Whoever stores or
waits settles every pending value, not only its own, so a writer that died
between its enqueue and its ack leaves nothing unsettled for long.
"""

from __future__ import annotations

from .queue import Queue

__all__ = ["settle"]


def settle(queue: Queue) -> None:
    """Lease every pending value of `queue` and ack it with itself as the result, kept
    for its ttl: each ack and the next lease are one write."""
    jobs = queue.lease(1)
    job = jobs[0] if jobs else None
    while job is not None:
        payload = job.payload if isinstance(job.payload, dict) else {}
        ttl = payload.get("ttl")
        job = queue.ack_and_lease(
            job, result=payload,
            result_ttl=float(ttl) if isinstance(ttl, (int, float)) else None)
