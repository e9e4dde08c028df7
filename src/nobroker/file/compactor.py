"""Running a compaction for an open queue: when, and the switch under the lock.

generations/compaction.py writes and publishes generations; the Compactor
is an open handle's side of its protocol: take a consistent end without the lock, let
compaction.py write the next generation beside the writers, catch up until
little is left, then under the lock copy the rest, switch, and adopt the
new generation's state. Auto-compaction runs after a write call returned
its result, when dead records fill enough of the log; its failures are
logged, since the call that triggered it already succeeded.

One compaction at a time across processes: every process crosses the
dead-bytes threshold at about the same moment, and N of them writing the
same generation cost N times the work for one switch. So a compaction first
takes NAME.compacting's kernel lock (a second lock file, always taken before
the queue's lock, never after): an automatic one only if it is free (the
process that has it is doing the same work), an explicit `compact()` waiting
up to `lock_timeout`. The kernel drops the lock of a compactor that dies, so
a kill -9 never blocks the next one. The lock saves work; it is not what
keeps the files right: the switch still checks under the queue's lock that
nobody switched first, and a compaction's checkpoint is written under a name
of its own and renamed into place only by the switch (compaction.py), so a
compaction that loses (the rescue at open compacts without waiting for the
lock) or dies cannot replace the checkpoint that peers look for.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from ..errors import CompactionError, CorruptLogError, NobrokerError
from ..models import CompactionResult
from . import following
from .disk.lock import SharedLock, release_shared_lock, shared_lock
from .generations import compaction
from .generations.current import publish_generation, remove_stale_files
from .handleapi import HandleAPI
from .log import framing
from .opening import cut_torn_tail
from .state.commands import new_nonce

__all__ = ["Compactor"]

log = logging.getLogger("nobroker")

_LOCKED_CATCH_UP = 256 << 10  # copy at most about this much under the lock at the switch


class Compactor:
    """Compacts the queue of one open handle, which owns it (handle.py).

    `busy` is the handle's lock for work beside the writers: one compaction
    or background checkpoint at a time per handle (checkpointer.py shares it).
    """

    def __init__(self, handle: HandleAPI, busy: threading.RLock) -> None:
        self._handle = handle
        self._busy = busy
        self._lock: SharedLock | None = None  # NAME.compacting, opened at first use

    @property
    def lock(self) -> SharedLock | None:
        """NAME.compacting's lock, once opened (for tests: its tries)."""
        return self._lock

    def compact(self) -> CompactionResult:
        """Rewrite the live jobs into a new log generation and switch to it atomically.

        The new generation is written without holding the queue's lock, so other
        handles and processes keep working; only the switch at the end locks.
        """
        handle = self._handle
        if handle.readonly:
            raise NobrokerError("queue was opened read-only")
        handle.usable()  # a closed or poisoned handle touches no file, not even the lock's
        with self._busy, self.compaction_lock(wait=True):
            for _ in range(3):  # with the lock held, only a rescue at open can come first
                result = self.compact_once()
                if result is not None:
                    return result
        raise CompactionError("other processes kept compacting this queue first "
                              "(or cutting batches it had copied)")

    @contextmanager
    def compaction_lock(self, *, wait: bool) -> Iterator[bool]:
        """Hold NAME.compacting's lock; yields False (held by nobody) if `wait` is False
        and another process or thread has it. With `wait`, waits up to lock_timeout
        (LockTimeoutError names the holder). Take it before the queue's lock, never
        while holding that: the holder takes the queue's lock at its switch."""
        lock = self._held_lock()
        if wait:
            lock.acquire(self._handle.lock_timeout)
        elif not lock.try_acquire():
            yield False
            return
        try:
            yield True
        finally:
            lock.release()

    def _held_lock(self) -> SharedLock:
        """The SharedLock on NAME.compacting, opened at first use and kept until
        close(): while a peer compacts, every write of ours that finds compaction due
        tries this lock, and a try on an open descriptor is one flock call where
        opening the file each time cost an open, a realpath and a close too."""
        with self._busy:  # one open per handle, whichever thread comes first
            lock = self._lock
            if lock is None:
                handle = self._handle
                path = os.path.join(handle.directory, f"{handle.name}.compacting")
                try:
                    lock = shared_lock(handle.fs, path)
                except OSError as exc:
                    raise CompactionError(f"cannot open {path}: {exc}") from None
                self._lock = lock
            return lock

    def compact_once(self) -> CompactionResult | None:
        """One compaction; None if another process switched generations meanwhile, or
        if a batch it copied without the lock was cut by its writer (step 4b).
        The caller holds the compaction lock, or (compact_locked) the queue's lock."""
        handle = self._handle
        with self._busy:
            started = time.perf_counter()
            with handle.locked():
                old = handle.live_log()
                generation, upto = old.generation, old.end
            if upto == framing.FILE_HEADER.size:
                return CompactionResult(generation, generation, upto, upto, 0, 0,
                                        time.perf_counter() - started)  # nothing to rewrite
            handle.counters.compactions_started += 1
            try:
                prepared = compaction.prepare_generation(
                    handle.fs, handle.directory, handle.name, generation, upto,
                    nonce=new_nonce(handle.rng), checkpoints=handle.options.checkpoints)
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
            with handle.locked(refresh=False):
                if handle.lock.stamp != generation:  # a peer compacted first
                    prepared.discard()
                    handle.counters.compactions_discarded += 1
                    following.refresh(handle)  # follow it, as any locked call would
                    return None
                return self._finish(prepared, started)

    def compact_locked(self) -> CompactionResult:
        """Compact while already holding the lock (the rescue after a failed fsync).

        It must not wait for the compaction lock while it holds the queue's (the
        holder needs the queue's lock to finish), and need not: holding the queue's
        lock throughout, it cannot be overtaken; a compactor it overtakes discards
        its work at its own switch."""
        with self.compaction_lock(wait=False):  # taken if free, to keep others off
            result = self.compact_once()
        if result is None:  # cannot happen while we hold the lock throughout
            raise CompactionError("the generation changed under the lock")
        return result

    def _finish(self, prepared: compaction.Prepared,
                started: float) -> CompactionResult | None:
        """Steps 4b-8 of compaction.py's protocol; under the lock. None: abandoned."""
        handle = self._handle
        old, new_log = handle.live_log(), prepared.log
        try:
            if not prepared.confirm():  # step 4b: a batch copied unlocked was cut since
                prepared.discard()
                handle.counters.compactions_abandoned += 1
                log.warning("compaction of %r abandoned: generation %d changed under a "
                            "batch it had copied (a writer cut it); generation %d stays "
                            "current", handle.name, old.generation, old.generation)
                return None
            # The last few batches appended meanwhile; nobody writes now, so a torn
            # tail is a dead writer's: saved aside, like any read-forward would.
            result = prepared.catch_up(locked=True)
            if result.torn_offset is not None and not handle.readonly:
                cut_torn_tail(old, result)
            new_log.sync()
            new_log.rename()
            # Stamp first: a peer that sees the new stamp before the flip re-reads
            # NAME.current and finds the old generation, which is still right.
            handle.lock.set_stamp(new_log.generation)
        except OSError as exc:
            prepared.discard()
            raise CompactionError(f"writing generation {new_log.generation} failed: {exc}")\
                from None
        try:
            publish_generation(handle.fs, handle.directory, handle.name,
                                          new_log.generation)
        except OSError as exc:
            new_log.close()
            prepared.discard_checkpoint()
            prepared.close()
            # The rename may or may not have reached the disk: only a reopen can tell.
            handle.poison(f"switching to generation {new_log.generation} failed: {exc}")
            raise CompactionError(
                f"switching to generation {new_log.generation} failed: {exc}") from None
        state = prepared.state  # = replaying the whole new file (catch_up replays each copy)
        before = prepared.upto  # the old generation's end: our own view of it may lag
        # Only now, with the switch made and the queue's lock held, may the checkpoint
        # take the name peers look for (they look only after taking that lock).
        try:
            prepared.publish_checkpoint()
        except OSError as exc:  # a cache: peers and the next open replay instead
            log.warning("could not save generation %d's checkpoint: %s", new_log.generation,
                        exc)
        prepared.close()
        handle.counters.compactions_switched += 1
        handle.switch_generation(new_log, state,
                                 prepared.checkpointed or framing.FILE_HEADER.size)
        try:
            remove_stale_files(handle.fs, handle.directory, handle.name,
                                          new_log.generation)
        except OSError as exc:  # harmless: stale generations are never read
            log.warning("could not remove old generations: %s", exc)
        return CompactionResult(old_generation=old.generation,
                                new_generation=new_log.generation, bytes_before=before,
                                bytes_after=new_log.end, live_jobs=len(state.jobs),
                                remembered_keys=len(state.done_keys),
                                seconds=time.perf_counter() - started)

    def due(self) -> bool:
        """Whether dead records fill enough of the log for an automatic compaction."""
        handle = self._handle
        current = handle.log
        if (handle.auto_compact is None or current is None
                or current.end < handle.options.min_compact_bytes):
            return False
        return handle.state.live_bytes < current.end * (1 - handle.auto_compact)

    def auto(self) -> None:
        """Compact if still due, unless another thread or process is on it; after a
        write call returned its result, so failures are logged, never raised."""
        handle = self._handle
        if not self._busy.acquire(blocking=False):
            return  # another thread of ours is on it
        try:
            with self.compaction_lock(wait=False) as held:
                if not held:  # another process (or handle of ours) is compacting
                    handle.counters.compactions_skipped += 1
                    return
                # Still due? Under the queue's lock, after reading forward: the
                # process that had the compaction lock a moment ago may have switched.
                with handle.locked():
                    due = self.due()
                result = self.compact_once() if due else None
            if result is not None:
                log.info("auto-compacted %s: %d -> %d bytes", handle.name,
                         result.bytes_before, result.bytes_after)
        except CompactionError as exc:  # the call that triggered it already succeeded
            log.error("auto-compaction of %r failed: %s", handle.name, exc)
        finally:
            self._busy.release()

    def forget_inherited(self) -> None:
        """In a forked child: the NAME.compacting lock is the parent's; ours is opened
        when first needed."""
        self._lock = None

    def close(self) -> None:
        """Let go of NAME.compacting's lock, if it was opened."""
        if self._lock is not None:
            release_shared_lock(self._lock)
