"""Compaction: rewrite the live state as a new log generation and switch to it.

Protocol (each step's fsync is what makes the next one safe):
  1. create NAME.<g+1>.log, write one snapshot batch: a JOB record per live
     job in enqueue order, a KEY record per remembered idempotency key, and a
     SNAPSHOT record with the counters; fsync it; fsync the directory.
  2. durably replace NAME.current with "<g+1>" (fs.replace_durably). This
     rename is the commit point: before it generation g is authoritative and
     the new file is ignorable garbage; after it, the reverse.
  3. unlink older generations and leftovers; fsync the directory.

A crash before step 2 leaves g current (the next compaction deletes the
orphan); a crash after it leaves g+1 current and maybe stale files, which
are never read because NAME.current does not name them.
"""

from __future__ import annotations

import os
import re

from .commands import Batch
from .fs import FileSystem, replace_durably
from .logfile import LogFile, log_filename
from .records import Record, RecordType
from .state import Entry, JobState, QueueState

__all__ = ["write_generation", "publish_generation", "remove_stale_files", "current_filename",
           "parse_current"]

_WRITE_BUFFER = 1 << 20


def current_filename(name: str) -> str:
    return f"{name}.current"


def parse_current(data: bytes) -> int | None:
    """The generation a NAME.current file names, or None if it is malformed."""
    match = re.fullmatch(rb"(\d{1,9})\n?", data)
    return int(match.group(1)) if match else None


def write_generation(fs: FileSystem, old: LogFile, state: QueueState, generation: int,
                     now: float, key_retention: float) -> tuple[LogFile, QueueState]:
    """Write generation `generation` holding `state`; durable (file and name) on return.

    Returns the open new log and the state its replay gives (so the caller can
    checkpoint it without re-reading what it just wrote).
    """
    path = os.path.join(old.directory, log_filename(old.name, generation))
    try:
        fs.unlink(path)  # an orphan of a compaction that crashed before its flip
    except FileNotFoundError:
        pass
    log = LogFile.create(fs, old.directory, old.name, generation)
    try:
        batch = Batch(state.last_batch + 1)
        entries = list(state.entries())
        # Enqueue order is also log order, so this reads the old log front to back.
        texts = old.payload_texts([entry.loc for entry in entries])
        for entry, text in zip(entries, texts, strict=True):
            batch.add_payload(RecordType.JOB, _snapshot_fields(entry), text)
        keys = {job_id: done_at for job_id, done_at in state.done_keys.items()
                if done_at + key_retention > now}
        for job_id, done_at in keys.items():
            batch.add(RecordType.KEY, {"id": job_id, "done": done_at})
        batch.add(RecordType.SNAPSHOT, {"tok": state.next_token, "done": state.done,
                                        "jobs": len(state.jobs)})
        data, applied = batch.encode(log.end)
        for start in range(0, len(data), _WRITE_BUFFER):
            log.append(data[start:start + _WRITE_BUFFER])
        log.sync()  # the snapshot is on disk before NAME.current may name it
    except BaseException:
        log.close()
        try:
            fs.unlink(path)
        except OSError:
            pass
        raise
    # What replaying the snapshot gives: the same jobs, their payloads at new offsets.
    moved = [Entry(e.id, 0, e.priority, e.available_at, e.enqueued_at, e.max_attempts,
                   e.attempts, e.state, e.token,
                   e.lease_until if e.state is JobState.LEASED else 0.0, e.last_error,
                   e.keyed, offset, size)
             for e, (_, _, offset, size) in zip(entries, applied, strict=False)]
    snapshot = QueueState.restore(moved, keys, last_batch=batch.number,
                                  next_token=state.next_token, done=state.done,
                                  snapshot_seen=True)
    snapshot.clock = state.clock
    return log, snapshot


def _snapshot_fields(entry: Entry) -> Record:
    """A JOB record's fields; those at their default value are left out."""
    fields: Record = {"id": entry.id, "pr": entry.priority, "at": entry.available_at,
                      "t": entry.enqueued_at, "ma": entry.max_attempts}
    if entry.attempts:
        fields["a"] = entry.attempts
    if entry.state is not JobState.PENDING:
        fields["s"] = str(entry.state)
    if entry.state is JobState.LEASED:
        fields["tok"] = entry.token
        fields["until"] = entry.lease_until
    if entry.last_error is not None:
        fields["err"] = entry.last_error
    if entry.keyed:
        fields["k"] = True
    return fields


def publish_generation(fs: FileSystem, directory: str, name: str, generation: int) -> None:
    """The commit point: NAME.current names `generation`, durably."""
    replace_durably(fs, directory, current_filename(name), b"%d\n" % generation)


def remove_stale_files(fs: FileSystem, directory: str, name: str, current: int) -> list[str]:
    """Delete other generations and temp files of this queue; returns what was removed."""
    pattern = re.compile(re.escape(name) + r"\.(\d{6,})\.(log|ckpt|ckpt\.tmp)$")
    removed = []
    for entry in fs.listdir(directory):
        match = pattern.fullmatch(entry)
        stale_temp = entry == current_filename(name) + ".tmp"
        if (match and int(match.group(1)) != current) or stale_temp:
            fs.unlink(os.path.join(directory, entry))
            removed.append(entry)
    if removed:
        fs.fsync_dir(directory)
    return removed

