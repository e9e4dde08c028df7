"""A small key-value store of Celery results on one nobroker queue. Stdlib only.

The public Queue API has no "put under a key" call, so each value is a keyed
job whose payload is the value: `enqueue(job_id=key)` is atomic and writes
nothing if the key is already known, which makes a key write-once (the first
write wins). Stored jobs are then "settled": leased and acked with their own
payload as the result, so they are kept for their time to live (Celery's
`result_expires`) and then forgotten, as the queue forgets any finished job.
Any writer or waiter settles every pending value, not only its own, so a
writer that dies between its enqueue and its ack leaves nothing unsettled
for long; a value is readable (from its payload) from the moment it is enqueued.

Values that change (a task's STARTED, RETRY or custom progress states) are
a sequence of write-once slots, "KEY~0", "KEY~1", ...: `append` claims the next
free slot atomically (a lost race moves on to the next), `latest` reads the
last one. Slots are filled in order, so finding the last one takes a
logarithmic number of reads. `append` returns how many slots are used: an
atomic counter, which is what Celery's `incr` asks for.
"""

from __future__ import annotations

import uuid
from typing import Any, Final

from ..queue import Queue
from ..stored_values import read, settle

__all__ = ["ResultStore", "FOREVER"]

FOREVER: Final = 10 * 365 * 86400.0  # Celery's "never expire"
_SLOT: Final = "~"


class ResultStore:
    """Write-once values and append-only slots, by key, on `queue`."""

    def __init__(self, queue: Queue) -> None:
        self.queue = queue

    # -- writing ------------------------------------------------------------

    def put(self, key: str, value: Any, ttl: float) -> bool:
        """Store `value` under `key` for `ttl` seconds unless the key holds a value
        already; True if this call stored it. Durable when it returns."""
        stored = self._write(key, value, ttl)
        self.settle()
        return stored

    def append(self, key: str, value: Any, ttl: float) -> int:
        """Store `value` (not None: an empty slot reads as None) in the next free slot of
        `key`; returns the slots now used."""
        if value is None:
            raise ValueError("a slot's value cannot be None")
        index = self._used_slots(key)
        while not self._write(f"{key}{_SLOT}{index}", value, ttl):
            index += 1  # another writer took this slot first
        self.settle()
        return index + 1

    def _write(self, key: str, value: Any, ttl: float) -> bool:
        """One keyed enqueue; True if it wrote (enqueue hands back the job that held
        the key otherwise, which cannot carry this call's nonce)."""
        nonce = uuid.uuid4().hex
        job = self.queue.enqueue({"key": key, "value": value, "ttl": ttl, "nonce": nonce},
                                 job_id=key)
        return isinstance(job.payload, dict) and job.payload.get("nonce") == nonce

    def settle(self) -> None:
        """Settle every pending value (stored_values.settle)."""
        settle(self.queue)

    # -- reading ------------------------------------------------------------

    def get(self, key: str) -> Any:
        """The value stored under `key`, or None (never stored, or expired)."""
        holder = read(self.queue, key)
        return None if holder is None else holder.get("value")

    def latest(self, key: str) -> Any:
        """The value in the last used slot of `key`, or None."""
        used = self._used_slots(key)
        return self.get(f"{key}{_SLOT}{used - 1}") if used else None

    def _used_slots(self, key: str) -> int:
        """How many slots of `key` hold a value: slots fill in order, so double a
        bound until a slot is free, then bisect."""
        def used(index: int) -> bool:
            return self.get(f"{key}{_SLOT}{index}") is not None

        if not used(0):
            return 0
        low, high = 0, 1  # slot `low` is used
        while used(high):
            low, high = high, high * 2
        while high - low > 1:  # used(low), not used(high)
            middle = (low + high) // 2
            if used(middle):
                low = middle
            else:
                high = middle
        return high

    # -- waiting ------------------------------------------------------------

    def wait_for_write(self, timeout: float) -> None:
        """Block until a value may have been written (in any process), or `timeout`
        passes. It settles what it finds, so that the next wait blocks again."""
        if self.queue.wait(timeout):
            self.settle()
