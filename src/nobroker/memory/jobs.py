"""One job of an in-memory queue, as its table holds it (table.py makes every change)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..dependencies import SUCCESS
from ..limits import JobKeys
from ..models import JobState

__all__ = ["MemoryJob", "Note"]

Note = tuple[tuple[float, str | None] | None, dict[str, Any]]  # progress, metadata


@dataclass(slots=True)
class MemoryJob:
    """One job as the table holds it; changed only by MemoryTable's moves."""

    id: str
    seq: int  # enqueue order: FIFO within a priority, and list order
    keyed: bool  # the id is a caller's idempotency key
    payload_text: str | None  # JSON; None once finished (but a revivable one's)
    priority: int
    available_at: float  # pending: leasable from; dead: when it died
    enqueued_at: float
    max_attempts: int
    attempts: int = 0
    state: JobState = JobState.PENDING
    last_error: str | None = None
    token: int = 0  # the current (or last) lease's fencing token
    lease_until: float = 0.0
    result_text: str | None = None  # JSON, for a job acked with a result
    # A keyed job's result is shown until then, while its id is kept till keep_until.
    result_until: float | None = None
    finished_at: float | None = None
    keep_until: float = 0.0  # a kept finished job is forgotten from then on
    stamp: int = 0  # bumped by every move: heap entries with an older one are stale
    waiting_for: dict[str, None] | None = None  # WAITING: its unfinished prerequisites
    mode: str = SUCCESS  # what releases it (nobroker.dependencies.verdict)
    keys: JobKeys | None = None  # its rate and concurrency limit keys (nobroker.limits)
    cap: int | None = None  # the holders its enqueuer declared for keys[1] (shown only)
    note: Note | None = None  # its holder's progress and metadata (write_notes)
