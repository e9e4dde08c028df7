"""The file engine: one queue is one directory holding an append-only log.

Tiers, top first; each imports only its own tier and the ones below it
(tests/architecture/test_layers.py keeps that order):

- ``backend`` -- FileBackend, the operations of nobroker.backend.Backend;
- a live handle at this level -- ``handle`` (QueueHandle, an open queue: its lock,
  live log and state, changed only by its methods), the modules that work for it
  through ``handleapi`` (``commit``, ``syncing``, ``following``, ``checkpointer``,
  ``compactor``), ``opening``, ``inspection``, ``options``, ``counters``;
- ``repair/`` -- reading and rescuing a damaged log (salvage);
- ``generations/`` -- checkpoints, compaction, rebuilding a log file's state;
- ``state/`` -- the pure replay state: decoded records in, queue state out, and
  the commands that plan records from API calls;
- ``log/`` -- one log file: framing, records, writing and group commit, torn tails;
- ``disk/`` -- the operating system: file system calls, locks, wake-up pipes.

The shared top level imports this package only from the Queue facade and
the entry points; nothing here imports another backend.
"""
