"""`NobrokerBroker`: Dramatiq's Broker over a directory of nobroker queues (or a
PostgreSQL database: any location `Queue` opens).

    dramatiq.set_broker(NobrokerBroker("/var/lib/myapp/jobs"))

Each Dramatiq queue is one nobroker queue (named by `names.queue_name_for`),
opened when it is declared. A message is a job (messages.py: JSON only).
Dramatiq's Retries middleware decides retries (by acking the message and
enqueueing a new one) and its nack dead-letters at once (`Queue.nack(dead=True)`,
consumer.py), so a job's nobroker attempts count only its deliveries: one that
ends in an ack or a nack, and each lease that ran out because its worker died.
A job is enqueued with max_attempts=`max_deliveries` (default 20, RabbitMQ's
default delivery limit for quorum queues): a message whose worker keeps being
killed (it exhausts memory, say) is delivered again after the queue's backoff
each time (1 s, 2 s, ... up to 5 minutes by default), and ends dead with
"lease expired (attempt 20)" rather than crash workers forever.

Delays: `enqueue(message, delay=ms)` is a nobroker delay on the queue itself.
There are no delay queues (`*.DQ`): the broker declares none, so a Dramatiq
worker starts no consumer for them and never holds far-future messages in
memory; a delayed job is invisible until it is due, then leased like any
other, by whichever worker is free. Dramatiq's `eta` option is therefore
never set by this broker (a message that arrives with one is still honoured
by the worker, which delays it in memory and enqueues it again).

`join(queue)` (for tests) waits until the queue holds no pending (delayed
included) or leased message, reading its counts every 50 ms. A broker made
with `fail_fast_default=True` (tests, as Dramatiq's StubBroker) also keeps
the messages this process dead-letters, with their exceptions, in memory
(`dead_letters`, `dead_letters_by_queue`; `flush_all` empties them), and
`join` raises the first one's exception; with False (the default) nothing is
kept, so a long-running worker holds no exceptions.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from dramatiq.broker import Broker
from dramatiq.errors import QueueJoinTimeout, QueueNotFound
from dramatiq.message import Message
from dramatiq.middleware import Middleware

from ..errors import NobrokerError
from ..queue import Queue
from .consumer import Delivery, NobrokerConsumer
from .leases import LeaseBook
from .messages import check_json_encoder, payload_for, priority_of
from .names import queue_name_for

__all__ = ["NobrokerBroker", "DEFAULT_VISIBILITY_TIMEOUT", "DEFAULT_MAX_DELIVERIES"]

DEFAULT_VISIBILITY_TIMEOUT = 30.0
DEFAULT_MAX_DELIVERIES = 20  # leases of one message; its last one running out leaves it dead
_JOIN_INTERVAL = 0.05


class NobrokerBroker(Broker):
    """A Dramatiq broker on nobroker queues at `location` (a directory, or a
    postgresql:// URL). `visibility_timeout` (seconds): how long a killed worker's
    messages stay invisible before they are delivered again; leases of running
    messages are extended meanwhile. `max_deliveries` (max_attempts of each job): how
    often a message is leased at most; if its last lease runs out too, it is dead (see
    the module docstring). `queue_options` go to every `Queue` (fsync, backoff, ...).
    """

    queues: dict[str, Queue]

    def __init__(self, location: str | os.PathLike[str], *,
                 middleware: list[Middleware] | None = None,
                 visibility_timeout: float = DEFAULT_VISIBILITY_TIMEOUT,
                 max_deliveries: int = DEFAULT_MAX_DELIVERIES,
                 fail_fast_default: bool = False, **queue_options: Any) -> None:
        super().__init__(middleware=middleware)
        check_json_encoder()
        self.location = os.fspath(location)
        self.visibility_timeout = float(visibility_timeout)
        if type(max_deliveries) is not int or max_deliveries < 1:
            raise ValueError(f"max_deliveries must be an int >= 1, not {max_deliveries!r}")
        self.max_deliveries = max_deliveries
        self.queue_options = queue_options
        self.queues = {}
        self.fail_fast_default = fail_fast_default
        self.dead_letters_by_queue: dict[str, list[Delivery]] = {}
        self._books: dict[str, LeaseBook] = {}
        self._lock = threading.Lock()

    # -- queues -------------------------------------------------------------

    def declare_queue(self, queue_name: str) -> None:
        """Open the nobroker queue of `queue_name` (idempotent). No delay queue."""
        if queue_name in self.queues:
            return
        with self._lock:
            if queue_name in self.queues:
                return
            nobroker_name = queue_name_for(queue_name)
            self.emit_before("declare_queue", queue_name)
            queue = Queue(self.location, nobroker_name,
                          visibility_timeout=self.visibility_timeout, **self.queue_options)
            self._books[queue_name] = LeaseBook(queue, self.visibility_timeout)
            self.queues[queue_name] = queue
        self.emit_after("declare_queue", queue_name)

    def queue(self, queue_name: str) -> Queue:
        """The nobroker Queue of a declared Dramatiq queue."""
        try:
            return self.queues[queue_name]
        except KeyError:
            raise QueueNotFound(queue_name) from None

    # -- producing ----------------------------------------------------------

    def enqueue(self, message: Message[Any], *, delay: int | None = None) -> Message[Any]:
        """Store `message` as a job, durable when this returns; `delay` in milliseconds."""
        queue = self.queue(message.queue_name)
        payload = payload_for(message)  # refuses a non-JSON encoder before anything
        actor = self.actors.get(message.actor_name)
        priority = priority_of(message, actor.priority if actor is not None else None)
        self.emit_before("enqueue", message, delay)
        queue.enqueue(payload, priority=priority, delay=(delay or 0) / 1000,
                      max_attempts=self.max_deliveries)
        self.emit_after("enqueue", message, delay)
        return message

    # -- consuming ----------------------------------------------------------

    def consume(self, queue_name: str, prefetch: int = 1,
                timeout: int = 30000) -> NobrokerConsumer:
        """A consumer of `queue_name`: up to `prefetch` messages leased at once, each
        `__next__` blocking for at most `timeout` milliseconds."""
        self.queue(queue_name)
        dead = (self.dead_letters_by_queue.setdefault(queue_name, [])
                if self.fail_fast_default else None)
        return NobrokerConsumer(self._books[queue_name], prefetch, timeout / 1000, dead)

    @property
    def dead_letters(self) -> list[Delivery]:
        """The messages this process dead-lettered (kept with fail_fast_default only)."""
        return [message for kept in self.dead_letters_by_queue.values() for message in kept]

    # -- tests and operations ---------------------------------------------

    def flush(self, queue_name: str) -> None:
        """Drop every pending message of a queue (delayed ones included)."""
        self.queue(queue_name).purge()

    def flush_all(self) -> None:
        for queue_name in list(self.queues):
            self.flush(queue_name)
        for kept in self.dead_letters_by_queue.values():
            kept.clear()  # in place: consumers hold these lists

    def join(self, queue_name: str, *, timeout: int | None = None,
             fail_fast: bool | None = None) -> None:
        """Wait until `queue_name` holds no pending or leased message (for tests);
        QueueJoinTimeout after `timeout` milliseconds. With `fail_fast` (default: the
        broker's fail_fast_default), then raise the exception of the first message this
        process dead-lettered from the queue."""
        queue = self.queue(queue_name)
        deadline = None if timeout is None else time.monotonic() + timeout / 1000
        while True:
            stats = queue.stats()
            if stats.pending == 0 and stats.leased == 0:
                break
            if deadline is not None and time.monotonic() >= deadline:
                raise QueueJoinTimeout(queue_name)
            time.sleep(_JOIN_INTERVAL)
        if self.fail_fast_default if fail_fast is None else fail_fast:
            for message in self.dead_letters_by_queue.get(queue_name, []):
                raise (message.kept_exception
                       or NobrokerError(f"message {message.message_id} was dead-lettered"))

    def close(self) -> None:
        """Give back unsettled leases untried and close every queue."""
        for book in self._books.values():
            book.close()
            for job in book.take_all():
                try:
                    book.queue.snooze(job, 0.0)
                except NobrokerError:
                    pass  # its lease ran out: someone else's now; close the rest anyway
        for queue in self.queues.values():
            queue.close()
