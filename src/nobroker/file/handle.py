"""An open queue's handle: its lock, live log and replay state; the commit protocol.

FileBackend (backend.py) plans each operation's records; the handle runs
them against the files. It alone holds what an open queue is (the lock, the
live log of the current generation, the replay state, the poison flag, the
counters) and only its methods change them. The modules working for it see
it through HandleAPI (handleapi.py): commit.py (a write call's beats),
syncing.py (its fsync), compactor.py, checkpointer.py, following.py (a
peer's compaction); opening.py loads what the handle adopts. Every call
follows the same beats, under the queue's lock:
  1. read forward whatever other handles appended (and notice a compaction);
  2. expire leases whose deadline has passed (recorded, so replay stays pure);
  3. plan the call's records against the state (errors here write nothing);
  4. write them as one batch and apply them to the in-memory state.
Then, outside the lock, fdatasync the log before returning, so that
concurrent threads share one fsync instead of queueing for it (each process
syncs for itself).
A call returns only after an fsync that began after its records were
written; if that fsync fails, the handle is poisoned, because the kernel may
have dropped the pages and a second fsync would prove nothing.

Memory is a cache of the log: if a handle is ever unsure (a failed write,
a peer's corrupt record), it stops and must be reopened, which replays.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from ..backend import Settings
from ..errors import NobrokerError, QueueClosedError, StorageError
from ..models import CompactionResult, RecoveryReport
from . import commit, following, opening, syncing
from .checkpointer import Checkpointer
from .commit import Plan
from .compactor import Compactor
from .counters import HandleCounters
from .disk.finished import FinishSignal, FinishWaiter, finish_directory
from .disk.fs import FileSystem
from .disk.lock import SharedLock, release_shared_lock, shared_lock
from .disk.wake import WakeChannel
from .log.logfile import LogFile
from .options import FileOptions
from .state.batch import Batch
from .state.state import QueueState

__all__ = ["QueueHandle"]

log = logging.getLogger("nobroker")
T = TypeVar("T")


class QueueHandle:
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
        self.result_ttl = settings.result_ttl  # dependents a failure cancels are kept so long
        self.options = options
        self.rng = settings.rng
        self.fs: FileSystem = options.fs
        self._clock = settings.clock
        self._last_now = 0.0
        self._closed = False
        self._poisoned: str | None = None
        self._pid = os.getpid()
        self._lock_path = os.path.join(directory, f"{name}.lock")
        self._sync_lock = threading.Lock()  # pins (inflight) and the fsync counters
        self._log: LogFile | None = None
        self._state = QueueState()
        self._checkpointed = 0  # log offset covered by the newest checkpoint we know of
        self.counters = HandleCounters()  # compactions made, followed, reloaded after
        busy = threading.RLock()  # one compaction or background checkpoint at a time
        self.compactor = Compactor(self, busy)
        self.checkpointer = Checkpointer(self, busy)
        self.network_fs = opening.prepare_directory(
            self.fs, directory, readonly=self.readonly,
            allow_network_fs=options.allow_network_fs)
        if self.readonly and not opening.queue_exists(directory, name):
            # Checked before the lock file is opened (O_CREAT): read-only creates nothing.
            raise NobrokerError(f"no queue named {name!r} in {directory}")
        self._wake = WakeChannel(os.path.join(directory, f"{name}.wake"))
        self._finished = FinishSignal(finish_directory(directory, name))
        # Told the jobs a write's lease reclaim dead-lettered (FileBackend sets it).
        self.dead_listener: Callable[[list[str]], None] | None = None
        try:
            self._lock = shared_lock(self.fs, self._lock_path, readonly=self.readonly)
        except OSError as exc:  # e.g. the lock file's name is taken by a directory
            raise StorageError(self._lock_path, "opening the lock file", exc) from None
        if self._lock.degraded:
            log.warning("%s: opened read-only: %s", self._lock_path, self._lock.degraded)
        try:
            with self.locked(refresh=False):
                self.recovery: RecoveryReport = self.reload()
                rescue = syncing.rescue_key(directory, name)
                if rescue in syncing.FSYNC_FAILED and not self.readonly:
                    # An fsync of this queue failed in this process: the kernel may have
                    # marked pages clean that never reached the disk, yet we just read
                    # them back. Rewrite everything as fresh pages before trusting it.
                    self.compactor.compact_locked()
                    syncing.FSYNC_FAILED.discard(rescue)
        except BaseException:
            release_shared_lock(self._lock)
            self.compactor.close()  # the rescue's compaction may have opened its lock
            raise

    # -- what it holds (read-only) ------------------------------------------

    @property
    def generation(self) -> int:
        """The live log's generation."""
        return self.live_log().generation

    @property
    def log_bytes(self) -> int:
        """The current generation's logical end (read forward by the last locked call)."""
        return self.live_log().end

    @property
    def state(self) -> QueueState:
        """The replay state; consistent with the log only under the lock (in a plan
        or query). A reload or a compaction replaces the object."""
        return self._state

    @property
    def log(self) -> LogFile | None:
        """The live log (the current generation); None before the first load."""
        return self._log

    @property
    def lock(self) -> SharedLock:
        """The queue's lock (NAME.lock), shared by this process's handles."""
        return self._lock

    @property
    def checkpointed(self) -> int:
        """The log offset the newest checkpoint we know of covers."""
        return self._checkpointed

    @property
    def poisoned(self) -> str | None:
        """Why the handle must be reopened, if it must."""
        return self._poisoned

    # -- the beats ----------------------------------------------------------

    def usable(self) -> None:
        """Raise unless this handle may touch its files; in a forked child, reopen."""
        if self._closed:
            raise QueueClosedError(f"queue {self.name!r} in {self.directory} is closed")
        if self._poisoned is not None:
            raise QueueClosedError(f"queue {self.name!r} must be reopened: {self._poisoned}")
        if os.getpid() != self._pid:  # we are a forked child: nothing inherited is ours
            self._reopen_in_child()

    @contextmanager
    def locked(self, refresh: bool = True) -> Iterator[None]:
        """Hold the queue's lock, after reading forward (unless not `refresh`)."""
        self.usable()
        self._lock.acquire(self.lock_timeout)
        try:
            if refresh:
                following.refresh(self)
            yield
        finally:
            self._lock.release()

    def now(self) -> float:
        """The time a write records. It never goes backwards, even if the clock is
        stepped back or another process's clock ran ahead: the log remembers it."""
        now = self.peek_now()
        self._last_now = now
        return now

    def peek_now(self) -> float:
        """The queue's present time, as the next write would record it (without
        moving it forward: for reads, which do not write)."""
        return max(float(self._clock()), self._last_now, self._state.latest_time)

    def live_log(self) -> LogFile:
        """The live log; QueueClosedError if there is none."""
        if self._log is None:
            raise QueueClosedError("queue is not open")
        return self._log

    def write(self, plan: Plan[T], spare: str | frozenset[str] | None = None) -> T:
        """Run one write call: plan records, commit them as a batch, then fsync.

        Expired leases (and old keys) are recorded first, as a batch of their own;
        `spare` names the call's own jobs, whose late leases stay theirs (plan_reclaim).
        """
        return commit.write(self, self.compactor, self.checkpointer, plan, spare, False)[0]

    def write_then_read(self, plan: Plan[Callable[[LogFile], T]],
                        spare: str | frozenset[str] | None = None) -> T:
        """write(), for a result finished outside the lock, after the fsync: `plan`'s
        builder returns a function of the generation the records went to, which
        stays open (pinned) until that function returns, even if a compaction
        retires it meanwhile. For reading payloads, most of a lease's cost,
        without holding the lock that bounds the whole queue's throughput."""
        finish, source = commit.write(self, self.compactor, self.checkpointer, plan, spare,
                                      True)
        assert source is not None
        try:
            return finish(source)
        finally:
            self.unpin(source)

    def commit(self, batch: Batch) -> None:
        """Beat 4, under the lock: append `batch` to the live log and apply it."""
        current = self.live_log()
        start = current.end
        data, applied = batch.encode(start)
        try:
            current.append(data)
        except OSError as exc:
            try:  # leave the log ending on a batch boundary, durably
                syncing.cut(current, start)
            except OSError as second:
                self.poison(f"could not undo a failed write: {second}")
            raise StorageError(current.path, "write", exc) from None
        try:
            self._state.apply_batch(applied)
        except ValueError as exc:  # a planning bug; memory may be half-applied
            self.poison(f"internal error applying our own batch: {exc}")
            try:  # replay would refuse this batch too: never leave it on disk
                syncing.cut(current, start)
            except OSError:
                pass
            raise QueueClosedError(f"queue {self.name!r} must be reopened: internal error "
                                   f"applying its own batch: {exc}") from exc

    def pin(self) -> LogFile:
        """The current generation, kept open until unpin(), even if a compaction
        retires it meanwhile; under the lock. For reading payloads after releasing it."""
        current = self.live_log()
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

    def wake_workers(self, jobs: int) -> None:
        """Poke idle workers: `jobs` records may have made a job leasable."""
        self._wake.notify(jobs)

    def signal_finished(self) -> None:
        """Poke result waiters: a job finished (after its fsync)."""
        self._finished.notify()

    def reclaimed_dead(self, job_ids: list[str]) -> None:
        """Jobs this handle's write dead-lettered as their leases ran out (after its
        fsync, outside the lock): told to `dead_listener` (the Queue's `dead` hook)."""
        if self.dead_listener is not None:
            self.dead_listener(job_ids)

    # -- changing what it holds ---------------------------------------------

    def poison(self, reason: str) -> None:
        """Stop: memory can no longer be trusted; only a reopen (a replay) may go on."""
        log.error("queue %r in %s poisoned: %s", self.name, self.directory, reason)
        self._poisoned = reason

    def switch_generation(self, new_log: LogFile, state: QueueState, checkpointed: int) -> None:
        """Under the lock: `new_log` (whose checkpoint covers `checkpointed`) is now
        the live log and `state` its replay; the old generation is retired."""
        old = self.live_log()
        self._log, self._state = new_log, state
        self._checkpointed = checkpointed
        self._retire(old)

    def note_checkpoint(self, offset: int) -> None:
        """A checkpoint of the live log now covers it up to `offset`."""
        self._checkpointed = offset

    def reload(self) -> RecoveryReport:
        """(Re)build the state from the current generation; under the lock."""
        loaded = opening.load(self.fs, self.directory, self.name, readonly=self.readonly,
                              checkpoints=self.options.checkpoints)
        old = self._log
        self._log, self._state = loaded.log, loaded.state
        generation = loaded.report.generation
        if self._lock.stamp != generation and not self.readonly:
            self._lock.set_stamp(generation)  # heal a stamp left by a crashed compaction
        self._checkpointed = loaded.checkpointed
        if old is not None:
            self._retire(old)
        return loaded.report

    def _retire(self, old: LogFile) -> None:
        with self._sync_lock:
            old.retired = True
            if old.inflight == 0:
                old.close()

    def _reopen_in_child(self) -> None:
        """In a forked child: nothing inherited is ours (the parent's lock, its file
        offsets): take the lock afresh and reload from the files."""
        self._pid = os.getpid()
        self._lock = shared_lock(self.fs, self._lock_path, readonly=self.readonly)
        self.compactor.forget_inherited()
        self._log = None
        with self.locked(refresh=False):
            self.reload()

    def compact(self) -> CompactionResult:
        """Rewrite the live jobs into a new log generation and switch to it atomically
        (compactor.py)."""
        return self.compactor.compact()

    def read(self, query: Callable[[QueueState], T]) -> T:
        """`query(state)` under the lock, after reading forward."""
        with self.locked():
            return query(self._state)

    # -- waking -------------------------------------------------------------

    def finish_waiter(self) -> FinishWaiter:
        """A pipe of one's own that writers poke whenever a job finishes; look at the
        job after making it, then wait on it (see finished.py)."""
        self.usable()
        return FinishWaiter(finish_directory(self.directory, self.name))

    def prepare_wait(self) -> None:
        """Keep any poke from now on for the next wait(); call it before looking."""
        self._wake.prepare()

    def wait(self, timeout: float) -> bool:
        """Block until a writer pokes the wake pipe (True) or `timeout` passes (False)."""
        return self._wake.wait(timeout)

    # -- lifecycle ----------------------------------------------------------

    def close(self, *, checkpoint: bool = True) -> None:
        """Save a checkpoint if one is worth it, release the files and the lock.
        Without `checkpoint`, write nothing: let go as a process that died would
        (for tests that simulate one)."""
        if self._closed:
            return
        if (checkpoint and self._log is not None and self._poisoned is None
                and not self.readonly and os.getpid() == self._pid):
            try:
                with self.locked():
                    self.checkpointer.save()
            except (NobrokerError, OSError) as exc:  # a cache: closing must not fail over it
                log.warning("could not save a checkpoint of %r: %s", self.name, exc)
        self._closed = True
        self._wake.close()
        self._finished.close()
        if self._log is not None and os.getpid() == self._pid:
            self._retire(self._log)
            release_shared_lock(self._lock)
            self.compactor.close()
