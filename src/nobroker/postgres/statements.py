"""The statements of one queue set: every query of sql/queries, loaded for its schema.

`Statements.load(schema)` reads each query once, when a handle opens, with
the schema's quoted name written in (sql/__init__.py says how, and which
placeholders there are); the backend then only binds values (`%(name)s`).
Every statement that acts at a time computes it once, as `t.now` from
`nb_now(%(t)s)` (migrations/0001): the server's clock unless the Queue was
given one. Every statement that changes job rows keeps the counters and
sends the wake-ups itself (sql/parts/counted.sql).

The backoff policy's numbers are bound values too (`backoff_params`), so a
statement's text depends on the schema alone.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Final

from ..backoff import BackoffPolicy
from . import sql

__all__ = ["Statements", "backoff_params"]

_MAX_EXPONENT: Final = 1000  # past it the delay is the maximum, whatever the policy


@dataclass(frozen=True)
class Statements:
    """The text of each operation's statement, named as its file in sql/queries."""

    queue_names: bytes
    ensure_queue: bytes
    enqueue: bytes
    enqueue_many: bytes
    forget_key: bytes
    get: bytes
    lease_of: bytes
    lease: bytes
    lease_ready: bytes
    limited_lease: bytes
    unrated_lease: bytes
    limited_state: bytes
    limited_candidates: bytes
    ack: bytes
    ack_many: bytes
    ack_and_lease: bytes
    limited_ack_and_lease: bytes
    unrated_ack_and_lease: bytes
    nack: bytes
    snooze: bytes
    extend: bytes
    write_notes: bytes
    next_due: bytes
    watch: bytes
    hold: bytes
    unwatch: bytes
    sweep_watches: bytes
    cancel: bytes
    pause: bytes
    requeue: bytes
    purge: bytes
    delete_dead: bytes
    stats: bytes
    list_jobs: bytes
    sweep: bytes
    live: bytes
    import_jobs: bytes
    export_jobs: bytes
    export_limits: bytes
    bump_seq: bytes
    lock_prerequisites: bytes
    job_seqs: bytes
    enqueue_graph: bytes
    wait_modes: bytes
    export_dormant: bytes
    import_dormant: bytes
    export_windows: bytes
    lock_windows: bytes
    import_windows: bytes

    @classmethod
    def load(cls, schema: str) -> Statements:
        """Each statement for the queue set `schema` (its plain name)."""
        return cls(**{field.name: sql.query(field.name, schema) for field in fields(cls)})


def backoff_params(policy: BackoffPolicy) -> dict[str, float | int]:
    """BackoffPolicy.delay's numbers, bound by a statement that reclaims expired
    leases (sql/parts/reclaimed.sql), which computes the same formula.

    `backoff_cap` is the first exponent whose delay reaches max_delay (or
    overflows): from it on the delay is max_delay, as in Python, and the
    server never computes a power that would overflow.
    """
    cap = 0
    while cap <= _MAX_EXPONENT:
        try:
            if policy.base * policy.factor ** cap >= policy.max_delay:
                break
        except OverflowError:
            break
        cap += 1
    return {"backoff_base": float(policy.base), "backoff_factor": float(policy.factor),
            "backoff_max": float(policy.max_delay), "backoff_cap": cap,
            "backoff_jitter": float(policy.jitter or 0.0)}
