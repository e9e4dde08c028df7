"""`nobroker stats --watch`: a queue's counts and rates, redrawn every second.

Each frame is one `stats()` call (O(1)); a rate is the change of a lifetime
counter between two frames divided by the time between them, so the first
frame shows counts only. On a terminal each frame replaces the last (the
screen is cleared with ANSI codes); into a pipe or a file, frames are
appended one after another, each starting with a line `-- <time>`, so a
script can count them. Ctrl-C ends it; that is the normal way out.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TextIO

from ..models import QueueStats
from ..queue import Queue
from .hub import counter

__all__ = ["watch", "frame"]

CLEAR = "\x1b[H\x1b[2J"
_COUNTS = (("pending", "pending"), ("leased", "leased"), ("dead", "dead"), ("done", "done"),
           ("total", "total"))
_RATES = (("enqueued", "enqueued"), ("succeeded", "done"), ("retried", "retried"),
          ("dead-lettered", "dead_lettered"))


def frame(queue: Queue, stats: QueueStats, previous: tuple[float, QueueStats] | None,
          now: float) -> list[str]:
    """The lines of one frame: counts, then rates per second since `previous`."""
    paused = " (paused)" if stats.paused else ""
    lines = [f"-- {time.strftime('%H:%M:%S', time.localtime(now))}  queue {queue.name!r} "
             f"in {queue.directory}{paused}"]
    for label, field in _COUNTS:
        lines.append(f"  {label:<14}{getattr(stats, field):>12,}")
    lines.append(f"  {'log bytes':<14}{stats.log_bytes:>12,}")
    for label, field in _RATES:
        value = counter(stats, field)
        if value is None:
            continue
        rate = "           -"
        if previous is not None and now > previous[0]:
            before = counter(previous[1], field)
            if before is not None:
                rate = f"{max(0, value - before) / (now - previous[0]):>10.1f}/s"
        lines.append(f"  {label:<14}{value:>12,}  {rate}")
    return lines


def watch(queue: Queue, out: TextIO, *, interval: float = 1.0, tty: bool = False,
          frames: int | None = None, clock: Callable[[], float] = time.time,
          sleep: Callable[[float], None] = time.sleep) -> int:
    """Draw a frame every `interval` seconds until KeyboardInterrupt (or `frames`)."""
    previous: tuple[float, QueueStats] | None = None
    drawn = 0
    try:
        while frames is None or drawn < frames:
            stats = queue.stats()
            now = clock()
            text = "\n".join(frame(queue, stats, previous, now)) + "\n"
            out.write(CLEAR + text if tty else text)
            out.flush()
            previous, drawn = (now, stats), drawn + 1
            if frames is None or drawn < frames:
                sleep(interval)
    except KeyboardInterrupt:
        pass
    return drawn
