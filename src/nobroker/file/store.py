"""The file store: one queue's files, lock and in-memory replay state.

`Queue` (queue.py) checks arguments and turns state entries into `Job`s;
everything about the files lives here. Every call follows the same beats,
under the queue's lock:
  1. read forward whatever other handles appended (and notice a compaction);
  2. expire leases whose deadline has passed (recorded, so replay stays pure);
  3. plan the call's records against the state (errors here write nothing);
  4. write them as one batch and apply them to the in-memory state.
Then, outside the lock, fdatasync the log before returning, so that
concurrent callers (threads or processes) share fsyncs instead of queueing
for them. A call returns only after an fsync that began after its records
were written; if that fsync fails, the handle is poisoned, because the
kernel may have dropped the pages and a second fsync would prove nothing.

Memory is a cache of the log: if a handle is ever unsure (a failed write,
a peer's corrupt record), it stops and must be reopened, which replays.

The interface `Queue` uses:
  write(plan, spare)  one write call: beats 1-4, then the fsync; `plan(state,
                      batch, now)` adds records and returns a function that
                      builds the call's result (run under the lock, after the
                      commit);
  read(query)         `query(state)` under the lock, after reading forward;
  payload(entry)      a job's payload, read from the current generation;
  prepare_wait(), wait(timeout)   the wake channel, for Queue.wait;
  compact(), close(); recovery, generation, log_bytes, state.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from ..backend import Settings
from ..errors import (
    CompactionError,
    CorruptLogError,
    NobrokerError,
    QueueClosedError,
    StorageError,
    UnsafeFilesystemError,
)
from ..models import CompactionResult, RecoveryReport
from . import checkpoint, compaction, framing
from .commands import Batch, new_nonce, plan_reclaim
from .fs import NETWORK_FILESYSTEMS, filesystem_type
from .lock import release_shared_lock, shared_lock
from .logfile import LogFile, ScanResult, log_filename, paused_gc
from .options import FileOptions
from .rebuild import load_checkpoint, state_at
from .records import loads
from .state import Entry, QueueState
from .wake import WakeChannel

__all__ = ["FileStore", "Plan"]

log = logging.getLogger("nobroker")
T = TypeVar("T")
# A write call's plan: add records to the batch, return what builds the result.
Plan = Callable[[QueueState, Batch, float], Callable[[], T]]

_LOCKED_CATCH_UP = 256 << 10  # copy at most about this much under the lock at the switch
# Queues (realpath/NAME) whose log fsync failed in this process: the next open rescues them.
_FSYNC_FAILED: set[str] = set()


class FileStore:
    """The files of the queue `name` in `directory`, opened (or created) and recovered.

    Safe to share between threads; reopens itself in a forked child. The
    settings are the `Queue`'s, already checked by it, with a clock and an rng.
    """

    def __init__(self, directory: str, name: str, settings: Settings,
                 options: FileOptions) -> None:
        assert settings.clock is not None and settings.rng is not None  # Settings.filled()
        self.directory = directory
        self.name = name
        self.fsync = settings.fsync
        self.readonly = settings.readonly
        self.lock_timeout = settings.lock_timeout
        self.auto_compact = options.auto_compact
        self.backoff = settings.backoff  # for the lease expiries each write records first
        self.key_retention = settings.key_retention
        self.options = options
        self.rng = settings.rng
        self._fs = fs = options.fs
        self._clock = settings.clock
        self._last_now = 0.0
        self._closed = False
        self._poisoned: str | None = None
        self._pid = os.getpid()
        self._sync_lock = threading.Lock()
        self._compacting = threading.RLock()  # one compaction at a time per handle
        self._log: LogFile | None = None
        self._state = QueueState()
        self._checkpointed = 0  # log offset covered by the newest checkpoint we know of
        self._prepare_directory(options.allow_network_fs)
        if self.readonly and not any(
                os.path.lexists(os.path.join(self.directory, entry))
                for entry in (compaction.current_filename(name), log_filename(name, 0),
                              f"{name}.lock")):
            # Checked before the lock file is opened (O_CREAT): read-only creates nothing.
            raise NobrokerError(f"no queue named {name!r} in {self.directory}")
        self._wake = WakeChannel(os.path.join(self.directory, f"{name}.wake"))
        try:
            self._lock = shared_lock(fs, self._lock_path, readonly=self.readonly)
        except OSError as exc:  # e.g. the lock file's name is taken by a directory
            raise StorageError(self._lock_path, "opening the lock file", exc) from None
        if self._lock.degraded:
            log.warning("%s: opened read-only: %s", self._lock_path, self._lock.degraded)
        try:
            with self._locked(refresh=False):
                self.recovery: RecoveryReport = self._load()
                if self._rescue_key in _FSYNC_FAILED and not self.readonly:
                    # An fsync of this queue failed in this process: the kernel may have
                    # marked pages clean that never reached the disk, yet we just read
                    # them back. Rewrite everything as fresh pages before trusting it.
                    self._compact_locked()
                    _FSYNC_FAILED.discard(self._rescue_key)
        except BaseException:
            release_shared_lock(self._lock)
            raise

    # -- what the Queue reads -----------------------------------------------

    @property
    def generation(self) -> int:
        return self._live_log().generation

    @property
    def log_bytes(self) -> int:
        """The current generation's logical end (read forward by the last locked call)."""
        return self._live_log().end

    @property
    def state(self) -> QueueState:
        """The replay state; consistent with the log only under the lock (in a plan
        or query). A reload or a compaction replaces the object."""
        return self._state

    # -- opening ------------------------------------------------------------

    @property
    def _rescue_key(self) -> str:
        return os.path.join(os.path.realpath(self.directory), self.name)

    @property
    def _lock_path(self) -> str:
        return os.path.join(self.directory, f"{self.name}.lock")

    @property
    def _current_path(self) -> str:
        return os.path.join(self.directory, compaction.current_filename(self.name))

    def _prepare_directory(self, allow_network_fs: bool) -> None:
        if not os.path.isdir(self.directory):
            if self.readonly:
                raise NobrokerError(f"no queue directory at {self.directory}")
            parent = os.path.dirname(self.directory)
            os.makedirs(parent, mode=0o700, exist_ok=True)
            try:
                self._fs.mkdir(self.directory, 0o700)  # payloads are often private
                self._fs.fsync_dir(parent)
            except FileExistsError:
                pass
        kind = filesystem_type(self.directory)
        if kind in NETWORK_FILESYSTEMS and not allow_network_fs:
            raise UnsafeFilesystemError(
                f"{self.directory} is on a network file system ({kind}); kernel file locks "
                f"do not protect a queue there. Pass allow_network_fs=True to use it anyway, "
                f"with one process only.")

    def _load(self) -> RecoveryReport:
        """(Re)build the state from the current generation; under the lock."""
        notes: list[str] = []
        generation = compaction.read_current(self._fs, self.directory, self.name)
        if generation == 0:
            generation = compaction.first_generation(
                self._fs, self.directory, self.name, readonly=self.readonly, notes=notes)
        try:
            new_log = LogFile.open(self._fs, self.directory, self.name, generation,
                                   readonly=self.readonly)
        except FileNotFoundError:
            raise CorruptLogError(self._current_path, 0,
                                  f"names generation {generation}, whose log file is missing")\
                from None
        try:
            with paused_gc():
                loaded = load_checkpoint(new_log) if self.options.checkpoints else None
                from_checkpoint = None if loaded is None else new_log.end
                state = QueueState() if loaded is None else loaded
                result = new_log.scan(state.apply_batch, state.last_batch, full=True)
            if generation > 0 and not state.snapshot_seen:
                raise CorruptLogError(new_log.path, new_log.end,
                                      "generation does not start with a complete snapshot")
            side = None
            if result.torn_offset is not None and not self.readonly:
                side = self._cut_torn_tail(new_log, result)
        except BaseException:
            new_log.close()
            raise
        old = self._log
        self._log, self._state = new_log, state
        if self._lock.stamp != generation and not self.readonly:
            self._lock.set_stamp(generation)  # heal a stamp left by a crashed compaction
        self._checkpointed = from_checkpoint or framing.FILE_HEADER.size
        if old is not None:
            self._retire(old)
        return RecoveryReport(
            generation=generation, records=result.records, torn_offset=result.torn_offset,
            torn_bytes=result.torn_bytes, torn_reason=result.torn_reason,
            repaired=side is not None, side_file=side, notes=tuple(notes),
            checkpoint_offset=from_checkpoint)

    def _save_checkpoint(self) -> None:
        """Under the lock: write a checkpoint if enough was logged since the last one."""
        current = self._live_log()
        if (self.readonly or not self.options.checkpoints
                or current.end - self._checkpointed < self.options.checkpoint_after_bytes):
            return
        if self.fsync:
            current.sync()  # the checkpoint must not describe records the disk may lose
        data = checkpoint.encode(self._state, current.generation, current.end, current.crc)
        current.write_checkpoint(data)
        self._checkpointed = current.end

    def _checkpoint_due(self) -> bool:
        """Whether so much was logged since the last checkpoint that a crash would make
        the next open slow: a quarter of what the checkpoint covers, and 8 MiB at least
        (so the total cost of checkpoints stays a constant factor of the log's size)."""
        current = self._log
        if self.readonly or not self.options.checkpoints or current is None:
            return False
        return current.end - self._checkpointed >= max(self.options.checkpoint_every_bytes,
                                                      self._checkpointed // 4)

    def _auto_checkpoint(self) -> None:
        """Save a checkpoint of the log as it is now, without holding the lock.

        Like compaction, it rebuilds the state privately from the part of the log
        that can no longer change (the last checkpoint plus what follows it), so
        other handles and processes are never blocked by it.
        """
        if not self._compacting.acquire(blocking=False):
            return
        try:
            with self._locked():
                if not self._checkpoint_due():
                    return
                current = self._live_log()
                generation, upto = current.generation, current.end
            reader = LogFile.open(self._fs, self.directory, self.name, generation)
            try:
                state = state_at(reader, upto)
                reader.write_checkpoint(checkpoint.encode(state, generation, upto, reader.crc))
                self._checkpointed = upto
            finally:
                reader.close()
        except (OSError, NobrokerError) as exc:  # a cache: the call itself succeeded
            log.warning("could not save a checkpoint of %r: %s", self.name, exc)
        finally:
            self._compacting.release()

    # -- the beats ----------------------------------------------------------

    def _usable(self) -> None:
        if self._closed:
            raise QueueClosedError(f"queue {self.name!r} in {self.directory} is closed")
        if self._poisoned is not None:
            raise QueueClosedError(f"queue {self.name!r} must be reopened: {self._poisoned}")
        if os.getpid() != self._pid:  # we are a forked child: nothing inherited is ours
            self._pid = os.getpid()
            self._lock = shared_lock(self._fs, self._lock_path, readonly=self.readonly)
            self._log = None
            with self._locked(refresh=False):
                self._load()

    @contextmanager
    def _locked(self, refresh: bool = True) -> Iterator[None]:
        self._usable()
        self._lock.acquire(self.lock_timeout)
        try:
            if refresh:
                self._refresh()
            yield
        finally:
            self._lock.release()

    def _refresh(self) -> None:
        """Catch up with what other handles wrote since we last looked."""
        if self._lock.stamp != self._live_log().generation:
            # Someone compacted: move to the new generation, cheaply if we can.
            if not self._follow_compaction():
                self._load()
            return
        current = self._live_log()
        try:
            result = current.scan(self._state.apply_batch, self._state.last_batch, full=False)
        except CorruptLogError as exc:
            self._poison(str(exc))
            raise
        if result.torn_offset is not None and not self.readonly:
            self._cut_torn_tail(current, result)

    @staticmethod
    def _cut_torn_tail(target: LogFile, result: ScanResult) -> str:
        """Save a torn tail to a side file, cut it, say so; returns the side file."""
        assert result.torn_offset is not None
        side = target.save_torn(result.torn_offset, result.torn_bytes)
        target.cut(result.torn_offset)
        log.warning("%s: cut a torn tail of %d bytes at offset %d (%s); saved to %s",
                    target.path, result.torn_bytes, result.torn_offset, result.torn_reason,
                    side)
        return side

    def _follow_compaction(self) -> bool:
        """Switch to the generation another handle compacted into, keeping our state.

        Our state, once we have read the old generation to its end (nobody
        writes it after the switch), holds exactly the jobs the new generation
        does; only where their payloads live has changed. The new generation's
        checkpoint says where the snapshot put each job, and everything
        appended to the old generation after the snapshot point was copied
        byte for byte, so it moved by a fixed distance. That is O(jobs) of
        simple updates instead of decoding a checkpoint or replaying a log.
        Returns False (the caller reloads) if anything does not line up.
        """
        old = self._live_log()
        generation = compaction.read_current(self._fs, self.directory, self.name)
        if generation != old.generation + 1:
            return False
        try:
            old.scan(self._state.apply_batch, self._state.last_batch, full=False)
            new_log = LogFile.open(self._fs, self.directory, self.name, generation,
                                   readonly=self.readonly)
        except (OSError, CorruptLogError):
            return False
        try:
            data = new_log.read_checkpoint() if self.options.checkpoints else None
            moved = None if data is None else checkpoint.relocation(
                data, generation, self._fs.fstat(new_log.fd).st_size,
                lambda offset: compaction.snapshot_nonce(new_log, offset))
        except (checkpoint.CheckpointError, OSError):
            moved = None
        if (moved is None or moved.source_generation != old.generation
                or not moved.source_offset <= old.end):
            new_log.close()
            return False
        shift = moved.end - moved.source_offset
        if not self._state.relocate(moved.source_offset, shift, moved.seqs, moved.names,
                                    moved.locs, moved.sizes):
            new_log.close()
            return False  # not the jobs we know: reload instead
        new_log.end = moved.end + old.end - moved.source_offset
        new_log.crc = new_log.prefix_crc(new_log.end, moved.end, moved.crc)  # the copied tail
        self._state.snapshot_seen = True  # what a replay of the new generation says
        self._log = new_log
        self._checkpointed = moved.end
        self._retire(old)
        self._refresh()  # and read what was written to the new generation since
        return True

    def _now(self) -> float:
        # Recorded queue time never goes backwards, even if the clock is stepped back
        # or another process's clock ran ahead: the log remembers the latest time.
        now = self.peek_now()
        self._last_now = now
        return now

    def peek_now(self) -> float:
        """The queue's present time, as the next write would record it (without
        moving it forward: for reads, which do not write)."""
        return max(float(self._clock()), self._last_now, self._state.latest_time)

    def _live_log(self) -> LogFile:
        if self._log is None:
            raise QueueClosedError("queue is not open")
        return self._log

    def write(self, plan: Plan[T], spare: str | frozenset[str] | None = None) -> T:
        """Run one write call: plan records, commit them as a batch, then fsync.

        Expired leases (and old keys) are recorded first, as a batch of their own;
        `spare` names the call's own jobs, whose late leases stay theirs (plan_reclaim).
        """
        if self.readonly:
            raise NobrokerError("queue was opened read-only")
        synced: LogFile | None = None
        offset = 0
        # The lock by hand rather than through _locked(): this is every write's
        # path, and a generator-based context manager costs a few microseconds.
        self._usable()
        self._lock.acquire(self.lock_timeout)
        try:
            self._refresh()
            state = self._state  # after the refresh: a reload replaces it
            live = self._live_log()
            start = live.end
            now = self._now()
            batch = Batch(state.last_batch + 1, live.durable)
            plan_reclaim(state, batch, now, self.backoff, self.rng, spare, self.key_retention)
            if batch:
                # Expiries first, as a batch of their own, so that the call sees
                # their effect (a reclaimed job with no backoff is leasable now).
                self._commit(batch)
                reclaimed = batch.wakes
                batch = Batch(state.last_batch + 1, live.durable)
                batch.wakes = reclaimed
            build = plan(state, batch, now)
            if batch:
                self._commit(batch)
            current = self._log
            if current is not None and current.end != start and self.fsync:
                synced, offset = current, current.end
                with self._sync_lock:
                    current.inflight += 1
            result = build()
            due = self._compaction_due()
            checkpoint_due = not due and self._checkpoint_due()
        finally:
            self._lock.release()
        if batch.wakes:
            # Before our fsync: a woken worker's own fsync covers these records too.
            self._wake.notify(batch.wakes)
        if synced is not None:
            self._sync(synced, offset)
        if due:
            self._auto_compact()
        elif checkpoint_due:
            self._auto_checkpoint()
        return result

    def _commit(self, batch: Batch) -> None:
        current = self._live_log()
        start = current.end
        data, applied = batch.encode(start)
        try:
            current.append(data)
        except OSError as exc:
            try:  # leave the log ending on a batch boundary, durably
                current.cut(start)
            except OSError as second:
                self._poison(f"could not undo a failed write: {second}")
            raise StorageError(current.path, "write", exc) from None
        try:
            self._state.apply_batch(applied)
        except ValueError as exc:  # a planning bug; memory may be half-applied
            self._poison(f"internal error applying our own batch: {exc}")
            try:  # replay would refuse this batch too: never leave it on disk
                current.cut(start)
            except OSError:
                pass
            raise QueueClosedError(f"queue {self.name!r} must be reopened: internal error "
                                   f"applying its own batch: {exc}") from exc

    def _sync(self, target: LogFile, offset: int) -> None:
        try:
            target.sync_to(offset)
        except OSError as exc:
            self._poison(f"fsync of {target.path} failed: {exc}")
            _FSYNC_FAILED.add(self._rescue_key)
            raise StorageError(target.path, "fsync", exc) from None
        finally:
            with self._sync_lock:
                target.inflight -= 1
                if target.retired and target.inflight == 0:
                    target.close()

    def _retire(self, old: LogFile) -> None:
        with self._sync_lock:
            old.retired = True
            if old.inflight == 0:
                old.close()

    def _poison(self, reason: str) -> None:
        log.error("queue %r in %s poisoned: %s", self.name, self.directory, reason)
        self._poisoned = reason

    def read(self, query: Callable[[QueueState], T]) -> T:
        """`query(state)` under the lock, after reading forward."""
        with self._locked():
            return query(self._state)

    def payload(self, entry: Entry) -> Any:
        """The payload of a job in the state, decoded; under the lock."""
        current = self._live_log()
        try:
            return loads(current.read_payload(entry.loc))
        except ValueError:  # UnicodeDecodeError too: the CRC matched, so a writer bug
            raise CorruptLogError(current.path, entry.loc, "payload is not JSON") from None

    # -- waking -------------------------------------------------------------

    def prepare_wait(self) -> None:
        """Keep any poke from now on for the next wait(); call it before looking."""
        self._wake.prepare()

    def wait(self, timeout: float) -> bool:
        """Block until a writer pokes the wake pipe (True) or `timeout` passes (False)."""
        return self._wake.wait(timeout)

    # -- compaction ---------------------------------------------------------

    def compact(self) -> CompactionResult:
        """Rewrite the live jobs into a new log generation and switch to it atomically.

        The new generation is written without holding the queue's lock, so other
        handles and processes keep working; only the switch at the end locks.
        """
        if self.readonly:
            raise NobrokerError("queue was opened read-only")
        for _ in range(3):
            result = self._compact()
            if result is not None:
                return result
        raise CompactionError("other processes kept compacting this queue first")

    def _compact(self) -> CompactionResult | None:
        """One compaction; None if another process switched generations meanwhile."""
        with self._compacting:
            started = time.perf_counter()
            with self._locked():
                old = self._live_log()
                generation, upto = old.generation, old.end
            if upto == framing.FILE_HEADER.size:
                return CompactionResult(generation, generation, upto, upto, 0, 0,
                                        time.perf_counter() - started)  # nothing to rewrite
            try:
                prepared = compaction.prepare_generation(
                    self._fs, self.directory, self.name, generation, upto,
                    nonce=new_nonce(self.rng), checkpoints=self.options.checkpoints)
            except (OSError, CorruptLogError) as exc:
                raise CompactionError(f"writing generation {generation + 1} failed: {exc}")\
                    from None
            # Catch up with what was appended meanwhile, still without the lock, until
            # what is left to copy under the lock is small. Our own state is replaced
            # by the new generation's at the switch, so the locked step does not read
            # forward into it: after a long compaction that would replay, under the
            # lock, everything the others wrote meanwhile.
            for _ in range(4):
                before = prepared.upto
                try:
                    prepared.catch_up()
                except (OSError, CorruptLogError) as exc:
                    prepared.discard()
                    raise CompactionError(f"copying to generation {generation + 1} failed: "
                                          f"{exc}") from None
                if prepared.upto - before <= _LOCKED_CATCH_UP:
                    break
            with self._locked(refresh=False):
                if self._lock.stamp != generation:  # a peer compacted first
                    prepared.discard()
                    self._refresh()  # follow it, as any locked call would
                    return None
                return self._finish_compaction(prepared, started)

    def _compact_locked(self) -> CompactionResult:
        """Compact while already holding the lock (the rescue after a failed fsync)."""
        result = self._compact()
        if result is None:  # cannot happen while we hold the lock throughout
            raise CompactionError("the generation changed under the lock")
        return result

    def _finish_compaction(self, prepared: compaction.Prepared,
                           started: float) -> CompactionResult:
        """Steps 4-8 of compaction.py's protocol; under the lock."""
        old, new_log = self._live_log(), prepared.log
        try:
            # The last few batches appended meanwhile; nobody writes now, so a torn
            # tail is a dead writer's: saved aside, like any read-forward would.
            result = prepared.catch_up()
            if result.torn_offset is not None and not self.readonly:
                self._cut_torn_tail(old, result)
            new_log.sync()
            new_log.rename()
            # Stamp first: a peer that sees the new stamp before the flip re-reads
            # NAME.current and finds the old generation, which is still right.
            self._lock.set_stamp(new_log.generation)
        except OSError as exc:
            prepared.discard()
            raise CompactionError(f"writing generation {new_log.generation} failed: {exc}")\
                from None
        try:
            compaction.publish_generation(self._fs, self.directory, self.name,
                                          new_log.generation)
        except OSError as exc:
            new_log.close()
            prepared.close()
            # The rename may or may not have reached the disk: only a reopen can tell.
            self._poison(f"switching to generation {new_log.generation} failed: {exc}")
            raise CompactionError(
                f"switching to generation {new_log.generation} failed: {exc}") from None
        state = prepared.state  # = replaying the whole new file (catch_up replays each copy)
        before = prepared.upto  # the old generation's end: our own view of it may lag
        prepared.close()
        self._log, self._state = new_log, state
        self._checkpointed = prepared.checkpointed
        self._retire(old)
        try:
            compaction.remove_stale_files(self._fs, self.directory, self.name,
                                          new_log.generation)
        except OSError as exc:  # harmless: stale generations are never read
            log.warning("could not remove old generations: %s", exc)
        return CompactionResult(old_generation=old.generation,
                                new_generation=new_log.generation, bytes_before=before,
                                bytes_after=new_log.end, live_jobs=len(state.jobs),
                                remembered_keys=len(state.done_keys),
                                seconds=time.perf_counter() - started)

    def _compaction_due(self) -> bool:
        current = self._log
        if (self.auto_compact is None or current is None
                or current.end < self.options.min_compact_bytes):
            return False
        return self._state.live_bytes < current.end * (1 - self.auto_compact)

    def _auto_compact(self) -> None:
        if not self._compacting.acquire(blocking=False):
            return  # another thread of ours is on it
        try:
            with self._locked():
                due = self._compaction_due()
            result = self._compact() if due else None
            if result is not None:
                log.info("auto-compacted %s: %d -> %d bytes", self.name,
                         result.bytes_before, result.bytes_after)
        except CompactionError as exc:  # the call that triggered it already succeeded
            log.error("auto-compaction of %r failed: %s", self.name, exc)
        finally:
            self._compacting.release()

    # -- lifecycle ----------------------------------------------------------

    def close(self) -> None:
        """Save a checkpoint if one is worth it, release the files and the lock."""
        if self._closed:
            return
        if (self._log is not None and self._poisoned is None and not self.readonly
                and os.getpid() == self._pid):
            try:
                with self._locked():
                    self._save_checkpoint()
            except (NobrokerError, OSError) as exc:  # a cache: closing must not fail over it
                log.warning("could not save a checkpoint of %r: %s", self.name, exc)
        self._closed = True
        self._wake.close()
        if self._log is not None and os.getpid() == self._pid:
            self._retire(self._log)
            release_shared_lock(self._lock)
