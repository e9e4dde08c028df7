"""A limited job's fields in its records: its limit keys and its concurrency cap.

An ENQUEUE (or a snapshot's JOB, a revivable cancel's, a REVIVE) record gives a
job its keys as "rk" (rate key) and "ck" (concurrency key), and the cap the
planning process declared for its concurrency key as "cc": `record_keys` and
`record_cap` read them back (ReplayError if bad), `key_fields` writes them,
and `plan_limited_enqueue` plans a limited job's ENQUEUE. What the replay state
keeps of them is limited.py's. Pure: no os, time, random or threads.
"""

from __future__ import annotations

from ...limits import JobKeys, family
from ..log.records import (
    AT,
    CONCURRENCY_CAP,
    CONCURRENCY_KEY,
    ID,
    IS_KEY,
    MAX_ATTEMPTS,
    PRIORITY,
    RATE_KEY,
    TIME,
    Record,
    RecordType,
    ReplayError,
)
from .batch import Batch

__all__ = ["record_keys", "record_cap", "key_fields", "declared_cap", "plan_limited_enqueue"]


def record_keys(rec: Record, offset: int) -> JobKeys | None:
    """An ENQUEUE or JOB record's limit keys (None: it has none); ReplayError if bad."""
    rate_key, concurrency_key = rec.get(RATE_KEY), rec.get(CONCURRENCY_KEY)
    if rate_key is None and concurrency_key is None:
        return None
    for value in (rate_key, concurrency_key):
        if value is not None and (type(value) is not str or not value):
            raise ReplayError(offset, f"bad limit key {value!r}")
    return rate_key, concurrency_key


def record_cap(rec: Record, offset: int) -> int | None:
    """An ENQUEUE or JOB record's "cc" (None: it has none); ReplayError if bad."""
    cap = rec.get(CONCURRENCY_CAP)
    if cap is not None and (type(cap) is not int or cap < 1 or CONCURRENCY_KEY not in rec):
        raise ReplayError(offset, f"bad concurrency cap {cap!r}")
    return cap


def key_fields(keys: JobKeys | None, cap: int | None = None) -> Record:
    """The record fields that give a job `keys` (what record_keys reads back), and the
    cap declared for its concurrency key (record_cap's)."""
    if keys is None:
        return {}
    fields: Record = {}
    if keys[0] is not None:
        fields[RATE_KEY] = keys[0]
    if keys[1] is not None:
        fields[CONCURRENCY_KEY] = keys[1]
        if cap is not None:
            fields[CONCURRENCY_CAP] = cap
    return fields


def declared_cap(batch: Batch, job_id: str, keys: JobKeys | None) -> int | None:
    """The cap the planning process declared for `keys`' concurrency key (Batch.cap_of)."""
    return None if keys is None or keys[1] is None else batch.cap_of(job_id, family(keys[1]))


def plan_limited_enqueue(batch: Batch, job_id: str, priority: int, at: float, t: float,
                         max_attempts: int, keyed: bool, payload_text: str,
                         keys: JobKeys) -> None:
    """The ENQUEUE record of a job with limit keys (add_enqueue's fields, "rk"/"ck",
    and "cc" if the planning process declared the concurrency key)."""
    fields: Record = {ID: job_id, PRIORITY: priority, AT: at, TIME: t,
                      MAX_ATTEMPTS: max_attempts}
    if keyed:
        fields[IS_KEY] = True
    fields.update(key_fields(keys, declared_cap(batch, job_id, keys)))
    batch.add_payload(RecordType.ENQUEUE, fields, payload_text)
