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
from collections.abc import Callable
from dataclasses import replace

from .commands import Batch
from .fs import FileSystem, replace_durably
from .logfile import LogFile, log_filename
from .records import RecordType
from .state import JobState, QueueState

__all__ = ["write_generation", "publish_generation", "remove_stale_files", "current_filename",
           "parse_current"]

_WRITE_BUFFER = 1 << 20


def current_filename(name: str) -> str:
    return f"{name}.current"


def parse_current(data: bytes) -> int | None:
    """The generation a NAME.current file names, or None if it is malformed."""
    match = re.fullmatch(rb"(\d{1,9})\n?", data)
    return int(match.group(1)) if match else None


Locations = dict[str, tuple[int, int]]


def write_generation(fs: FileSystem, old: LogFile, state: QueueState, generation: int,
                     now: float, key_retention: float,
                     payload_text: Callable[[int], str]) -> tuple[LogFile, QueueState]:
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
        for entry in state.entries():
            fields = {"id": entry.id, "pr": entry.priority, "at": entry.available_at,
                      "t": entry.enqueued_at, "ma": entry.max_attempts, "a": entry.attempts,
                      "s": str(entry.state), "tok": entry.token,
                      "until": entry.lease_until if entry.state is JobState.LEASED else 0.0,
                      "err": entry.last_error, "k": entry.keyed}
            batch.add_payload(RecordType.JOB, fields, payload_text(entry.loc))
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
    locations = {rec["id"]: (offset, size) for rtype, rec, offset, size in applied
                 if rtype == RecordType.JOB}
    return log, snapshot_state(state, locations, keys, batch.number)


def snapshot_state(state: QueueState, locations: Locations, keys: dict[str, float],
                   batch: int) -> QueueState:
    """What replaying a snapshot of `state` written as batch `batch` gives."""
    entries = []
    for entry in state.entries():
        loc, size = locations[entry.id]
        leased = entry.state is JobState.LEASED
        entries.append(replace(entry, loc=loc, size=size,
                               lease_until=entry.lease_until if leased else 0.0))
    return QueueState.restore(entries, keys, last_batch=batch, next_token=state.next_token,
                              done=state.done, snapshot_seen=True)


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

