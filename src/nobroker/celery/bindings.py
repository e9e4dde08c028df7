"""Exchange bindings shared by every process on one directory. Stdlib only.

kombu's virtual transports keep a queue's bindings in the memory of the process
that declared it. A broadcast needs them elsewhere: `app.control` publishes to
the fanout exchange `celery.pidbox`, to which each worker bound its own pidbox
queue in its own process, and a worker replies through the direct exchange
`reply.celery.pidbox` to a reply queue that only the caller bound. So the
bindings of such exchanges (fanout, or declared non-durable: kombu's mailbox
exchanges) are written to one more queue in the directory, `celery_bindings`,
and read from there when a message is routed.

A binding is alive while its process is. Each is stored as a pending job
delayed by LIFETIME, which nobody leases while it is hidden: a reader takes
the hidden ones as the live table. The process writes its bindings again each
PERIOD (a daemon thread), so a killed worker stops receiving broadcasts within
LIFETIME; a row whose delay ran out is dead, and the next writer leases and
acks it away. A binding carries its queue's message TTL (kombu's
`message_ttl`, Celery's `control_queue_ttl`) so that whoever routes a message
to the queue can stamp its expiry: unanswered replies and broadcasts to a
worker that went away are dropped when read after it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from dataclasses import asdict, dataclass
from typing import Any, Final

from ..errors import NobrokerError
from ..models import JobState
from ..queue import Queue

__all__ = ["Binding", "SharedBindings", "BINDINGS_QUEUE", "PERIOD", "LIFETIME"]

log = logging.getLogger("nobroker.celery")

# Its '_' is escaped in every Celery queue name, so no Celery queue lands on it.
BINDINGS_QUEUE: Final = "celery_bindings"
PERIOD: Final = 10.0  # a live process writes its bindings again this often
LIFETIME: Final = 3 * PERIOD  # a binding not written again for this long is dead
_SWEEP: Final = 100  # dead rows cleared away per refresh


@dataclass(frozen=True)
class Binding:
    """`queue` receives what `exchange` routes with `routing_key` (or `pattern`)."""

    exchange: str
    routing_key: str
    pattern: str
    queue: str
    message_ttl: float | None = None  # seconds a message waits in `queue` before it is dropped
    store: str | None = None  # the nobroker queue holding `queue`, if not its own (replies)

    def key(self) -> str:
        """The binding's identity, the same in every process."""
        text = json.dumps([self.exchange, self.routing_key, self.pattern, self.queue])
        return hashlib.sha1(text.encode()).hexdigest()


class SharedBindings:
    """The bindings this process declared (kept alive) and every process's (read)."""

    def __init__(self, queue: Queue) -> None:
        self.queue = queue  # its clock decides what is alive
        self._mine: dict[str, Binding] = {}
        self._period: dict[str, int] = {}  # binding key -> the period it was last written in
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def declare(self, binding: Binding) -> None:
        """Write `binding` now, and again each PERIOD until `close`."""
        with self._lock:
            self._mine[binding.key()] = binding
            self._period.pop(binding.key(), None)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name="nobroker-celery-bindings")
                self._thread.start()
        self.refresh()

    def refresh(self) -> None:
        """Write each of this process's bindings not yet written in this period, and
        clear away the dead rows of any process."""
        period = int(self.queue.clock() // PERIOD)
        with self._lock:
            due = [(key, b) for key, b in self._mine.items() if self._period.get(key) != period]
        if not due:
            return
        for key, binding in due:
            self.queue.enqueue(asdict(binding), delay=LIFETIME)
            with self._lock:
                self._period[key] = period
        dead = self.queue.lease(_SWEEP)  # only rows whose delay ran out are leasable
        if dead:
            self.queue.ack_many(dead)

    def table(self, exchange: str) -> list[Binding]:
        """The live bindings of `exchange`, declared by any process."""
        now = self.queue.clock()
        found: dict[str, Binding] = {}
        for job in self.queue.list_jobs(JobState.PENDING):
            row = job.payload
            if job.available_at <= now or not isinstance(row, dict) or \
                    row.get("exchange") != exchange:
                continue
            binding = _binding_of(row)
            if binding is not None:
                found[binding.key()] = binding
        return list(found.values())

    def close(self) -> None:
        """Stop writing this process's bindings: they die within LIFETIME."""
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(PERIOD / 2):
            try:
                self.refresh()
            except (NobrokerError, OSError) as exc:  # the directory went away? Try again later
                if self._stop.is_set():
                    return
                log.warning("could not write the bindings again: %s", exc)


def _binding_of(row: dict[str, Any]) -> Binding | None:
    exchange, key, pattern, queue = (row.get(name) for name in
                                     ("exchange", "routing_key", "pattern", "queue"))
    if not (isinstance(exchange, str) and isinstance(key, str) and isinstance(pattern, str)
            and isinstance(queue, str)):
        return None
    ttl, store = row.get("message_ttl"), row.get("store")
    return Binding(exchange, key, pattern, queue,
                   float(ttl) if isinstance(ttl, (int, float)) else None,
                   store if isinstance(store, str) else None)
