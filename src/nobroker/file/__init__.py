"""The file engine: one queue is one directory holding an append-only log.

Bottom up (README's "reading the source" has a line per module):
``framing``, ``fs``, ``lock``, ``wake`` (bytes and the OS); ``records`` (what
a record's JSON says); ``logfile`` (one log file's frames and batches);
``columns``, ``jobtable``, ``schedule``, ``relocation``, ``state`` (the pure
replay state: decoded records in, queue state out); ``commands`` and
``checkpoint`` (planning records, saving the state); ``rebuild`` and
``compaction`` (a log file's state, generations); ``options``, ``opening``,
``following``, ``checkpointing``, ``compacting``, ``store``, ``inspection``
(a live handle and its jobs); ``backend`` (FileBackend, the operations of
nobroker.backend.Backend). tests/test_layers.py keeps that order.

The shared top level imports this package only from the Queue facade and
the entry points; nothing here imports another backend.
"""
