"""The fields of revivable dependents (format 1.2): a CANCEL or FINISHED record's `w`,
`wf`, limit keys and cap, and a REVIVE's `w`, checked for replay and built for writers.

A waiting job (mode "success") that a prerequisite's death or cancel cancels is
revivable: its CANCEL carries `wf` (the failed prerequisite), `w` (what else it
still waits for), its limit keys (`rk`, `ck`, and `cc`, the cap its ENQUEUE
carried) and its payload, so that a requeue of the death (REVIVE, planned by
dependencies.plan_revivals) can make it wait again, keys and cap back; replay
keeps them in QueueState.dormant (nobroker.revivals). Pure.
"""

from __future__ import annotations

from ...limits import JobKeys
from ...revivals import Sleeper
from ..log.records import FAILED_PREREQUISITES, PAYLOAD, WAIT, Record, ReplayError
from .limitfields import key_fields, record_cap, record_keys

__all__ = ["revivable_fields", "sleeper_fields", "revive_wait"]


def _ids(rec: Record, key: str, offset: int) -> list[str]:
    ids = rec.get(key)
    if type(ids) is not list or not all(type(p) is str for p in ids) \
            or len(set(ids)) != len(ids):
        raise ReplayError(offset, f"bad prerequisites {ids!r} in '{key}'")
    return ids


def revivable_fields(rec: Record, job_id: str, offset: int
                     ) -> tuple[list[str], list[str], JobKeys | None, int | None]:
    """A revivable CANCEL's or FINISHED's (unmet, failed, limit keys, cap), checked: `wf`
    non-empty, `w` possibly empty, neither naming the job or sharing an id, and the
    payload there."""
    unmet, failed = _ids(rec, WAIT, offset), _ids(rec, FAILED_PREREQUISITES, offset)
    if not failed or job_id in unmet or job_id in failed or set(unmet) & set(failed) \
            or PAYLOAD not in rec:
        raise ReplayError(offset, f"bad revivable job {job_id!r}")
    return unmet, failed, record_keys(rec, offset), record_cap(rec, offset)


def sleeper_fields(unmet: list[str], failed: list[str], keys: JobKeys | None,
                   cap: int | None) -> Record:
    """What revivable_fields reads back (the payload is added after them)."""
    return {WAIT: unmet, FAILED_PREREQUISITES: failed, **key_fields(keys, cap)}


def revive_wait(rec: Record, job_id: str, sleeper: Sleeper | None, offset: int) -> list[str]:
    """A REVIVE's `w`, checked against what replay knows of the job: revivable, kept
    cancelled by nothing, and waiting for exactly those."""
    wait = _ids(rec, WAIT, offset)
    if sleeper is None or sleeper.failed or not wait or set(wait) != set(sleeper.unmet):
        left = "not revivable" if sleeper is None else \
            f"waits for {list(sleeper.unmet)}, failed {list(sleeper.failed)}"
        raise ReplayError(offset, f"revive of {job_id!r}, which {left}")
    return wait
