"""Periodic tasks: when each tick is due, and the key that runs it exactly once.

What it owns: `Schedule` (a cron expression or a fixed interval, `every=`)
and `tick_job_id`; scheduler.py holds the `Scheduler` a Worker runs in a
thread of its own, which enqueues the ticks.

How ticks run exactly once with any number of workers: every worker process
runs a scheduler, and each enqueues a due tick with the idempotency key
`periodic:NAME:TIME` (TIME: the tick's scheduled time, UTC, ISO 8601, also
for a cron schedule in a time zone: an instant has one name everywhere). The
queue writes the first enqueue of a key and returns the existing job for the
others, so however many workers see a tick, one job runs it. Intervals are
aligned to the epoch (`every=60` ticks at :00 of each minute), so all workers
agree on the tick times without talking to each other.

Missed ticks: a tick that came due while no worker ran is run once when a
worker starts -- the latest one only; older ones are skipped. A worker looks
back at most `key_retention` seconds (the queue's; one day by default),
because beyond that the queue no longer remembers whether the tick ran. The
same rule holds while running: if the scheduler wakes late (a suspended
laptop), it enqueues the latest due tick and skips the ones before it.

"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from .cron import Cron

__all__ = ["Schedule", "tick_job_id"]

@dataclass(frozen=True, slots=True)
class Schedule:
    """When a periodic task's ticks fall: `cron` or every `every` seconds."""

    cron: Cron | None = None
    every: float | None = None

    @classmethod
    def of(cls, cron: str | None, every: float | timedelta | None,
           tz: str | None = None) -> Schedule:
        if (cron is None) == (every is None):
            raise ValueError("a periodic task needs cron= or every=, exactly one")
        if cron is not None:
            return cls(cron=Cron.parse(cron, tz))
        if tz is not None:
            raise ValueError("tz= is for cron= schedules: every= counts seconds, which "
                             "no time zone changes")
        seconds = every.total_seconds() if isinstance(every, timedelta) else every
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
            raise TypeError(f"every must be seconds or a timedelta, not "
                            f"{type(every).__name__}")
        if not 0 < seconds < float("inf"):
            raise ValueError(f"every must be a finite number of seconds > 0, not {seconds}")
        return cls(every=float(seconds))

    def next_after(self, t: float) -> float:
        """The first tick strictly after `t`."""
        if self.every is not None:
            return (t // self.every + 1) * self.every
        assert self.cron is not None
        found = self.cron.next_after(t)
        assert found is not None  # Cron.parse refuses schedules that never match
        return found

    def latest_at_or_before(self, t: float) -> float | None:
        """The last tick at or before `t`."""
        if self.every is not None:
            return (t // self.every) * self.every
        assert self.cron is not None
        return self.cron.latest_at_or_before(t)

    def __str__(self) -> str:
        if self.cron is None:
            return f"every {self.every:g}s"
        where = f" in {self.cron.zone.key}" if self.cron.zone is not None else ""
        return f"cron {self.cron.expression!r}{where}"


def tick_job_id(name: str, tick: float) -> str:
    """The idempotency key of one tick of one periodic task."""
    when = datetime.fromtimestamp(tick, UTC)
    stamp = when.strftime("%Y-%m-%dT%H:%M:%S")
    if when.microsecond:
        stamp += f".{when.microsecond:06d}"
    return f"periodic:{name}:{stamp}Z"
