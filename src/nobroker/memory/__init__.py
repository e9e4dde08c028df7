"""nobroker in memory: the same Queue, for tests and for running jobs in one process.

`Queue("memory://NAME")` opens the queue `name` of the in-memory set NAME
(`memory://` alone is the set with the empty name). Handles of one process
on the same set and queue name share one queue, as handles on one directory
do; it lives while one of them is open. Nothing crosses processes, nothing
survives the process and nothing is fsynced (`Capabilities.in_process`);
everything else is the contract every backend keeps (tests/contract):
leases with fencing tokens, visibility timeouts, delays, priorities,
retries with the queue's backoff, dead letters, cancel and pause,
idempotency keys, results, snooze, named locks. Time is the Queue's clock,
so a fake clock drives it.

It shows what the Backend protocol (nobroker.backend) alone requires: it
imports neither the file engine nor PostgreSQL, and they never import it.

Layers, bottom up: table (the jobs and their moves; pure: no clock, no
lock), sets (the process's queue sets, what handles share), backend (the
protocol's operations).
"""

from __future__ import annotations

from .backend import CAPABILITIES, MemoryBackend

__all__ = ["MemoryBackend", "CAPABILITIES"]
