"""Pausing Python's cyclic garbage collector around bulk replay.

Replaying a large log creates millions of objects and no reference cycles, so
the opener, compaction, salvage and enqueue_many build their states with the
collector off (logfile.py re-exports this for them).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["paused_gc"]


@contextmanager
def paused_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector while bulk-building a state.

    Replaying a large log creates millions of objects and no reference cycles;
    the collector would scan them all again and again as they pile up (a
    quarter of the time of a 200k-job replay). Its previous setting returns
    afterwards; it is process-wide, so this is only for bounded bulk work.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
