"""Checkpoints: the replay state saved as columns, so opening need not re-parse the log.

A checkpoint is a *cache* of the log, never a source of truth. It records the
state after the complete batches up to a log offset (`end`) of one
generation; opening loads it and replays only the records after `end`. It is
used only if everything checks out: magic, CRC of the whole file, byte
order, generation, and the CRC-32 of the whole log before `end` (so a log
that was cut, replaced or damaged below `end` is never trusted, and damage
there is found by the full replay that follows). Any doubt means a full
replay, which gives the same state, only slower.

Layout of `NAME.GGGGGG.ckpt` and of a compaction's `NAME.GGGGGG.switch.ckpt`
(little or big endian as the writer's machine; the meta says which):

    <8s magic "NBCKPT05"> <I crc32 of everything after these 12 bytes>
    then sections, each <Q length><bytes>:
      meta     JSON: generation, end, crc of the log before end, counters, byte order,
               "waits": [[id, [unmet prerequisite ids], allow_failure(, "failure")], ...],
               "limits": {"keys": [[index, rate key, concurrency key], ...],
                          "windows": [[rate key, count, period, [starts]], ...],
                          "caps": [[index, cap], ...] (the jobs' "cc"; absent: none)},
               "notes": [[id, [fraction, note] or null, {metadata}], ...] (05),
               "dormant": [[id, [unmet], [failed], rate key, concurrency key], ...]
               (the revivable cancelled dependents, nobroker.revivals; absent: none),
               "dormant_caps": [[id, cap], ...] (their "cc"; absent: none),
               "result_ends": [[id, when its result ends], ...] (the kept keyed jobs
               acked with "rkeep"; absent: written before it was kept, replay)
      names    JSON object {index: id} for the jobs whose id is not seq_id(seq)
      errors   JSON object {index: last_error} for the jobs that have one
      keys     JSON object {id: done_at} of remembered idempotency keys
      states   one byte per job (0 pending, 1 leased, 2 dead, 3 waiting, 4 done,
               5 cancelled: the last two are finished jobs kept with their outcome);
               keyed: one byte per job
      then one array per column (see COLUMNS), loaded as the state's own columns

Pure functions over bytes plus the state; the log file (logfile.py) reads and
writes the checkpoint file.
"""

from __future__ import annotations

import json
import struct
import sys
import zlib
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from ..log.framing import FILE_HEADER, MAX_RECORD, RECORD_HEADER
from ..state.state import Columns, QueueState, ReplayError, check_totals

__all__ = ["encode", "decode", "relocation", "Relocation", "MAGIC", "CheckpointError"]

ENABLED = True  # tests switch it off to compare against a full replay
# Older magics are ignored (a full replay): 01 stored ids as JSON; 02 had no finished
# jobs and no "paused" (a reader of 02 would take a paused queue for a running one).
# 03 had no waiting jobs: its state codes 3 and 4 were done and cancelled, now 4 and 5.
# 04 had no limited jobs' keys, no rate windows and no "notes" (the jobs' progress and
# metadata): format 1.2.
MAGIC: Final = b"NBCKPT05"
_HEAD: Final = struct.Struct("<8sI")
_LEN: Final = struct.Struct("<Q")
# (Columns field, array typecode); 'q'/'d' are 8 bytes and 'I' 4 everywhere CPython runs.
COLUMNS: Final = (("seqs", "q"), ("priority", "q"), ("available_at", "d"),
                  ("enqueued_at", "d"), ("max_attempts", "q"), ("attempts", "q"),
                  ("token", "q"), ("lease_until", "d"), ("loc", "q"), ("size", "I"))
_SEQS, _LOC = 0, 8  # indexes in COLUMNS ("size" follows "loc")


class CheckpointError(ValueError):
    """A checkpoint that cannot be trusted (internal: the caller replays instead)."""


def encode(state: QueueState, generation: int, end: int, log_crc: int,
           source: tuple[int, int, int, str] | None = None) -> bytes:
    """The checkpoint bytes for `state`, valid for log `generation` up to offset `end`,
    whose bytes before `end` have CRC-32 `log_crc`. A compaction passes `source`:
    the (generation, offset) its snapshot summarises, and the offset and nonce of
    its SNAPSHOT record, so that other processes can move to the new generation
    without reloading (see `relocation`)."""
    columns = state.columns()
    # "clock" is latest_time's name on disk (older checkpoints carry it so).
    meta = {"generation": generation, "end": end, "crc": log_crc, "clock": state.latest_time,
            "byteorder": sys.byteorder, "jobs": len(columns.seqs),
            "last_batch": state.last_batch, "next_token": state.next_token,
            "next_seq": state.next_seq, "done": state.done, "snapshot": state.snapshot_seen,
            "paused": state.paused, "totals": list(state.totals), "source": source,
            "waits": state.waits.items(), "limits": state.limited.columns(columns.seqs),
            "notes": state.notes.items(),
            "dormant": state.dormant.items(), "result_ends": state.result_ends.items()}
    if state.dormant.caps():  # an additive key (NBCKPT05): the revivable jobs' "cc"
        meta["dormant_caps"] = state.dormant.caps()
    sections = [
        json.dumps(meta).encode(),
        json.dumps(columns.names).encode(),
        json.dumps(columns.errors).encode(),
        json.dumps(state.done_keys).encode(),
        columns.states,
        columns.keyed,
    ]
    for attribute, _ in COLUMNS:
        sections.append(getattr(columns, attribute).tobytes())
    body = b"".join(_LEN.pack(len(section)) + section for section in sections)
    return _HEAD.pack(MAGIC, zlib.crc32(body)) + body


def decode(data: bytes, generation: int, log_size: int,
           prefix_crc: Callable[[int], int]) -> tuple[QueueState, int, int]:
    """Rebuild the state from checkpoint bytes.

    Returns the state, the log offset it covers and the log's CRC up to there.
    `prefix_crc(end)` computes the CRC-32 of the log's first `end` bytes.
    Raises CheckpointError for anything that does not check out.
    """
    try:
        return _decode(data, generation, log_size, prefix_crc)
    except (LookupError, TypeError, AttributeError, OverflowError) as exc:
        # A CRC-valid file of the wrong shape (another version, a forgery): only a
        # cache, so doubt means replay, never a crash of the open.
        raise CheckpointError(f"malformed: {type(exc).__name__}: {exc}") from None


def _decode(data: bytes, generation: int, log_size: int,
            prefix_crc: Callable[[int], int]) -> tuple[QueueState, int, int]:
    try:
        sections, meta = _checked(data, generation, log_size, prefix_crc)
        raw_names, raw_errors, keys = (json.loads(bytes(sections[i])) for i in range(1, 4))
        names = {int(k): v for k, v in raw_names.items()}
        errors = {int(k): v for k, v in raw_errors.items()}
    except (ValueError, AttributeError) as exc:
        if isinstance(exc, CheckpointError):
            raise
        raise CheckpointError(f"bad json: {exc}") from None
    end = meta["end"]
    count = meta["jobs"]
    arrays = _arrays(sections)
    if len(arrays[_SEQS]) != count:
        raise CheckpointError("column lengths disagree")
    locs, sizes = arrays[_LOC], arrays[_LOC + 1]
    if count and (min(locs) < FILE_HEADER.size or max(locs) >= end
                  or min(sizes) <= RECORD_HEADER.size
                  or max(sizes) > RECORD_HEADER.size + MAX_RECORD):
        raise CheckpointError("a job's record lies outside the log")
    pr, at, t, ma, attempts, token, until = arrays[1:_LOC]
    columns = Columns(arrays[_SEQS], bytes(sections[4]), bytes(sections[5]), pr, at, t, ma,
                      attempts, token, until, locs, sizes, names=names, errors=errors)
    try:
        state = QueueState.from_columns(
            columns, keys, last_batch=meta["last_batch"], next_token=meta["next_token"],
            done=meta["done"], snapshot_seen=meta["snapshot"], next_seq=meta["next_seq"],
            paused=meta["paused"])
        state.waits.restore(meta["waits"])
        state.dormant.restore(meta.get("dormant", []))  # absent: written before revivals
        state.dormant.restore_caps(meta.get("dormant_caps", []))  # absent: none
        state.limited.restore(state.table, meta["limits"])
        state.notes.restore(meta["notes"])
        if "result_ends" not in meta and state.kept:  # may have some: only replay knows
            raise CheckpointError("written before the results' ends were kept")
        state.result_ends.restore(meta.get("result_ends", []))
    except (ReplayError, ValueError, TypeError) as exc:
        raise CheckpointError(getattr(exc, "reason", str(exc))) from None
    if len(state.waits.by_job) != state.waiting:
        raise CheckpointError("waiting jobs and their prerequisites disagree")
    state.latest_time = float(meta["clock"])
    try:  # a checkpoint from before the totals were counted: replay, which counts them
        state.set_totals(check_totals(meta.get("totals"), 0))
    except ReplayError as exc:
        raise CheckpointError(exc.reason) from None
    return state, end, int(meta["crc"])


def _arrays(sections: list[memoryview], only: tuple[int, ...] | None = None,
            ) -> list[array[Any]]:
    """The columns (or those at indexes `only`), decoded."""
    columns = []
    for index in only if only is not None else range(len(COLUMNS)):
        code, raw = COLUMNS[index][1], sections[6 + index]
        column = array(code)
        if column.itemsize * 8 not in (32, 64) or len(raw) % column.itemsize:
            raise CheckpointError("a column of the wrong size")
        column.frombytes(raw)
        columns.append(column)
    return columns


@dataclass(frozen=True, slots=True)
class Relocation:
    """Where a compaction put each job: what a peer needs to follow it."""

    source_generation: int
    source_offset: int  # the snapshot summarises the source up to here
    end: int  # the snapshot batch ends here in the new generation
    seqs: array[int]  # the snapshot's jobs in enqueue order
    names: dict[int, str]  # index -> id, for ids that are not seq_id(seq)
    locs: array[int]
    sizes: array[int]
    crc: int  # CRC-32 of the new generation's bytes before `end` (checked against them)


def relocation(data: bytes, generation: int, log_size: int,
               snapshot_nonce: Callable[[int], str | None]) -> Relocation:
    """The job locations of a compaction's checkpoint.

    Instead of the CRC of the whole log (`decode`'s check, a full read of the
    file), the checkpoint must name the nonce that `snapshot_nonce(offset)`
    finds in the SNAPSHOT record at the offset it gives: that proves it was
    written with this very file, not by a compaction that lost the race to it
    and then wrote the same checkpoint name. The log's CRC up to `end` is then
    taken from the checkpoint."""
    try:
        sections, meta = _checked(data, generation, log_size, None)
        source = meta["source"]
        if not (isinstance(source, list) and len(source) == 4
                and all(type(v) is int for v in source[:3]) and type(source[3]) is str):
            raise CheckpointError("not written by a compaction")
        if snapshot_nonce(source[2]) != source[3]:
            raise CheckpointError("written for another file")
        names = {int(k): v for k, v in json.loads(bytes(sections[1])).items()}
        seqs, locs, sizes = _arrays(sections, (_SEQS, _LOC, _LOC + 1))
        if not (len(seqs) == len(locs) == len(sizes) == meta["jobs"]
                and all(type(v) is str for v in names.values())):
            raise CheckpointError("column lengths disagree")
        return Relocation(source[0], source[1], meta["end"], seqs, names, locs, sizes,
                          meta["crc"])
    except (LookupError, TypeError, ValueError, AttributeError) as exc:
        if isinstance(exc, CheckpointError):
            raise
        raise CheckpointError(f"malformed: {type(exc).__name__}: {exc}") from None


def _checked(data: bytes, generation: int, log_size: int,
             prefix_crc: Callable[[int], int] | None,
             ) -> tuple[list[memoryview], dict[str, Any]]:
    """The sections and meta of a checkpoint that matches this log, or CheckpointError.
    Without `prefix_crc` the caller proves the match some other way."""
    if len(data) < _HEAD.size:
        raise CheckpointError("too short")
    magic, crc = _HEAD.unpack_from(data)
    body = memoryview(data)[_HEAD.size:]
    if magic != MAGIC or zlib.crc32(body) != crc:
        raise CheckpointError("bad magic or crc")
    sections = _split(body)
    if len(sections) != 6 + len(COLUMNS):
        raise CheckpointError("wrong number of sections")
    meta = json.loads(bytes(sections[0]))
    end = meta.get("end")
    if (meta.get("generation") != generation or meta.get("byteorder") != sys.byteorder
            or type(end) is not int or not 0 < end <= log_size
            or type(meta.get("crc")) is not int
            or (prefix_crc is not None and prefix_crc(end) != meta.get("crc"))):
        raise CheckpointError("does not match this log")
    return sections, meta


def _split(body: memoryview) -> list[memoryview]:
    sections = []
    pos = 0
    while pos < len(body):
        if pos + _LEN.size > len(body):
            raise CheckpointError("truncated section header")
        (length,) = _LEN.unpack_from(body, pos)
        pos += _LEN.size
        if pos + length > len(body):
            raise CheckpointError("truncated section")
        sections.append(body[pos:pos + length])
        pos += length
    return sections
