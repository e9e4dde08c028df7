"""The dashboard's view of a queue set: its queues, their handles, their history.

What it owns: finding the queues of a directory (by the names of their files,
the way the CLI finds one queue) or of a URL (a database, or memory://: this
process's own queues; the queues named at start, plus every queue of the set
where the backend has the `listing` capability), opening each once through
the public `Queue` API, and sampling every queue's `stats()` once per
`interval` into a ring buffer, so that the pages can draw enqueued /
succeeded / dead-lettered per interval without the queue keeping any history
itself.

Rules: it never parses a queue's files (the Queue does); the only thing read
from the directory listing is which queue names exist. For a URL, what it
shows as `directory` is the backend's `location`, whose password is ***.
A sample is O(1) per queue (`stats()` reads counters). The sampler thread
only reads; every change goes through the request handlers, which call the
Queue's own methods.
"""

from __future__ import annotations

import itertools
import os
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from ..backend import QueueListing, is_memory_url, is_postgres_url
from ..models import QueueStats
from ..queue import Queue
from .places import Places

__all__ = ["Hub", "Sample", "UnknownQueue", "queue_names", "WINDOW"]

WINDOW = 15 * 60.0  # seconds of history the ring buffer keeps

# NAME.current, or NAME.000000.log (a queue that has never compacted).
_QUEUE_FILE = re.compile(r"([A-Za-z0-9][A-Za-z0-9_-]{0,99})\.(?:current|\d{6}\.log)")


class UnknownQueue(LookupError):
    """The directory has no queue by that name."""

    def __init__(self, name: str) -> None:
        super().__init__(f"no queue named {name!r}")
        self.name = name


def queue_names(directory: str) -> list[str]:
    """The names of the queues in `directory`, sorted; [] if it does not exist."""
    try:
        files = os.listdir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted({m.group(1) for f in files if (m := _QUEUE_FILE.fullmatch(f))})


@dataclass(frozen=True, slots=True)
class Sample:
    """One queue's counters at one moment (time.time())."""

    at: float
    stats: QueueStats


def counter(stats: QueueStats, name: str) -> int | None:
    """A lifetime counter of `stats` (enqueued, retried, dead_lettered, done), or
    None when this backend does not count it."""
    value = getattr(stats, name, None)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class Hub:
    """Every queue of one directory (or database URL), opened once and sampled in the
    background. For a URL, `queues` names the queues to show (the first is opened at
    once, so a bad URL fails here); a backend that can list its set adds the rest."""

    def __init__(self, directory: str, *, readonly: bool, interval: float = 1.0,
                 opener: Callable[[str, str, bool], Queue] | None = None,
                 queues: Sequence[str] = ("default",)) -> None:
        # A URL: a PostgreSQL database, or memory:// (this process's own queues).
        self._url = is_postgres_url(directory) or is_memory_url(directory)
        self._location = directory if self._url else os.path.abspath(directory)
        self.directory = self._location  # what the pages show; never a password
        self.readonly = readonly
        self.interval = interval
        self._opener = opener or (lambda d, n, ro: Queue(d, n, readonly=ro))
        self._seeds = list(dict.fromkeys(queues)) or ["default"]
        self._queues: dict[str, Queue] = {}
        self._samples: dict[str, deque[Sample]] = {}
        self._lock = threading.Lock()  # guards the two dicts, not the queues
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.changed = threading.Condition()  # notified after every sampling round
        self.places = Places()  # the job pages' lineage, read again only when it may change
        if self._url:
            self.directory = self._open(self._seeds[0]).directory  # the redacted URL

    # -- queues -------------------------------------------------------------

    def names(self) -> list[str]:
        if not self._url:
            return queue_names(self.directory)
        first = self._open(self._seeds[0])
        if not first.capabilities.listing:
            return sorted(self._seeds)
        listed = cast(QueueListing, first.backend).queue_names()
        return sorted({*self._seeds, *listed})

    def queue(self, name: str) -> Queue:
        """The open handle of queue `name`; UnknownQueue if the set has none."""
        with self._lock:
            found = self._queues.get(name)
        if found is not None:
            return found
        if name not in self.names():
            raise UnknownQueue(name)
        return self._open(name)

    def _open(self, name: str) -> Queue:
        with self._lock:
            found = self._queues.get(name)
        if found is not None:
            return found
        # Opened outside the lock: replaying a big queue must not hold up the others.
        opened = self._opener(self._location, name, self.readonly)
        with self._lock:
            found = self._queues.get(name)
            if found is None:
                self._queues[name] = opened
                self._samples[name] = deque(maxlen=int(WINDOW / self.interval) + 2)
                return opened
        opened.close()  # another request opened it meanwhile
        return found

    # -- sampling -----------------------------------------------------------

    def sample(self) -> None:
        """Take one sample of every queue (and open queues that appeared)."""
        for name in self.names():
            try:
                stats = self.queue(name).stats()
            except Exception:  # a damaged or vanished queue must not stop the others
                continue
            with self._lock:
                self._samples[name].append(Sample(time.time(), stats))
        with self.changed:
            self.changed.notify_all()

    def samples(self, name: str) -> list[Sample]:
        self.queue(name)
        with self._lock:
            return list(self._samples[name])

    def series(self, name: str, step: float) -> dict[str, Any]:
        """Per-interval counts over the window: buckets of `step` seconds ending now.

        Each bucket holds the increase of a lifetime counter between the last
        sample before the bucket and the last sample in it, so nothing is
        counted twice and a gap in sampling moves counts, never invents them.
        A counter that went down (another handle rebuilt the state from an older
        format) contributes nothing for that step.
        """
        samples = self.samples(name)
        buckets = max(1, int(WINDOW // step))
        end = time.time()
        start = end - buckets * step
        names = {"enqueued": "enqueued", "succeeded": "done", "dead_lettered": "dead_lettered",
                 "retried": "retried"}
        out: dict[str, list[int] | None] = {key: [0] * buckets for key in names}
        for key, field in names.items():
            if samples and counter(samples[-1].stats, field) is None:
                out[key] = None
        for before, after in itertools.pairwise(samples):
            if after.at < start:
                continue
            index = min(buckets - 1, max(0, int((after.at - start) // step)))
            for key, field in names.items():
                values = out[key]
                old, new = counter(before.stats, field), counter(after.stats, field)
                if values is not None and old is not None and new is not None and new > old:
                    values[index] += new - old
        return {"step": step, "start": start, "end": end, **out}

    def start(self) -> None:
        """Sample now, then every `interval` seconds in a daemon thread."""
        self.sample()
        self._thread = threading.Thread(target=self._run, name="nobroker-dashboard-sampler",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def stopping(self) -> bool:
        return self._stop.is_set()

    def close(self) -> None:
        self._stop.set()
        with self.changed:
            self.changed.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=10)
        with self._lock:
            queues, self._queues = list(self._queues.values()), {}
        for queue in queues:
            queue.close()
