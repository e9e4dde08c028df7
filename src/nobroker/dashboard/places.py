"""The job page's workflow part, read again only when what it shows may have changed.

The job page polls an unfinished job every second, and its workflow part
(tasks/lineage.py) scans up to SCAN_LIMIT jobs for the job's children. On a
quiet queue every one of those scans finds what the last one found, so each
job's last lineage is kept with the version it was read at, and read again
only when the version differs.

The version is the job's own state and prerequisites (its parents come from
the job itself) and the queue's counts (`stats()`, which reads counters):
a new child needs an enqueue, which moves `enqueued` (or `total`, on a backend
that does not count enqueues), and a child leaves the scanned states only by
a move the counts show (released, acked, cancelled, deleted). The byte and
generation counters are left out: a compaction changes no job.

Rules: bounded (MAX_KEPT jobs, the least recently shown dropped first); safe
to share between the server's request threads; reads through the public
Queue API only, like lineage itself.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from typing import Final

from ..models import Job
from ..queue import Queue
from ..tasks.lineage import Lineage, lineage

__all__ = ["Places", "MAX_KEPT"]

MAX_KEPT: Final = 256  # jobs whose lineage is kept (pages open at once, roughly)

_Version = tuple[object, ...]


class Places:
    """The lineage of the jobs the job pages show, each kept until its version moves."""

    def __init__(self, max_kept: int = MAX_KEPT) -> None:
        self._max_kept = max_kept
        self._lock = threading.Lock()  # guards _kept; no queue call is made holding it
        self._kept: OrderedDict[tuple[str, str], tuple[_Version, Lineage]] = OrderedDict()

    def of(self, queue: Queue, name: str, job: Job) -> Lineage:
        """`job`'s lineage in `queue` (named `name`): the kept one if nothing moved."""
        version = _version(queue, job)
        key = (name, job.id)
        with self._lock:
            found = self._kept.get(key)
            if found is not None and found[0] == version:
                self._kept.move_to_end(key)
                return found[1]
        place = lineage(queue, job)
        with self._lock:
            self._kept[key] = (version, place)
            self._kept.move_to_end(key)
            while len(self._kept) > self._max_kept:
                self._kept.popitem(last=False)
        return place


def _version(queue: Queue, job: Job) -> _Version:
    """What changes whenever `job`'s lineage may have (see the module's docstring)."""
    counts = dataclasses.replace(queue.stats(), generation=0, log_bytes=0, live_bytes=None)
    return job.state, job.waiting_for, counts
