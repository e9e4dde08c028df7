"""The file engine: one queue is one directory holding an append-only log.

The layers, bottom up: ``framing`` (bytes of one record and the file header),
``records`` (what a record's JSON says), ``jobtable`` and ``state`` (the pure
replay state: decoded records in, queue state out), ``logfile`` (one log
file's frames and batches), ``checkpoint`` (snapshots of the replay state),
``compaction`` (generations: rewriting the log), ``lock`` and ``wake`` (the
shared lock and the wake-up channel between processes), ``fs`` (the one seam
every file operation goes through), ``commands`` (plans of records for each
queue operation), ``store`` (opening, recovery and the commit protocol) and
``inspection`` (reading a log raw, for the CLI).

Nothing here is imported by the shared top level except through the queue
facade and the CLI; nothing here imports another backend.
"""
