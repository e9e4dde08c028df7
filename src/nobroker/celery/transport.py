"""`nobroker://`: a kombu virtual transport whose messages are nobroker jobs.

    broker_url = "nobroker:///var/lib/myapp/jobs"

Each Celery queue is a nobroker queue in that directory (named by
`locations.queue_name_for`). Publishing enqueues the message as a JSON job
(pickle refused: messages.py); consuming leases it with a visibility timeout
that a daemon thread extends while Celery holds it (leases.py); Celery's ack
is nobroker's ack, a reject with requeue gives the job back untried
(`Queue.snooze(job, 0)`), a reject without requeue drops it (acks it), as
kombu's other virtual transports do. Closing a channel gives back its unacked
messages untried. An idle consumer blocks in `Queue.wait` (waiting.py):
woken by a producer in any process, no polling.

Queues declared transient (auto_delete, exclusive or not durable: Celery's
pidbox, reply and event queues) are never stored: messages to them are
dropped and consuming them finds nothing, so broadcasts (`inspect`, `control`,
`revoke`), mingle and gossip do not work over this transport (docs/CELERY.md).

Transport options (`broker_transport_options`): `visibility_timeout` (seconds,
default 30: how long a killed worker's messages stay invisible).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from queue import Empty
from typing import Any

from kombu.transport import virtual

from .. import __version__
from ..errors import NotLeasedError
from ..queue import Queue
from .leases import LeaseKeeper
from .locations import directory_from_url, queue_name_for
from .messages import delay_of, is_celery_payload, job_id_of, message_from, payload_for, priority_of
from .waiting import AnyQueueWaiter

__all__ = ["Transport", "Channel", "QoS"]

log = logging.getLogger("nobroker.celery")

DEFAULT_VISIBILITY_TIMEOUT = 30.0
_IDLE_SLICE = 1.0  # an idle drain_events re-checks its consumers this often
_FULL_PAUSE = 0.05  # prefetch full: nothing to lease until Celery acks something
# the last_error of a job given back untried: its next delivery says `redelivered`
REQUEUED = "given back unacked by a Celery consumer (reject with requeue, channel closed)"


class QoS(virtual.QoS):
    """kombu's prefetch accounting, with acks and rejects that reach nobroker."""

    channel: Channel

    def ack(self, delivery_tag: str) -> None:
        self.channel.settle(delivery_tag, requeue=False)
        super().ack(delivery_tag)

    def reject(self, delivery_tag: str, requeue: bool = False) -> None:
        self.channel.settle(delivery_tag, requeue=requeue)
        self._quick_ack(delivery_tag)  # not super(): it would publish a copy

    def restore_unacked(self) -> list[Any]:
        """Give every unacked message back untried (kombu's default republishes)."""
        self._flush()
        tags = list(self._delivered)
        self._delivered.clear()
        for tag in tags:
            self.channel.settle(tag, requeue=True)
        return []


class Channel(virtual.Channel):
    """One kombu channel over the transport's open queues."""

    QoS = QoS
    connection: Transport
    body_encoding = None  # JSON text stays text: no base64
    supports_fanout = False

    def __init__(self, connection: Transport, **kwargs: Any) -> None:
        super().__init__(connection, **kwargs)
        self._no_ack_queues: set[str] = set()

    # -- queues -------------------------------------------------------------

    def _new_queue(self, queue: str, **kwargs: Any) -> None:
        transient = (kwargs.get("auto_delete") or kwargs.get("exclusive")
                     or kwargs.get("durable") is False)
        if transient:
            self.connection.transient.add(queue)
        else:
            self.connection.transient.discard(queue)
            self.connection.queue(queue)

    def _has_queue(self, queue: str, **kwargs: Any) -> bool:
        return True  # every name is a queue in the directory

    def _size(self, queue: str) -> int:
        if queue in self.connection.transient:
            return 0
        return self.connection.queue(queue).stats().pending

    def _purge(self, queue: str) -> int:
        if queue in self.connection.transient:
            return 0
        return self.connection.queue(queue).purge()

    def _delete(self, queue: str, *args: Any, **kwargs: Any) -> None:
        # A nobroker queue cannot be deleted through its API: its jobs stay.
        self.connection.transient.discard(queue)

    def _lookup(self, exchange: str, routing_key: str, default: Any = None) -> list[str]:
        found: list[str] = super()._lookup(exchange, routing_key, default)
        if not found and routing_key and getattr(self.typeof(exchange), "type", "") == "direct":
            # Bindings live in each process's memory; a producer that never declared
            # the queue still reaches it by its routing key (Celery's default queues).
            return [routing_key]
        return found

    # -- messages -----------------------------------------------------------

    def _put(self, queue: str, message: dict[str, Any], **kwargs: Any) -> None:
        if queue in self.connection.transient:
            return  # a broadcast or reply queue: not served (see the module docstring)
        payload = payload_for(message, queue)
        self.connection.queue(queue).enqueue(
            payload, priority=priority_of(message), delay=delay_of(message),
            job_id=job_id_of(message))

    def _get(self, queue: str, timeout: float | None = None) -> dict[str, Any]:
        if queue in self.connection.transient:
            raise Empty()
        transport = self.connection
        nobroker_queue = transport.queue(queue)
        job = nobroker_queue.lease_one(visibility_timeout=transport.visibility_timeout)
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

    def settle(self, delivery_tag: str, requeue: bool) -> None:
        """Finish a delivery in nobroker: ack it, or give it back untried."""
        held = self.connection.leases.release(delivery_tag)
        if held is None:
            return  # settled already, or never held (no_ack)
        queue, job = held
        try:
            if requeue:
                queue.snooze(job, 0.0, error=REQUEUED)
            else:
                queue.ack(job)
        except NotLeasedError:
            log.warning("job %s in %s: its lease ran out before Celery settled it; another "
                        "worker may have run it too (at-least-once)", job.id, queue)

    def consumable_queues(self) -> list[Queue] | None:
        """The stored queues this channel consumes, or None when its prefetch is full."""
        if not self._consumers:
            return []
        if not self.qos.can_consume():
            return None
        return [self.connection.queue(name) for name in self._active_queues
                if name not in self.connection.transient]


class Transport(virtual.Transport):
    """The `nobroker://` transport: one directory of queues per connection."""

    Channel = Channel
    driver_type = "nobroker"
    driver_name = "nobroker"
    implements = virtual.Transport.implements.extend(
        asynchronous=False, exchange_type=frozenset(["direct", "topic"]), heartbeats=False)

    def __init__(self, client: Any, **kwargs: Any) -> None:
        super().__init__(client, **kwargs)
        self.directory = _directory_of(client)
        options = client.transport_options
        self.visibility_timeout = float(options.get("visibility_timeout",
                                                    DEFAULT_VISIBILITY_TIMEOUT))
        self.leases = LeaseKeeper(self.visibility_timeout)
        self.waiter = AnyQueueWaiter()
        self.transient: set[str] = set()
        self._queues: dict[str, Queue] = {}

    def queue(self, celery_queue: str) -> Queue:
        """The nobroker queue of a Celery queue, opened once per connection."""
        opened = self._queues.get(celery_queue)
        if opened is None:
            opened = Queue(self.directory, queue_name_for(celery_queue),
                           visibility_timeout=self.visibility_timeout)
            self._queues[celery_queue] = opened
        return opened

    def drain_events(self, connection: Any, timeout: float | None = None) -> None:
        """Deliver one message; while none is ready, block in nobroker's wait."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                self.cycle.get(self._deliver, timeout=timeout)
                return
            except Empty:
                pass
            left = _IDLE_SLICE if deadline is None else deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError()  # socket.timeout, which kombu's callers expect
            step = min(left, _IDLE_SLICE)
            queues: list[Queue] = []
            full = False
            for channel in list(self.channels):
                found = channel.consumable_queues()
                if found is None:
                    full = True
                else:
                    queues.extend(q for q in found if q not in queues)
            if full and not queues:
                time.sleep(min(step, _FULL_PAUSE))
            else:
                self.waiter.wait(queues, step)

    def close_connection(self, connection: Any) -> None:
        super().close_connection(connection)  # channels give back their unacked messages
        for queue, job in self.leases.release_all():
            try:
                queue.snooze(job, 0.0, error=REQUEUED)
            except NotLeasedError:
                pass
        self.leases.close()
        self.waiter.close()
        for queue in self._queues.values():
            queue.close()
        self._queues.clear()

    def driver_version(self) -> str:
        return __version__


def _directory_of(client: Any) -> str:
    """The directory a kombu Connection names: kombu splits `nobroker:///a/b` into
    no host and the virtual host "a/b", and `nobroker://a/b` into host "a", "b"."""
    host = client.hostname if client.hostname not in (None, "", "localhost") else None
    vhost = (client.virtual_host or "").lstrip("/")
    path = f"{host}/{vhost}" if host else f"/{vhost}"
    return directory_from_url(f"nobroker://{path}")
