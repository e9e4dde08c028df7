"""A Dramatiq message as a nobroker job's payload, and back.

A message is stored as the JSON object Dramatiq's JSONEncoder makes of it
(`queue_name`, `actor_name`, `args`, `kwargs`, `options`, `message_id`,
`message_timestamp`), so `nobroker` tools show it as it is. Only JSON is
stored: with another encoder set (`dramatiq.set_encoder(PickleEncoder())`)
the broker refuses to enqueue, before anything is written.

A message's nobroker priority (higher is leased first) is its
`broker_priority` option when it has one (RabbitMQ's convention), else its
actor's `priority` negated: Dramatiq runs lower numbers first, and on nobroker
that order holds across the whole queue, not only among a worker's prefetched
messages.
"""

from __future__ import annotations

import json
from typing import Any

from dramatiq.encoder import JSONEncoder
from dramatiq.errors import DecodeError
from dramatiq.message import Message, get_encoder

from ..errors import NobrokerError

__all__ = ["EncoderRefusedError", "check_json_encoder", "payload_for", "message_from",
           "priority_of"]


class EncoderRefusedError(NobrokerError, ValueError):
    """Dramatiq's encoder is not its JSONEncoder (pickle, or another format): nobroker
    stores JSON only, so nothing was written."""


def check_json_encoder(encoder: Any | None = None) -> None:
    """Raise EncoderRefusedError unless `encoder` (default: Dramatiq's global one) is a
    JSONEncoder."""
    encoder = get_encoder() if encoder is None else encoder
    if not isinstance(encoder, JSONEncoder):
        raise EncoderRefusedError(
            f"nobroker stores Dramatiq messages and results as JSON only, and the encoder "
            f"is {type(encoder).__name__}: use dramatiq's JSONEncoder (the default; "
            f"dramatiq.set_encoder(dramatiq.JSONEncoder()))")


def payload_for(message: Message[Any]) -> Any:
    """The job payload of a message: what Dramatiq's JSON encoder makes of it (a
    JSONEncoder subclass may encode more than JSON's types)."""
    check_json_encoder()
    return json.loads(message.encode())


def message_from(payload: Any) -> Message[Any] | None:
    """The message a job's payload holds, read back through Dramatiq's encoder (a
    JSONEncoder subclass may decode more than JSON's types), or None if it is not a
    Dramatiq message."""
    if not isinstance(payload, dict):
        return None
    try:
        return Message.decode(json.dumps(payload).encode("utf-8"))
    except DecodeError:
        return None


def priority_of(message: Message[Any], actor_priority: int | None) -> int:
    """The job priority of a message (see the module docstring)."""
    explicit = message.options.get("broker_priority")
    if isinstance(explicit, int) and not isinstance(explicit, bool):
        return explicit
    return -actor_priority if actor_priority else 0
