"""The beats of one write call under the queue's lock, and its fsync after it.

QueueHandle.write's body (see handle.py's module doc for the protocol), as
functions of the handle (typed by HandleAPI). Its rule beyond the beats:
whatever a call committed gets its fsync before the call returns or raises
(or the handle is poisoned), and every generation it held open for the
fsync or for the caller (pin) is let go on every path, since a retired
generation closes only when nobody holds it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from ..errors import NobrokerError
from . import following, syncing
from .checkpointer import Checkpointer
from .compactor import Compactor
from .handleapi import HandleAPI
from .log.logfile import LogFile
from .log.records import ID, RecordType
from .state.batch import Batch
from .state.commands import plan_reclaim
from .state.state import JobState, QueueState

__all__ = ["Plan", "write", "plan_and_commit"]

T = TypeVar("T")
# A write call's plan: add records to the batch, return what builds the result.
Plan = Callable[[QueueState, Batch, float], Callable[[], T]]


def write(handle: HandleAPI, compactor: Compactor, checkpointer: Checkpointer,
          plan: Plan[T], spare: str | frozenset[str] | None,
          pin: bool) -> tuple[T, LogFile | None]:
    """QueueHandle.write (and write_then_read, `pin`): the call's result, and the
    generation pinned for it."""
    if handle.readonly:
        raise NobrokerError("queue was opened read-only")
    synced: LogFile | None = None
    offset = 0
    # The lock by hand rather than through locked(): this is every write's
    # path, and a generator-based context manager costs a few microseconds.
    handle.usable()
    lock = handle.lock
    try:
        lock.acquire(handle.lock_timeout)
        try:
            following.refresh(handle)
            start = handle.live_log().end
            try:
                result, batch = plan_and_commit(handle, plan, spare)
                due = compactor.due()
                checkpoint_due = not due and checkpointer.due()
                source = handle.pin() if pin else None  # last: nothing below can fail
            finally:  # also when planning or building failed after a commit
                synced, offset = syncing.hold_for_sync(handle, start)
        finally:
            lock.release()
    except BaseException:
        # Records a failed call committed (its lease expiries, or a batch whose
        # result could not be built) are in the state others now read: they get
        # their fsync like any, or the handle is poisoned (sync raises then).
        if synced is not None:
            syncing.sync(handle, synced, offset)
        raise
    try:
        if batch.wakes:
            # Before our fsync: a woken worker's own fsync covers these records too.
            handle.wake_workers(batch.wakes)
        if synced is not None:
            syncing.sync(handle, synced, offset)
    except BaseException:
        if source is not None:  # nobody will read through it now
            handle.unpin(source)
        raise
    if batch.finishes:  # after the fsync: a woken waiter may act on the outcome
        handle.signal_finished()
    if batch.reclaimed_dead:  # the `dead` hook, in the process whose write reclaimed them
        handle.reclaimed_dead(batch.reclaimed_dead)
    if due:
        compactor.auto()
    elif checkpoint_due:
        checkpointer.auto()
    return result, source


def plan_and_commit(handle: HandleAPI, plan: Plan[T], spare: str | frozenset[str] | None
                    ) -> tuple[T, Batch]:
    """Beats 2-4 of a write call, under the lock: the call's result and its batch."""
    state = handle.state  # after the refresh: a reload replaces it
    live = handle.live_log()
    now = handle.now()
    batch = Batch(state.last_batch + 1, live.durable, handle.result_ttl)
    plan_reclaim(state, batch, now, handle.backoff, handle.rng, spare, handle.key_retention)
    if batch:
        # Expiries first, as a batch of their own, so that the call sees
        # their effect (a reclaimed job with no backoff is leasable now).
        handle.commit(batch)
        reclaimed, finished = batch.wakes, batch.finishes
        dead = [record[ID] for rtype, record in batch.records() if rtype == RecordType.EXPIRE
                and (entry := state.jobs.get(record[ID])) is not None
                and entry.state is JobState.DEAD]
        batch = Batch(state.last_batch + 1, live.durable, handle.result_ttl)
        batch.wakes, batch.finishes, batch.reclaimed_dead = reclaimed, finished, dead
    build = plan(state, batch, now)
    if batch:
        handle.commit(batch)
    return build(), batch
