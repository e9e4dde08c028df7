"""kombu's prefetch accounting for the `nobroker://` transport, whose acks and rejects
reach nobroker (through `Channel.settle`, transport.py) instead of kombu's memory."""

from __future__ import annotations

from typing import Any, Protocol

from kombu.transport import virtual

__all__ = ["QoS", "Settling"]


class Settling(Protocol):
    """What QoS needs of its channel (transport.Channel)."""

    def settle(self, delivery_tag: str, requeue: bool, dead: bool = False) -> None: ...

    def made_room(self) -> None: ...


class QoS(virtual.QoS):
    """kombu's prefetch accounting, with acks and rejects that reach nobroker."""

    channel: Settling

    def ack(self, delivery_tag: str) -> None:
        full = not self.can_consume()
        self.channel.settle(delivery_tag, requeue=False)
        super().ack(delivery_tag)
        if full:
            self.channel.made_room()

    def reject(self, delivery_tag: str, requeue: bool = False) -> None:
        full = not self.can_consume()
        self.channel.settle(delivery_tag, requeue=requeue, dead=not requeue)
        self._quick_ack(delivery_tag)  # not super(): it would publish a copy
        if full:
            self.channel.made_room()

    def restore_unacked(self) -> list[Any]:
        """Give every unacked message back untried (kombu's default republishes)."""
        self._flush()
        tags = list(self._delivered)
        self._delivered.clear()
        for tag in tags:
            self.channel.settle(tag, requeue=True)
        return []
