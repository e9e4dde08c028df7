"""The file store: one queue's files, lock and in-memory replay state; the commit protocol.

FileBackend (backend.py) plans each operation's records and builds its Job
views; the store runs them against the files. Its other jobs live beside
it, each in a module of its own (functions of the store, which the methods
below call): opening and
recovery, and reopening in a forked child (opening.py), reading forward and
following a peer's compaction (following.py), when to checkpoint
(checkpointing.py), running a compaction (compacting.py), a write call's
beats (commit.py). This module is the commit protocol. Every call follows
the same beats, under the queue's lock:
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

The interface FileBackend uses:
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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from ..backend import Settings
from ..errors import (
    CorruptLogError,
    NobrokerError,
    QueueClosedError,
    StorageError,
)
from ..models import CompactionResult, RecoveryReport
from . import checkpointing, commit, compacting, following, opening, syncing
from .counters import HandleCounters
from .disk.finished import FinishSignal, FinishWaiter, finish_directory
from .disk.lock import SharedLock, release_shared_lock, shared_lock
from .disk.wake import WakeChannel
from .generations import compaction
from .log.logfile import LogFile
from .log.records import RecordType, loads
from .log.syncfile import SharedSync
from .opening import queue_exists
from .options import FileOptions
from .state.batch import Batch
from .state.state import Entry, QueueState

__all__ = ["FileStore", "Plan"]

log = logging.getLogger("nobroker")
T = TypeVar("T")
# A write call's plan: add records to the batch, return what builds the result.
Plan = Callable[[QueueState, Batch, float], Callable[[], T]]

# Record type holding a kept finished job's outcome -> its field for the finishing time.
_OUTCOME_FIELD: dict[int, str] = {RecordType.ACK: "t", RecordType.CANCEL: "t",
                                  RecordType.FINISHED: "fin"}


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
        self._compaction_lock: SharedLock | None = None  # NAME.compacting, opened at first use
        self._log: LogFile | None = None
        self._state = QueueState()
        self._checkpointed = 0  # log offset covered by the newest checkpoint we know of
        self.counters = HandleCounters()  # compactions made, followed, reloaded after
        self._prepare_directory(options.allow_network_fs)
        if self.readonly and not queue_exists(self.directory, name):
            # Checked before the lock file is opened (O_CREAT): read-only creates nothing.
            raise NobrokerError(f"no queue named {name!r} in {self.directory}")
        self._wake = WakeChannel(os.path.join(self.directory, f"{name}.wake"))
        self._finished = FinishSignal(finish_directory(self.directory, name))
        try:
            self._lock = shared_lock(fs, self._lock_path, readonly=self.readonly)
        except OSError as exc:  # e.g. the lock file's name is taken by a directory
            raise StorageError(self._lock_path, "opening the lock file", exc) from None
        if self._lock.degraded:
            log.warning("%s: opened read-only: %s", self._lock_path, self._lock.degraded)
        self.shared: SharedSync | None = None  # group commit across processes
        syncing.open_shared(self)
        try:
            with self._locked(refresh=False):
                self.recovery: RecoveryReport = self._load()
                syncing.bound_shared(self)
                if self._rescue_key in syncing.FSYNC_FAILED and not self.readonly:
                    # An fsync of this queue failed in this process: the kernel may have
                    # marked pages clean that never reached the disk, yet we just read
                    # them back. Rewrite everything as fresh pages before trusting it.
                    compacting.compact_locked(self)
                    syncing.FSYNC_FAILED.discard(self._rescue_key)
        except BaseException:
            release_shared_lock(self._lock)
            if self._compaction_lock is not None:  # the rescue's compaction opened it
                release_shared_lock(self._compaction_lock)
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

    @property
    def _rescue_key(self) -> str:
        return os.path.join(os.path.realpath(self.directory), self.name)

    @property
    def _lock_path(self) -> str:
        return os.path.join(self.directory, f"{self.name}.lock")

    @property
    def _current_path(self) -> str:
        return os.path.join(self.directory, compaction.current_filename(self.name))

    # -- the store's other jobs, each in its module (see the module doc) ----

    def _prepare_directory(self, allow_network_fs: bool) -> None:
        self.network_fs = opening.prepare_directory(self, allow_network_fs)

    def _load(self) -> RecoveryReport:
        return opening.load(self)

    def _reopen_in_child(self) -> None:
        opening.reopen_in_child(self)

    def _refresh(self) -> None:
        following.refresh(self)

    def _save_checkpoint(self) -> None:
        checkpointing.save_checkpoint(self)

    def _checkpoint_due(self) -> bool:
        return checkpointing.checkpoint_due(self)

    def _auto_checkpoint(self) -> None:
        checkpointing.auto_checkpoint(self)

    def compact(self) -> CompactionResult:
        """Rewrite the live jobs into a new log generation and switch to it atomically
        (compacting.py)."""
        return compacting.compact(self)

    def _compact(self) -> CompactionResult | None:
        return compacting.compact_once(self)

    def _compaction_due(self) -> bool:
        return compacting.compaction_due(self)

    def _auto_compact(self) -> None:
        compacting.auto_compact(self)

    # -- the beats ----------------------------------------------------------

    def _usable(self) -> None:
        if self._closed:
            raise QueueClosedError(f"queue {self.name!r} in {self.directory} is closed")
        if self._poisoned is not None:
            raise QueueClosedError(f"queue {self.name!r} must be reopened: {self._poisoned}")
        if os.getpid() != self._pid:  # we are a forked child: nothing inherited is ours
            self._reopen_in_child()

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
        return commit.write(self, plan, spare, False)[0]

    def write_then_read(self, plan: Plan[Callable[[LogFile], T]],
                        spare: str | frozenset[str] | None = None) -> T:
        """write(), for a result finished outside the lock, after the fsync: `plan`'s
        builder returns a function of the generation the records went to, which
        stays open (pinned) until that function returns, even if a compaction
        retires it meanwhile. For reading payloads, most of a lease's cost,
        without holding the lock that bounds the whole queue's throughput."""
        finish, source = commit.write(self, plan, spare, True)
        assert source is not None
        try:
            return finish(source)
        finally:
            self.unpin(source)

    def _commit(self, batch: Batch) -> None:
        current = self._live_log()
        start = current.end
        data, applied = batch.encode(start)
        try:
            current.append(data)
        except OSError as exc:
            try:  # leave the log ending on a batch boundary, durably
                syncing.cut(self, current, start)
            except OSError as second:
                self._poison(f"could not undo a failed write: {second}")
            raise StorageError(current.path, "write", exc) from None
        try:
            self._state.apply_batch(applied)
        except ValueError as exc:  # a planning bug; memory may be half-applied
            self._poison(f"internal error applying our own batch: {exc}")
            try:  # replay would refuse this batch too: never leave it on disk
                syncing.cut(self, current, start)
            except OSError:
                pass
            raise QueueClosedError(f"queue {self.name!r} must be reopened: internal error "
                                   f"applying its own batch: {exc}") from exc

    def pin(self) -> LogFile:
        """The current generation, kept open until unpin(), even if a compaction
        retires it meanwhile; under the lock. For reading payloads after releasing it."""
        current = self._live_log()
        with self._sync_lock:
            current.inflight += 1
        return current

    def unpin(self, target: LogFile, synced: bool | None = None) -> None:
        """Let go of a pin (or hold_for_sync's hold); `synced` after a commit's fsync
        wait: whether this thread issued the fdatasync (counted, under the same lock)."""
        with self._sync_lock:
            if synced is not None:
                self.counters.durable_calls += 1
                self.counters.fdatasyncs += synced
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

    def payload(self, entry: Entry, source: LogFile | None = None) -> Any:
        """The payload of a job in the state, decoded; under the lock, or from the
        generation `source` that was pinned (pin()) when `entry` was taken."""
        current = self._live_log() if source is None else source
        try:
            return loads(current.read_payload(entry.loc))
        except ValueError:  # UnicodeDecodeError too: the CRC matched, so a writer bug
            raise CorruptLogError(current.path, entry.loc, "payload is not JSON") from None

    def outcome(self, entry: Entry) -> tuple[float, Any]:
        """A kept finished job's (finished_at, result), read from the record that holds
        them (an ACK, CANCEL or FINISHED record); under the lock."""
        current = self._live_log()
        found = current.record_at(entry.loc)
        if found is None or found[0] not in _OUTCOME_FIELD or found[1].get("id") != entry.id:
            raise CorruptLogError(current.path, entry.loc, "finished job's record unreadable")
        record = found[1]
        return float(record[_OUTCOME_FIELD[found[0]]]), record.get("r")

    # -- waking -------------------------------------------------------------

    def finish_waiter(self) -> FinishWaiter:
        """A pipe of one's own that writers poke whenever a job finishes; look at the
        job after making it, then wait on it (see finished.py)."""
        self._usable()
        return FinishWaiter(finish_directory(self.directory, self.name))

    def prepare_wait(self) -> None:
        """Keep any poke from now on for the next wait(); call it before looking."""
        self._wake.prepare()

    def wait(self, timeout: float) -> bool:
        """Block until a writer pokes the wake pipe (True) or `timeout` passes (False)."""
        return self._wake.wait(timeout)

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
        self._finished.close()
        if self._log is not None and os.getpid() == self._pid:
            self._retire(self._log)
            release_shared_lock(self._lock)
            if self._compaction_lock is not None:
                release_shared_lock(self._compaction_lock)
            if self.shared is not None:
                self.shared.close()
