"""`nobroker://`: a kombu virtual transport whose messages are nobroker jobs.

    broker_url = "nobroker:///var/lib/myapp/jobs"

Each Celery queue is a nobroker queue in that directory (named by
`locations.queue_name_for`). Publishing enqueues the message as a JSON job
(pickle refused: messages.py); consuming leases it with a visibility timeout
that a daemon thread extends while Celery holds it (leases.py); Celery's ack
is nobroker's ack, a reject with requeue gives the job back untried
(`Queue.snooze(job, 0)`), a reject without requeue (Celery's
`Reject(requeue=False)`) dead-letters it (`Queue.nack(job, dead=True)`), as
AMQP does with a dead-letter exchange. Closing a channel gives back its unacked
messages untried. An idle consumer blocks in `Queue.wait` (waiting.py); a
Celery worker runs its event loop on this transport (kombu's `asynchronous`),
watching a pipe that a thread pokes when a consumed queue may have a message
(eventloop.py), so a prefork worker with every process busy reads control
messages. Either way: woken by a producer in any process, no polling.

Broadcasts (`revoke`, `ping`, `inspect`, `control`): the bindings of fanout and
non-durable exchanges (kombu's mailbox: `celery.pidbox`, `reply.celery.pidbox`)
are shared through the directory (bindings.py), so a message published to the
fanout exchange is copied into each live worker's pidbox queue, and a reply
reaches the caller's reply queue. A queue's message TTL (`x-message-ttl`) is
stamped on each message routed to it; an expired one is dropped when read.
Worker events (a durable topic exchange) are not shared: they reach no one.

Transport option (`broker_transport_options`): `visibility_timeout` (seconds,
default 30: how long a killed worker's messages stay invisible).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from queue import Empty
from typing import Any

from kombu.transport import virtual
from kombu.transport.base import to_rabbitmq_queue_arguments

from .. import __version__
from ..errors import NotLeasedError
from ..queue import Queue
from .bindings import BINDINGS_QUEUE, Binding, SharedBindings
from .eventloop import LoopWaker
from .leases import LeaseKeeper
from .locations import (
    is_reply_queue,
    location_of_connection,
    queue_name_for,
)
from .messages import (
    delay_of,
    expires_at,
    has_expired,
    is_celery_payload,
    job_id_of,
    message_from,
    payload_for,
    priority_of,
    refuse_unserved,
)
from .qos import QoS
from .replies import ReplyStore
from .waiting import AnyQueueWaiter, consumed_queues, drain

__all__ = ["Transport", "Channel", "QoS"]

log = logging.getLogger("nobroker.celery")

DEFAULT_VISIBILITY_TIMEOUT = 30.0
# the last_error of a job given back untried: its next delivery says `redelivered`
REQUEUED = "given back unacked by a Celery consumer (reject with requeue, channel closed)"
REJECTED = "rejected by a Celery consumer without requeue (Reject(requeue=False))"


class Channel(virtual.Channel):
    """One kombu channel over the transport's open queues."""

    QoS = QoS
    connection: Transport
    body_encoding = None  # JSON text stays text: no base64
    supports_fanout = True  # through the shared bindings (bindings.py)

    def __init__(self, connection: Transport, **kwargs: Any) -> None:
        super().__init__(connection, **kwargs)
        self._no_ack_queues: set[str] = set()

    # -- queues -------------------------------------------------------------

    def _new_queue(self, queue: str, **kwargs: Any) -> None:
        transport = self.connection
        if kwargs.get("auto_delete") or kwargs.get("exclusive") or kwargs.get("durable") is False:
            transport.transient.add(queue)
            if is_reply_queue(queue):
                transport.store_of[queue] = transport.replies.claim()
        else:
            transport.transient.discard(queue)
        ttl = (kwargs.get("arguments") or {}).get("x-message-ttl")
        if isinstance(ttl, (int, float)) and not isinstance(ttl, bool):
            transport.message_ttl[queue] = ttl / 1000.0  # AMQP's milliseconds
        transport.queue(queue)

    def prepare_queue_arguments(self, arguments: dict[str, Any], **kwargs: Any) -> Any:
        # AMQP's names (x-message-ttl, ...), so that _new_queue sees the message TTL
        return to_rabbitmq_queue_arguments(arguments, **kwargs)

    def _has_queue(self, queue: str, **kwargs: Any) -> bool:
        return True  # every name is a queue in the directory

    def _size(self, queue: str) -> int:
        return self.connection.queue(queue).stats().pending

    def _purge(self, queue: str) -> int:
        return self.connection.queue(queue).purge()

    def _delete(self, queue: str, *args: Any, **kwargs: Any) -> None:
        # A nobroker queue cannot be deleted through its API: its jobs stay. A transient
        # one (a reply queue, deleted by kombu after each collect) drops what is left in
        # it, as AMQP and Redis do, so that late replies do not pile up.
        if queue in self.connection.transient:
            self.connection.queue(queue).purge()

    # -- bindings shared through the directory (bindings.py) ----------------

    def _shared(self, exchange: str) -> bool:
        """Whether `exchange`'s bindings are shared: fanout, or declared non-durable."""
        declared = self.state.exchanges.get(exchange) or {}
        return declared.get("type") == "fanout" or declared.get("durable") is False

    def _queue_bind(self, exchange: str, routing_key: str, pattern: str, queue: str) -> None:
        if self._shared(exchange):
            transport = self.connection
            transport.bindings.declare(Binding(exchange, routing_key or "", pattern or "",
                                               queue, transport.message_ttl.get(queue),
                                               transport.store_of.get(queue)))

    def get_table(self, exchange: str) -> list[tuple[str, str, str]]:
        local: list[tuple[str, str, str]] = list(super().get_table(exchange))
        if not self._shared(exchange):
            return local
        transport = self.connection
        for binding in transport.bindings.table(exchange):
            row = (binding.routing_key, binding.pattern, binding.queue)
            if row not in local:
                local.append(row)
                transport.remote.add(binding.queue)
            if binding.message_ttl is not None:
                transport.message_ttl.setdefault(binding.queue, binding.message_ttl)
            if binding.store is not None:
                transport.store_of.setdefault(binding.queue, binding.store)
        return local

    def _put_fanout(self, exchange: str, message: dict[str, Any], routing_key: str,
                    **kwargs: Any) -> None:
        """A copy for each queue bound to `exchange`, in any process."""
        refuse_unserved(message)
        self.connection.bindings.refresh()  # our own reply binding, before anyone replies
        for queue in dict.fromkeys(row[2] for row in self.get_table(exchange)):
            self._put(queue, message)

    def _lookup(self, exchange: str, routing_key: str, default: Any = None) -> list[str]:
        found: list[str] = super()._lookup(exchange, routing_key, default)
        if not found and routing_key and getattr(self.typeof(exchange), "type", "") == "direct":
            # Bindings of durable exchanges live in each process's memory; a producer
            # that never declared the queue still reaches it by its routing key.
            return [routing_key]
        return found

    # -- messages -----------------------------------------------------------

    def _put(self, queue: str, message: dict[str, Any], **kwargs: Any) -> None:
        transport = self.connection
        payload = expires_at(payload_for(message, queue), transport.message_ttl.get(queue),
                             time.time())
        transport.enqueue(queue, payload, priority=priority_of(message),
                          delay=delay_of(message), job_id=job_id_of(message))

    def _get(self, queue: str, timeout: float | None = None) -> dict[str, Any]:
        transport = self.connection
        nobroker_queue = transport.queue(queue)
        job = nobroker_queue.lease_one(visibility_timeout=transport.visibility_timeout)
        while job is not None and isinstance(job.payload, dict) and \
                has_expired(job.payload, time.time()):
            # its queue's message TTL ran out: an unanswered reply, an old broadcast
            job = nobroker_queue.ack_and_lease(job)
        if job is None:
            raise Empty()
        if not is_celery_payload(job.payload):
            # Enqueued by something else (a `nobroker enqueue` into a Celery queue):
            # refused, so that it reaches the dead-letter queue after max_attempts.
            nobroker_queue.nack(job, error=f"not a Celery message (queue {queue!r})")
            log.error("job %s in %s is not a Celery message: nacked", job.id, nobroker_queue)
            raise Empty()
        tag = f"{job.id}:{job.token}"
        if queue in self._no_ack_queues:
            nobroker_queue.ack(job)  # no_ack: at most once, as AMQP's
        else:
            transport.leases.hold(tag, nobroker_queue, job)
        # A lease that expired counts an attempt; a job given back untried says so in
        # its last_error (see settle): either way this is a redelivery.
        message = message_from(job.payload, tag,
                               redelivered=job.attempts > 1 or job.last_error is not None)
        message["properties"]["delivery_info"].update(routing_key=queue)
        return message

    def basic_consume(self, queue: str, no_ack: bool, callback: Callable[..., Any],
                      consumer_tag: str, **kwargs: Any) -> Any:
        if no_ack:
            self._no_ack_queues.add(queue)
        else:
            self._no_ack_queues.discard(queue)
        return super().basic_consume(queue, no_ack, callback, consumer_tag, **kwargs)

    def basic_get(self, queue: str, no_ack: bool = False, **kwargs: Any) -> Any:
        message = super().basic_get(queue, no_ack=no_ack, **kwargs)
        if message is not None and no_ack:
            self.settle(message.delivery_tag, requeue=False)
        return message

    def settle(self, delivery_tag: str, requeue: bool, dead: bool = False) -> None:
        """Finish a delivery in nobroker: ack it, give it back untried, or dead-letter it."""
        held = self.connection.leases.release(delivery_tag)
        if held is None:
            return  # settled already, or never held (no_ack)
        queue, job = held
        try:
            if requeue:
                queue.snooze(job, 0.0, error=REQUEUED)
            elif dead:
                queue.nack(job, error=REJECTED, dead=True)
            else:
                queue.ack(job)
        except NotLeasedError:
            log.warning("job %s in %s: its lease ran out before Celery settled it; another "
                        "worker may have run it too (at-least-once)", job.id, queue)

    def made_room(self) -> None:
        """An ack made room in a full prefetch: an event loop leases again at once (an
        ack wakes no queue, and the loop's waker leaves a full channel's queues out)."""
        self.connection.poke_loop()

    def consumable_queues(self) -> list[Queue] | None:
        """The stored queues this channel consumes, or None when its prefetch is full."""
        if not self._consumers:
            return []
        if not self.qos.can_consume():
            return None
        return [self.connection.queue(name) for name in self._active_queues]


class Transport(virtual.Transport):
    """The `nobroker://` transport: one directory of queues per connection."""

    Channel = Channel
    driver_type = "nobroker"
    driver_name = "nobroker"
    implements = virtual.Transport.implements.extend(
        asynchronous=True, exchange_type=frozenset(["direct", "topic", "fanout"]),
        heartbeats=False)

    def __init__(self, client: Any, **kwargs: Any) -> None:
        super().__init__(client, **kwargs)
        self.directory = location_of_connection(client.hostname, client.virtual_host)
        options = client.transport_options
        self.visibility_timeout = float(options.get("visibility_timeout",
                                                    DEFAULT_VISIBILITY_TIMEOUT))
        self.leases = LeaseKeeper(self.visibility_timeout)
        self.waiter = AnyQueueWaiter()
        self.transient: set[str] = set()  # declared auto_delete, exclusive or not durable
        self.message_ttl: dict[str, float] = {}  # queue -> seconds (its x-message-ttl)
        self._queues: dict[str, Queue] = {}
        self._opening = threading.Lock()  # the event loop's waker opens queues too
        self._waker: LoopWaker | None = None  # while registered with an event loop
        self._bindings: SharedBindings | None = None
        # queues this process only routes to through another process's binding (a
        # caller's reply queue): opened for each message, not kept open
        self.remote: set[str] = set()
        # Celery queue -> the nobroker queue holding it, where that is not the queue of
        # its own name: kombu's reply queues, one store per connection (is_reply_queue)
        self.store_of: dict[str, str] = {}
        self.replies = ReplyStore(self.directory)  # claimed by the first reply queue

    @property
    def bindings(self) -> SharedBindings:
        """The shared bindings (bindings.py), opened on first use."""
        if self._bindings is None:
            self._bindings = SharedBindings(Queue(self.directory, BINDINGS_QUEUE))
        return self._bindings

    def queue(self, celery_queue: str) -> Queue:
        """The nobroker queue of a Celery queue, opened once per connection."""
        name = self.store_name(celery_queue)
        with self._opening:
            opened = self._queues.get(name)
            if opened is None:
                opened = Queue(self.directory, name, visibility_timeout=self.visibility_timeout)
                self._queues[name] = opened
            return opened

    def store_name(self, celery_queue: str) -> str:
        """The name of the nobroker queue holding a Celery queue."""
        return self.store_of.get(celery_queue) or queue_name_for(celery_queue)

    def enqueue(self, celery_queue: str, payload: Any, **options: Any) -> None:
        """Store one message in a Celery queue."""
        name = self.store_name(celery_queue)
        if name in self._queues or celery_queue not in self.remote:
            self.queue(celery_queue).enqueue(payload, **options)
            return
        once = Queue(self.directory, name)
        try:
            once.enqueue(payload, **options)
        finally:
            once.close()

    def drain_events(self, connection: Any, timeout: float | None = None) -> None:
        """Deliver one message; while none is ready, block in nobroker's wait (waiting.py)."""
        drain(lambda: self.cycle.get(self._deliver, timeout=timeout), self.consumed_queues,
              self.waiter, timeout)

    def consumed_queues(self) -> tuple[list[Queue], bool]:
        """The queues to wait on, and whether a channel's prefetch is full (waiting.py)."""
        return consumed_queues(list(self.channels))

    # -- kombu's event loop (Celery's hub): eventloop.py ---------------------

    def register_with_event_loop(self, connection: Any, loop: Any) -> None:
        self.unregister_from_event_loop(connection, loop)  # a reconnect: a fresh waker
        self._waker = LoopWaker(self.consumed_queues)
        loop.add_reader(self._waker.fileno(), self.on_readable, self._waker.fileno())

    def unregister_from_event_loop(self, connection: Any, loop: Any) -> None:
        if self._waker is not None:
            loop.remove_reader(self._waker.fileno())
            self._waker.close()
            self._waker = None

    def poke_loop(self) -> None:
        """Have the event loop, if any, look at the queues again soon (any thread)."""
        waker = self._waker
        if waker is not None:
            waker.poke()

    def on_readable(self, fileno: int) -> None:
        """A consumed queue may have messages: deliver what is ready."""
        if self._waker is not None and self._waker.fileno() == fileno:
            self._waker.serve(lambda: self.cycle.get(self._deliver, timeout=0))

    def close_connection(self, connection: Any) -> None:
        super().close_connection(connection)  # channels give back their unacked messages
        for queue, job in self.leases.release_all():
            try:
                queue.snooze(job, 0.0, error=REQUEUED)
            except NotLeasedError:
                pass
        self.leases.close()
        self.waiter.close()
        if self._waker is not None:  # the loop is going away without unregistering us
            self._waker.close()
            self._waker = None
        if self._bindings is not None:
            self._bindings.close()
            self._bindings.queue.close()
            self._bindings = None
        for queue in self._queues.values():
            queue.close()
        self._queues.clear()
        self.replies.release()

    def driver_version(self) -> str:
        return __version__

