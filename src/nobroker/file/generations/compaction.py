"""Compaction: rewrite the live state as a new log generation and switch to it.

The slow part runs without the queue's lock, so producers and workers carry
on meanwhile. In order (each fsync is what makes the next step safe):

  prepare (no lock; `prepare_generation`)
    1. note the current generation g and its logical end X (under the lock,
       a moment);
    2. rebuild the state at X privately, from g's checkpoint and records (g
       below X never changes: the log is append-only);
    3. write it as the snapshot batch of generation g+1 under a temporary
       name, NAME.<g+1>.log.tmp-*, and fsync it; write g+1's checkpoint under
       a temporary name too, NAME.<g+1>.ckpt.tmp-* (naming the SNAPSHOT
       record's nonce, so that peers can check it belongs to this file);
    3b. (`Prepared.catch_up`, still no lock) copy the complete batches others
       appended to g after X, byte for byte, to the end of the new file (batch
       numbers carry on: the snapshot batch has the number of the last batch
       it summarises), replaying them into the new state; repeat while much
       was appended. g stays open, so a peer unlinking it changes nothing.
  finish (under the lock; `Compactor` in compactor.py)
    4. if another process compacted meanwhile, throw the file away;
    4b. (`Prepared.confirm`) re-read what 3b copied from g and throw the file
       away unless it is still g's bytes, unchanged. The log is append-only
       but for one case: a writer whose own state refuses its batch cuts it
       again before it lets go of the lock (QueueHandle.commit), and the next
       writer may fill the same offsets with other bytes; 3b, unlocked, may
       have copied the batch in between. Kept, it would be a job nobody
       committed, or a batch replay refuses (a queue that no longer opens).
       Abandoning leaves g current and loses nothing; the next try copies
       what g holds by then;
    5. copy the last batches the same way (a torn tail a dead writer left is
       saved aside, as any read-forward would); fsync;
    6. rename the file to NAME.<g+1>.log and fsync the directory, so the name
       exists on disk before anything points at it;
    7. durably replace NAME.current with "<g+1>" (fs.replace_durably). This
       is the commit point: before it g is authoritative and the new file is
       an ignorable leftover; after it, the reverse;
    7b. rename the checkpoint to NAME.<g+1>.switch.ckpt (no fsync: a cache).
       Only a compaction that switched gets there, and peers look for it only
       after taking the lock the switch holds, so a compaction that lost the
       race (step 4) or died never replaces the checkpoint of the one that
       won; and the checkpoints saved later in g+1 go to NAME.<g+1>.ckpt, so
       none of them replaces it either;
    8. unlink older generations and leftovers (temporary files of g+1 too:
       a dead compactor's, or one racing us that will find at its own step 4
       that it lost); fsync the directory.

A crash before step 7 leaves g current (leftovers are removed by the next
compaction); a crash after it leaves g+1 current and maybe stale files, which
are never read because NAME.current does not name them.

Steps 7 and 8, and what opening reads of them (which generation NAME.current
names, what to open without one), are current.py's.
"""

from __future__ import annotations

import os
import zlib
from dataclasses import dataclass, field

from ...errors import CorruptLogError
from ..disk.fs import FileSystem
from ..log.logfile import READ_CHUNK, LogFile, ScanResult, log_filename, paused_gc
from ..log.records import (
    ACKED,
    AT,
    ATTEMPTS,
    ERROR,
    FINISHED_AT,
    ID,
    IS_KEY,
    JOBS,
    KEEP,
    KEPT,
    MAX_ATTEMPTS,
    NEXT_SEQ,
    NONCE,
    PAUSED,
    PRIORITY,
    RESULT_KEEP,
    STATE,
    TIME,
    TOKEN,
    TOTALS,
    UNTIL,
    WAIT,
    Applied,
    Record,
    RecordType,
)
from ..state.batch import Batch
from ..state.limitfields import key_fields
from ..state.notes import note_fields
from ..state.reviving import sleeper_fields
from ..state.state import Entry, JobState, QueueState
from ..state.waits import mode_fields
from . import checkpoint
from .rebuild import state_at

__all__ = ["Prepared", "prepare_generation", "write_generation", "snapshot_nonce"]

_WRITE_BUFFER = 1 << 20


@dataclass(slots=True)
class Prepared:
    """A new generation written under a temporary name, ready to be switched to."""

    log: LogFile  # open, still under its temporary name
    state: QueueState  # what replaying its snapshot gives
    source: LogFile  # the old generation, held open: a peer's compaction may unlink it
    upto: int  # the new file holds the old generation's state up to this offset
    checkpointed: int = 0  # offset the new generation's checkpoint covers (0: none)
    checkpoint_temp: str | None = None  # where it waits for the switch (step 7b)
    # What step 4b checks: from the snapshot point on, the CRC (chained from the old
    # generation's CRC there) of the bytes the catch-ups replayed (source.crc) and
    # of those they copied, which are read apart and may differ too.
    snapshot_end: int = field(init=False)
    snapshot_crc: int = field(init=False)
    copied_crc: int = field(init=False)

    def __post_init__(self) -> None:
        self.snapshot_end = self.upto
        self.snapshot_crc = self.copied_crc = self.source.crc

    def catch_up(self, end: int | None = None, *, locked: bool = False) -> ScanResult:
        """Copy the old generation's complete batches from `upto` (to `end`, or as far
        as complete batches go) onto the new file, unchanged, replaying them into
        `state`. Without the lock it stops at the first incomplete batch (a writer
        may be at work there: LogFile.scan); under it (`locked`), what reading the
        old generation found is judged: a torn tail is reported, never copied, and
        cutting it is the caller's business."""
        source = self.source
        start = source.end = self.upto
        shift = self.log.end - start  # old offset -> new offset of a copied record

        def replay(batch: list[Applied]) -> None:
            self.state.apply_batch([Applied(rtype, record, offset + shift, size)
                                    for rtype, record, offset, size in batch])

        result = source.scan(replay, self.state.last_batch, full=False, limit=end,
                             locked=locked)
        pos = start
        while pos < source.end:
            chunk = source.fs.pread(source.fd, min(READ_CHUNK, source.end - pos), pos)
            if not chunk:
                raise OSError(5, f"{source.path} ends early at {pos}")
            self.log.append(chunk)
            self.copied_crc = zlib.crc32(chunk, self.copied_crc)
            pos += len(chunk)
        self.upto = source.end
        return result

    def confirm(self) -> bool:
        """Step 4b, under the lock: whether every byte copied from the old generation
        is still there, as it was replayed and copied (one read of the copied range
        and a CRC of it). False: a writer cut a batch after a catch-up took it."""
        source = self.source
        return self.copied_crc == source.crc and source.holds(
            self.snapshot_end, self.upto, self.snapshot_crc, source.crc)

    def close(self) -> None:
        """After the switch: let go of the old generation."""
        self.source.close()

    def publish_checkpoint(self) -> None:
        """Step 7b, after the switch and under the lock: the checkpoint takes its name."""
        if self.checkpoint_temp is not None:
            temp, self.checkpoint_temp = self.checkpoint_temp, None
            try:
                self.log.fs.replace(temp, self.log.switch_checkpoint_path)
            except OSError:
                self.checkpointed = 0
                raise

    def discard_checkpoint(self) -> None:
        if self.checkpoint_temp is not None:
            temp, self.checkpoint_temp = self.checkpoint_temp, None
            self.checkpointed = 0
            try:
                self.log.fs.unlink(temp)
            except OSError:
                pass  # a leftover: removed by a later compaction

    def discard(self) -> None:
        self.discard_checkpoint()
        self.source.close()
        self.log.close()
        try:
            self.log.fs.unlink(self.log.path)
        except OSError:
            pass


def prepare_generation(fs: FileSystem, directory: str, name: str, generation: int,
                       upto: int, *, nonce: str, checkpoints: bool = True) -> Prepared:
    """Steps 2-3: the snapshot of generation `generation` at offset `upto`, written as
    generation `generation` + 1 under a temporary name. Takes no lock. `nonce`
    names the snapshot (see write_generation); `checkpoints`: save one of it."""
    reader = LogFile.open(fs, directory, name, generation)
    try:
        state = state_at(reader, upto, checkpoints=checkpoints)
        temp = f"{log_filename(name, generation + 1)}.tmp-{os.getpid()}-{os.urandom(4).hex()}"
        with paused_gc():
            new_log, snapshot, marker = write_generation(fs, reader, state, generation + 1,
                                                         nonce, filename=temp)
    except BaseException:
        reader.close()
        raise
    prepared = Prepared(new_log, snapshot, reader, upto)
    try:
        if checkpoints:  # the next open (and every peer) loads this, not the snapshot
            prepared.checkpoint_temp = new_log.stage_checkpoint(checkpoint.encode(
                snapshot, new_log.generation, new_log.end, new_log.crc,
                (generation, upto, *marker)))
            prepared.checkpointed = new_log.end
    except OSError:
        pass  # only a cache
    return prepared


def write_generation(fs: FileSystem, old: LogFile, state: QueueState, generation: int,
                     nonce: str, filename: str | None = None,
                     ) -> tuple[LogFile, QueueState, tuple[int, str]]:
    """Write `state` as the snapshot batch of a new generation file; durable on return.

    Returns the open new log, the state its replay gives (so the caller can
    checkpoint it without re-reading what it just wrote), and the offset and
    nonce of its SNAPSHOT record, which tell this file from any other (the caller
    draws `nonce` from the queue's rng: commands.new_nonce).
    """
    log = LogFile.create(fs, old.directory, old.name, generation, filename)
    try:
        # The snapshot takes the number of the last batch it summarises, so the
        # batches copied after it continue the sequence unchanged.
        batch = Batch(state.last_batch)
        entries = list(state.entries(finished=True))
        notes = state.notes
        live = [entry for entry in entries if entry.state not in _FINISHED]
        # Enqueue order is also log order, so this reads the old log front to back.
        texts = old.payload_texts([entry.loc for entry in live])
        outcomes = old.outcome_records([entry.loc for entry in entries
                                        if entry.state in _FINISHED])
        for entry in entries:  # in enqueue order, live and finished alike
            if entry.state in _FINISHED:
                rtype, record, result = next(outcomes)
                fields = _finished_fields(old, entry, rtype, record)
                fields.update(note_fields(notes.get(entry.id)))  # progress, metadata (1.2)
                sleeper = state.dormant.by_job.get(entry.id)
                if sleeper is not None:  # revivable: what it waits for, and its payload
                    fields.update(sleeper_fields(list(sleeper.unmet), list(sleeper.failed),
                                                 sleeper.keys, sleeper.cap))
                    batch.add_payload(RecordType.FINISHED, fields, old.read_payload(entry.loc))
                elif result is None:
                    batch.add(RecordType.FINISHED, fields)
                else:
                    batch.add_result(RecordType.FINISHED, fields, result)
            else:
                fields = _snapshot_fields(entry)
                if state.limited.keys:  # its limit keys, as its ENQUEUE gave them
                    fields.update(key_fields(state.limited.keys_of(entry.seq),
                                             state.limited.cap_of(entry.seq)))
                wait = state.waits.by_job.get(entry.id)
                if wait is not None:  # a waiting job: what it still waits for
                    fields[WAIT] = list(wait.unmet)
                    mode_fields(fields, wait.mode)
                fields.update(note_fields(notes.get(entry.id)))
                batch.add_payload(RecordType.JOB, fields, next(texts))
        for window in state.limited.window_records():  # the rate windows, starts and all
            batch.add(RecordType.LIMIT, window)
        keys = dict(state.done_keys)  # expired keys were forgotten by FORGET records
        for job_id, done_at in keys.items():
            batch.add(RecordType.KEY, {ID: job_id, ACKED: done_at,
                                       **note_fields(notes.get(job_id))})
        end: Record = {TOKEN: state.next_token, ACKED: state.done, JOBS: len(state.jobs),
                       NEXT_SEQ: state.next_seq, TOTALS: list(state.totals), NONCE: nonce}
        if state.kept:
            end[KEPT] = state.kept
        if state.paused:
            end[PAUSED] = True
        batch.add(RecordType.SNAPSHOT, end)
        data, applied = batch.encode(log.end)
        for start in range(0, len(data), _WRITE_BUFFER):
            log.append(data[start:start + _WRITE_BUFFER])
        log.sync()  # the snapshot is on disk before NAME.current may name it
    except BaseException:
        log.close()
        try:
            fs.unlink(log.path)
        except OSError:
            pass
        raise
    if state.limited:  # limited jobs and windows: what replaying the snapshot gives
        snapshot = QueueState()
        snapshot.apply_batch(applied)
        snapshot.latest_time = state.latest_time
        return log, snapshot, (applied[-1][2], nonce)
    # What replaying the snapshot gives: the same jobs, their payloads at new offsets.
    moved = [Entry(e.id, 0, e.priority, e.available_at, e.enqueued_at, e.max_attempts,
                   e.attempts, e.state, e.token,
                   e.lease_until if e.state is JobState.LEASED else 0.0, e.last_error,
                   e.keyed, offset, size)
             for e, (_, _, offset, size) in zip(entries, applied, strict=False)]
    snapshot = QueueState.restore(moved, keys, last_batch=batch.number,
                                  next_token=state.next_token, done=state.done,
                                  snapshot_seen=True, next_seq=state.next_seq,
                                  paused=state.paused)
    snapshot.latest_time = state.latest_time
    snapshot.set_totals(state.totals)
    snapshot.waits.restore(state.waits.items())  # as the JOB records' "w" say
    snapshot.dormant.restore(state.dormant.items())  # as the FINISHED records' "wf" say
    snapshot.dormant.restore_caps(state.dormant.caps())  # and their "cc"
    snapshot.notes.by_job.update(state.notes.by_job)  # and their "pg" and "m"
    snapshot.result_ends.restore(state.result_ends.items())  # and their "rkeep"
    return log, snapshot, (applied[-1][2], nonce)  # the SNAPSHOT record is last


def snapshot_nonce(log: LogFile, offset: int) -> str | None:
    """The nonce `write_generation` put in the SNAPSHOT record at `offset` of `log`,
    if such a record is there."""
    found = log.record_at(offset)
    if found is None or found[0] != RecordType.SNAPSHOT:
        return None
    nonce = found[1].get(NONCE)
    return nonce if isinstance(nonce, str) else None


def _snapshot_fields(entry: Entry) -> Record:
    """A JOB record's fields; those at their default value are left out."""
    fields: Record = {ID: entry.id, PRIORITY: entry.priority, AT: entry.available_at,
                      TIME: entry.enqueued_at, MAX_ATTEMPTS: entry.max_attempts}
    if entry.attempts:
        fields[ATTEMPTS] = entry.attempts
    if entry.state is not JobState.PENDING:
        fields[STATE] = str(entry.state)
    if entry.state is JobState.LEASED:
        fields[TOKEN] = entry.token
        fields[UNTIL] = entry.lease_until
    if entry.last_error is not None:
        fields[ERROR] = entry.last_error
    if entry.keyed:
        fields[IS_KEY] = True
    return fields


_FINISHED = (JobState.DONE, JobState.CANCELLED)


def _finished_fields(old: LogFile, entry: Entry, rtype: int, record: Record) -> Record:
    """A FINISHED record's fields (its result, if any, is added after them). The
    finishing time and retention are copied from the record that holds the outcome
    today (an ACK, a CANCEL or a FINISHED record), so replay computes the same end
    of retention, to the bit."""
    finished_at = record.get(FINISHED_AT if rtype == RecordType.FINISHED else TIME)
    keep = record.get(KEEP)
    if type(finished_at) is not float or type(keep) not in (int, float) \
            or record.get(ID) != entry.id:
        raise CorruptLogError(old.path, entry.loc, "finished job's record unreadable")
    fields: Record = {ID: entry.id, PRIORITY: entry.priority, TIME: entry.enqueued_at,
                      MAX_ATTEMPTS: entry.max_attempts, STATE: str(entry.state),
                      FINISHED_AT: finished_at, KEEP: keep}
    if entry.attempts:
        fields[ATTEMPTS] = entry.attempts
    if entry.last_error is not None:
        fields[ERROR] = entry.last_error
    if entry.keyed:
        fields[IS_KEY] = True
    if RESULT_KEEP in record:  # a keyed job's result, gone before its id (1.2)
        fields[RESULT_KEEP] = record[RESULT_KEEP]
    return fields
