"""The beats of one write call under the queue's lock, and its fsync after it.

FileStore.write's body (see store.py's module doc for the protocol), as
functions of the store. Its rule beyond the beats: whatever a call committed
gets its fsync before the call returns or raises (or the handle is poisoned),
and every generation it held open for the fsync or for the caller (pin) is
let go on every path, since a retired generation closes only when nobody
holds it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

from ..errors import NobrokerError
from . import syncing
from .log.logfile import LogFile
from .state.batch import Batch
from .state.commands import plan_reclaim

if TYPE_CHECKING:
    from .store import FileStore, Plan

__all__ = ["write", "plan_and_commit", "hold_for_sync"]

T = TypeVar("T")


def write(store: FileStore, plan: Plan[T], spare: str | frozenset[str] | None,
          pin: bool) -> tuple[T, LogFile | None]:
    """FileStore.write (and write_then_read, `pin`): the call's result, and the
    generation pinned for it."""
    if store.readonly:
        raise NobrokerError("queue was opened read-only")
    synced: LogFile | None = None
    offset = 0
    # The lock by hand rather than through _locked(): this is every write's
    # path, and a generator-based context manager costs a few microseconds.
    store._usable()
    try:
        store._lock.acquire(store.lock_timeout)
        try:
            store._refresh()
            start = store._live_log().end
            try:
                result, batch = plan_and_commit(store, plan, spare)
                due = store._compaction_due()
                checkpoint_due = not due and store._checkpoint_due()
                source = store.pin() if pin else None  # last: nothing below can fail
            finally:  # also when planning or building failed after a commit
                synced, offset = hold_for_sync(store, start)
        finally:
            store._lock.release()
    except BaseException:
        # Records a failed call committed (its lease expiries, or a batch whose
        # result could not be built) are in the state others now read: they get
        # their fsync like any, or the handle is poisoned (sync raises then).
        if synced is not None:
            syncing.sync(store, synced, offset)
        raise
    try:
        if batch.wakes:
            # Before our fsync: a woken worker's own fsync covers these records too.
            store._wake.notify(batch.wakes)
        if synced is not None:
            syncing.sync(store, synced, offset)
    except BaseException:
        if source is not None:  # nobody will read through it now
            store.unpin(source)
        raise
    if batch.finishes:  # after the fsync: a woken waiter may act on the outcome
        store._finished.notify()
    if due:
        store._auto_compact()
    elif checkpoint_due:
        store._auto_checkpoint()
    return result, source


def plan_and_commit(store: FileStore, plan: Plan[T], spare: str | frozenset[str] | None
                    ) -> tuple[T, Batch]:
    """Beats 2-4 of a write call, under the lock: the call's result and its batch."""
    state = store._state  # after the refresh: a reload replaces it
    live = store._live_log()
    now = store._now()
    batch = Batch(state.last_batch + 1, live.durable)
    plan_reclaim(state, batch, now, store.backoff, store.rng, spare, store.key_retention)
    if batch:
        # Expiries first, as a batch of their own, so that the call sees
        # their effect (a reclaimed job with no backoff is leasable now).
        store._commit(batch)
        reclaimed, finished = batch.wakes, batch.finishes
        batch = Batch(state.last_batch + 1, live.durable)
        batch.wakes, batch.finishes = reclaimed, finished
    build = plan(state, batch, now)
    if batch:
        store._commit(batch)
    return build(), batch


def hold_for_sync(store: FileStore, start: int) -> tuple[LogFile | None, int]:
    """Under the lock, after a call's commits: the generation and offset its fsync
    must reach (None if it wrote nothing, or needs none), held open for it."""
    current = store._log
    if (current is None or current.end == start or not store.fsync
            or store._poisoned is not None):  # a poisoned handle does no more I/O
        return None, 0
    if store.shared is not None:  # a peer's fdatasync may cover us now
        store.shared.wrote(current)
    with store._sync_lock:
        current.inflight += 1
    return current, current.end
