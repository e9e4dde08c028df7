"""Values stored under a key as jobs, read back as kept results.

The Celery and Dramatiq result backends store each value as a keyed job whose
payload is `{"value": ..., "ttl": seconds, ...}` (the first write of a key wins)
and then settle it: lease it and ack it with its own payload as the result,
kept for its ttl, so the queue forgets it when the ttl ends. Whoever stores or
waits settles every pending value, not only its own, so a writer that died
between its enqueue and its ack leaves nothing unsettled for long. A value reads
from its payload from the moment it is enqueued, and as None once its ttl ends.
"""

from __future__ import annotations

from typing import Any

from .errors import JobNotFoundError
from .models import JobState
from .queue import Queue

__all__ = ["settle", "read"]


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


def read(queue: Queue, key: str) -> dict[str, Any] | None:
    """The stored `{"value": ..., "ttl": ...}` under `key`; None if never stored,
    forgotten, or past its ttl. The ttl is checked here too: a keyed job acked before
    results expired at their result_ttl (a file queue's ACK without "rkeep") shows its
    result for as long as its key is remembered (key_retention)."""
    try:
        job = queue.get(key)
    except JobNotFoundError:
        return None
    holder = job.result if job.state is JobState.DONE else job.payload
    if not isinstance(holder, dict):
        return None
    ttl = holder.get("ttl")
    if job.finished_at is not None and isinstance(ttl, (int, float)) and \
            job.finished_at + ttl <= queue.clock():
        return None
    return holder
