"""Salvage: the way back from a damaged log that recovery refuses.

Recovery (logfile.py) cuts a torn tail but refuses damage followed by an
intact later batch, because those damaged bytes were once durable: guessing
would lose acknowledged work silently. Salvage is the operator's explicit
choice to go on anyway, keeping everything that can be kept and saying
exactly what could not:

- `salvage(..., point_in_time=False)`: keep every intact batch (damagedlog.py
  finds them), replay them tolerantly (records about jobs whose ENQUEUE was
  lost are skipped and counted), and set each damaged region aside;
- `point_in_time=True`: keep the batches before the first damage only and set
  everything after it aside (what the log said at that moment, consistent).

Rules, each for a reason:
- never edit in place: the kept state is written as a new generation with
  compaction's own `write_generation`, replayed strictly from its file before
  it is trusted, and switched to by `publish_generation`, the same commit
  point compaction uses; a crash at any step leaves either the old state
  (with leftovers the next compaction removes) or the salvaged one;
- every damaged byte is saved first, fsynced, next to the log as
  `NAME.NNNNNN.log.damaged-OFFSET` (the damaged generation itself also stays
  until the next compaction removes it);
- the queue's lock is held throughout and taken without waiting: while
  another process is inside a call on this queue, salvage refuses;
- an undamaged log is left alone, byte for byte.

It reads the damaged generation into memory whole (and builds its state, as
opening does): salvage is a rare, offline repair, and simple beats frugal.
"""

from __future__ import annotations

import itertools
import os
import random
from dataclasses import dataclass

from ...dependencies import FAILURE
from ...errors import LockTimeoutError, NobrokerError
from ..disk.fs import FileSystem
from ..disk.lock import SharedLock, release_shared_lock, shared_lock
from ..generations import compaction, current
from ..log.logfile import LogFile, log_filename, paused_gc
from ..log.records import BATCH, ID, RecordType
from ..state.batch import Batch
from ..state.commands import new_nonce
from ..state.state import QueueState, ReplayError
from .damagedlog import Region, Restart, Scan, Skipped, TolerantReplay, find_batches

__all__ = ["SalvageReport", "SetAside", "salvage"]


@dataclass(frozen=True, slots=True)
class SetAside:
    """One damaged region, and the side file its bytes were saved to."""

    offset: int
    length: int
    reason: str
    side_file: str
    job_ids: tuple[str, ...]  # jobs named by records that still frame in it


@dataclass(frozen=True, slots=True)
class SalvageReport:
    """What a salvage kept, set aside and lost."""

    mode: str  # "salvage" or "point-in-time"
    log: str  # the damaged generation's file
    old_generation: int
    new_generation: int | None  # None: nothing was damaged, nothing was changed
    batches_kept: int
    records_kept: int
    jobs: int  # live jobs in the new generation
    set_aside: tuple[SetAside, ...]
    lost_batches: tuple[tuple[int, int], ...]  # (first, last) batch numbers never seen
    unknown_jobs: tuple[str, ...]  # named by kept records; their ENQUEUE was lost
    skipped: tuple[Skipped, ...]  # records of kept batches the strict rules refused
    kept: tuple[tuple[int, int], ...] = ()  # (offset, length) of the runs of kept batches

    @property
    def bytes_set_aside(self) -> int:
        return sum(region.length for region in self.set_aside)

    def describe(self) -> str:
        if self.new_generation is None:
            return f"{self.log}: no damage found; nothing changed"
        lines = [f"{self.mode}: generation {self.old_generation} -> {self.new_generation}: "
                 f"kept {self.batches_kept} intact batch(es), applied {self.records_kept} "
                 f"record(s); {self.jobs} live job(s)"]
        for region in self.set_aside:
            lines.append(f"set aside {region.length} bytes at offset {region.offset} "
                         f"({region.reason}) in {region.side_file}")
            if region.job_ids:
                lines.append(f"  records there name job(s): {_ids(region.job_ids)}")
        for first, last in self.lost_batches:
            lines.append(f"lost batch {first}" if first == last
                         else f"lost batches {first}-{last}")
        if self.unknown_jobs:
            lines.append(f"later records name {len(self.unknown_jobs)} job(s) whose "
                         f"records were lost (skipped): {_ids(self.unknown_jobs)}")
        other = len(self.skipped) - sum(1 for s in self.skipped
                                        if s.job_id in set(self.unknown_jobs))
        if other:
            lines.append(f"skipped {other} other record(s) that no longer applied:")
            lines.extend(f"  offset {s.offset}: {s.reason}" for s in self.skipped
                         if s.job_id not in set(self.unknown_jobs))
        lines.append(f"{self.bytes_set_aside} bytes set aside in all; "
                     f"{os.path.basename(self.log)} stays until the next compaction")
        return "\n".join(lines)


def _ids(ids: tuple[str, ...], shown: int = 20) -> str:
    text = ", ".join(ids[:shown])
    return text + (f" and {len(ids) - shown} more" if len(ids) > shown else "")


def salvage(directory: str, name: str = "default", *, point_in_time: bool = False,
            fs: FileSystem | None = None) -> SalvageReport:
    """Rewrite a damaged queue's log as a new generation of what is intact.

    Raises NobrokerError if there is no such queue or another process is
    inside a call on it. See the module docstring for what is kept.
    """
    fs = FileSystem() if fs is None else fs
    lock_path = os.path.join(directory, f"{name}.lock")
    generation = current.read_current(fs, directory, name)
    path = os.path.join(directory, log_filename(name, generation))
    if not os.path.exists(path):
        raise NobrokerError(f"no queue named {name!r} in {directory} ({path} is missing)")
    lock = shared_lock(fs, lock_path)
    try:
        try:
            lock.acquire(0.0)
        except LockTimeoutError as exc:
            raise NobrokerError(f"another process holds the queue's lock ({exc}); stop it "
                                f"before salvaging") from None
        try:
            if current.read_current(fs, directory, name) != generation:
                raise NobrokerError("the queue changed generation meanwhile; run it again")
            return _salvage_locked(fs, directory, name, generation, path, lock,
                                   point_in_time)
        finally:
            lock.release()
    finally:
        release_shared_lock(lock)


def _salvage_locked(fs: FileSystem, directory: str, name: str, generation: int, path: str,
                    lock: SharedLock, point_in_time: bool) -> SalvageReport:
    fd = fs.open(path, os.O_RDONLY)
    try:
        size = fs.fstat(fd).st_size
        data = fs.pread(fd, size, 0)
    finally:
        fs.close(fd)
    mode = "point-in-time" if point_in_time else "salvage"
    with paused_gc():
        scan = find_batches(data, generation, stop_at_damage=point_in_time)
        replay = TolerantReplay()
        try:
            kept = _replay(scan, replay, point_in_time)
        except Restart:
            replay = TolerantReplay(careful=True)
            kept = _replay(scan, replay, point_in_time)
    # Batch numbers that jump with no damaged byte between (a splice of two logs)
    # are refused by the strict replay as well: that log needs rewriting too.
    jumps = any(later[0].record[BATCH] != earlier[0].record[BATCH] + 1
                for earlier, later in itertools.pairwise(scan.batches))
    if not scan.damaged and not replay.skipped and not jumps:
        return SalvageReport(mode, path, generation, None, len(scan.batches),
                             replay.records, len(replay.state.jobs), (), (), (), (),
                             _spans(scan))
    _release_freed(replay.state, scan.end)
    _forget_unrevived(replay.state)
    # The snapshot batch takes the number of the last batch it summarises (>= 1).
    replay.state.last_batch = max(replay.state.last_batch, 1)
    aside = tuple(_save_aside(fs, directory, path, data, region) for region in scan.damaged)
    new_generation = _write(fs, directory, name, generation, path, size, replay.state)
    lock.set_stamp(new_generation)  # before the flip, as compaction does (see compactor.py)
    current.publish_generation(fs, directory, name, new_generation)
    return SalvageReport(mode, path, generation, new_generation, kept, replay.records,
                         len(replay.state.jobs), aside, _lost(scan, generation),
                         replay.unknown_jobs, tuple(replay.skipped), _spans(scan))


def _release_freed(state: QueueState, end: int) -> None:
    """RELEASE the waiting jobs left with nothing to wait for (for an on_error job: one
    of whose prerequisites died): the damage took the RELEASE the writer put in the
    batch that freed them, and a snapshot cannot say "waiting for nothing"."""
    freed = [job_id for job_id, wait in state.waits.by_job.items()
             if (wait.died if wait.mode == FAILURE else not wait.unmet)]
    if freed:
        batch = Batch(state.last_batch + 1)
        for job_id in freed:
            batch.add(RecordType.RELEASE, {ID: job_id})
        state.apply_batch(batch.encode(end)[1])


def _forget_unrevived(state: QueueState) -> None:
    """Cancelled dependents left revivable with no failed prerequisite: the damage took
    the record that revived them in the batch that requeued the last one (replay
    refuses that batch). Their revival is lost with it: they stay cancelled."""
    for job_id in [job_id for job_id, sleeper in state.dormant.by_job.items()
                   if not sleeper.failed]:
        state.dormant.remove(job_id)


def _replay(scan: Scan, replay: TolerantReplay, point_in_time: bool) -> int:
    """Apply the kept batches; returns how many. Point-in-time replays strictly and
    stops at the first batch the rules refuse, setting it and the rest aside."""
    if not point_in_time:
        for batch in scan.batches:
            replay.apply_batch(batch)
        return len(scan.batches)
    for index, batch in enumerate(scan.batches):
        try:
            replay.state.apply_batch(batch)
        except ReplayError as exc:
            # The refused batch may be half-applied: rebuild from the ones before it.
            start = batch[0].offset
            scan.batches = scan.batches[:index]
            scan.damaged = [Region(start, scan.end - start, f"replay refused: {exc.reason}")]
            replay.state = QueueState()
            replay.records = 0
            for kept in scan.batches:
                replay.state.apply_batch(kept)
                replay.records += len(kept)
            return index
        replay.records += len(batch)
    return len(scan.batches)


def _save_aside(fs: FileSystem, directory: str, path: str, data: bytes,
                region: Region) -> SetAside:
    side = f"{path}.damaged-{region.offset}"
    fd = fs.open(side, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        fs.write_all(fd, data[region.offset:region.offset + region.length], 0)
        fs.fsync(fd)  # the damaged bytes survive before the log that held them goes
    finally:
        fs.close(fd)
    fs.fsync_dir(directory)  # and so does the side file's name
    return SetAside(region.offset, region.length, region.reason, side, region.job_ids)


def _write(fs: FileSystem, directory: str, name: str, generation: int, path: str,
           size: int, state: QueueState) -> int:
    """Write `state` as the next generation, durably, under its final name; checked."""
    new_generation = generation + 1
    fd = fs.open(path, os.O_RDONLY)
    old = LogFile(fs, directory, name, generation, fd, size)  # header unchecked: damaged
    try:
        temp = f"{log_filename(name, new_generation)}.tmp-{os.getpid()}-{os.urandom(4).hex()}"
        with paused_gc():
            new_log, snapshot, _ = compaction.write_generation(
                fs, old, state, new_generation, new_nonce(random.Random()), filename=temp)
    finally:
        old.close()
    try:
        new_log.rename()
    finally:
        new_log.close()
    # Trust nothing that was not read back: replay the new file strictly.
    check = LogFile.open(fs, directory, name, new_generation)
    try:
        replayed = QueueState()
        with paused_gc():
            found = check.scan(replayed.apply_batch, 0, full=True)
    finally:
        check.close()
    if found.torn_offset is not None or not replayed.snapshot_seen or replayed != snapshot:
        raise NobrokerError(f"the salvaged generation {new_generation} did not replay as "
                            f"written; nothing was switched")
    return new_generation


def _lost(scan: Scan, generation: int) -> tuple[tuple[int, int], ...]:
    """Ranges of batch numbers that no kept batch carries, between kept ones (and
    before the first, in generation 0, whose batches are numbered from 1)."""
    lost = []
    numbers = [batch[0].record[BATCH] for batch in scan.batches]
    if generation == 0:
        numbers.insert(0, 0)
    for before, after in itertools.pairwise(numbers):
        if after > before + 1:
            lost.append((before + 1, after - 1))
    return tuple(lost)


def _spans(scan: Scan) -> tuple[tuple[int, int], ...]:
    """The kept batches as runs of adjacent bytes: (offset, length)."""
    spans: list[list[int]] = []
    for batch in scan.batches:
        start, stop = batch[0].offset, batch[-1].offset + batch[-1].size
        if spans and spans[-1][1] == start:
            spans[-1][1] = stop
        else:
            spans.append([start, stop])
    return tuple((start, stop - start) for start, stop in spans)
