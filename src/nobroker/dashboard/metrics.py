"""`/metrics`: every queue of the directory in the Prometheus text format (0.0.4).

Gauges for what a queue holds now (jobs by state: pending, leased, dead, and
waiting for their prerequisites; oldest pending age, log bytes, paused) and
counters for what it has done since it was created (enqueued, succeeded,
retried, dead-lettered), each read from `stats()` in O(1). A counter the
queue's backend does not keep is left out rather than reported as 0. Label
values are escaped as the format requires (backslash, double quote, newline);
queue names cannot hold those, but the escaping does not rely on it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from ..errors import NobrokerError
from . import api
from .hub import Hub, counter

__all__ = ["render", "CONTENT_TYPE"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_GAUGES = (
    ("nobroker_jobs", "Jobs the queue holds, by state."),
    ("nobroker_oldest_pending_age_seconds",
     "Seconds since the oldest pending job was enqueued (0 when none is pending)."),
    ("nobroker_log_bytes", "Logical size of the queue's current log generation."),
    ("nobroker_paused", "1 while the queue is paused (nothing is leased), else 0."),
    ("nobroker_up", "1 if the queue could be read for this scrape, else 0."),
)
_COUNTERS = (
    ("nobroker_enqueued_total", "enqueued", "Jobs enqueued since the queue was created."),
    ("nobroker_succeeded_total", "done", "Jobs acked since the queue was created."),
    ("nobroker_retried_total", "retried",
     "Failed deliveries (nack or expired lease) that were scheduled again."),
    ("nobroker_dead_lettered_total", "dead_lettered",
     "Jobs moved to the dead-letter queue after their last attempt."),
)


def label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render(hub: Hub) -> str:
    return "".join(line + "\n" for line in _lines(hub))


def _lines(hub: Hub) -> Iterator[str]:
    now = time.time()
    rows: dict[str, list[str]] = {name: [] for name, _ in _GAUGES}
    totals: dict[str, list[str]] = {name: [] for name, _, _ in _COUNTERS}
    for name in hub.names():
        q = f'queue="{label(name)}"'
        try:
            queue = hub.queue(name)
            stats = queue.stats()
            age = api.oldest_pending_age(queue, now)
        except NobrokerError:
            rows["nobroker_up"].append(f"nobroker_up{{{q}}} 0")
            continue
        rows["nobroker_up"].append(f"nobroker_up{{{q}}} 1")
        for state in ("pending", "leased", "dead", "waiting"):
            rows["nobroker_jobs"].append(f'nobroker_jobs{{{q},state="{state}"}} '
                                         f"{getattr(stats, state)}")
        rows["nobroker_oldest_pending_age_seconds"].append(
            f"nobroker_oldest_pending_age_seconds{{{q}}} {0.0 if age is None else age:.3f}")
        rows["nobroker_log_bytes"].append(f"nobroker_log_bytes{{{q}}} {stats.log_bytes}")
        rows["nobroker_paused"].append(f"nobroker_paused{{{q}}} {int(bool(stats.paused))}")
        for metric, field, _ in _COUNTERS:
            value = counter(stats, field)
            if value is not None:
                totals[metric].append(f"{metric}{{{q}}} {value}")
    for name, help_text in _GAUGES:
        yield f"# HELP {name} {help_text}"
        yield f"# TYPE {name} gauge"
        yield from rows[name]
    for metric, _, help_text in _COUNTERS:
        if totals[metric]:
            yield f"# HELP {metric} {help_text}"
            yield f"# TYPE {metric} counter"
            yield from totals[metric]
