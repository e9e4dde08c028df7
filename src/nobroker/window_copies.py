"""The rate windows `nobroker migrate` copies (transfer.py): a window as it travels
between backends (`CopiedWindow`), the protocol of a backend that hands its windows
out and takes copies in (`RateWindows`: every backend with `capabilities.limits`),
the copies of the windows a replayed state keeps (`copied_windows`), and how a copy
merges into the window a target holds (`merged_window`,
`merged_starts`).

Why a copy is merged rather than replacing the target's window: the target may
have leased under the key already (or been copied into before), and a second run
of migrate must change nothing. Every backend keeps a start as an absolute time
of its queue's clock (time.time, or the clock a Queue was given; PostgreSQL's
server clock unless it was given one), so a start is copied as it is. Pure: no
clock, no storage.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from .limits import Window

__all__ = ["CopiedWindow", "RateWindows", "copied_windows", "merged_window", "merged_starts"]


@dataclass(frozen=True, slots=True)
class CopiedWindow:
    """A rate key's window as migrate copies it: the key ("": the queue's own), at most
    `count` of its latest starts, oldest first, and its length in seconds (None: the
    source keeps none, as PostgreSQL, whose rings hold only the starts, each leasing
    process bringing its declared period)."""

    key: str
    count: int
    period: float | None
    starts: tuple[float, ...]


class RateWindows(Protocol):
    """What a backend with `capabilities.limits` also has (`nobroker migrate`)."""

    def export_windows(self) -> list[CopiedWindow]:
        """Every rate key's window that holds a start, by key."""
        ...

    def import_windows(self, windows: Sequence[CopiedWindow]) -> None:
        """Each copied window merged into this queue's window of its key (merged_starts),
        in one durable write, keeping this queue's period where it has that window, else
        the copy's (never None here: transfer fills one in), and the larger count."""
        ...


def copied_windows(windows: Mapping[str, Window]) -> list[CopiedWindow]:
    """The copies of `windows` (a limits state's, by key: files and memory://) that hold
    a start, by key (RateWindows.export_windows)."""
    return [CopiedWindow(key, window.count, window.period, tuple(window.starts))
            for key, window in sorted(windows.items()) if window.starts]


def merged_starts(kept: Iterable[float], copied: Iterable[float], count: int) -> list[float]:
    """The latest `count` starts of two windows of one key, oldest first: each time as
    many times as the window holding it more often has it (a lease of several jobs
    starts them at one time), so that merging a copy of a window into it again (a
    second migrate) changes nothing."""
    merged = sorted((Counter(kept) | Counter(copied)).elements())
    return merged[len(merged) - count:] if len(merged) > count else merged


def merged_window(kept: Window | None, copy: CopiedWindow) -> Window:
    """The window a target keeps for `copy`'s key, given the one it `kept` (None: none):
    the kept period, else the copy's (given: transfer fills one in); the larger count;
    the latest starts of both (merged_starts)."""
    assert copy.period is not None  # transfer fills one in
    if kept is None:
        return Window(copy.count, copy.period, merged_starts((), copy.starts, copy.count))
    count = max(kept.count, copy.count)
    return Window(count, kept.period, merged_starts(kept.starts, copy.starts, count))
