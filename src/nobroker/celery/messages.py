"""A kombu message as a nobroker job's payload, and back. Stdlib only.

A message is stored as one JSON object: the body as the JSON value it holds
(so `nobroker` tools show it), then kombu's headers and properties as they
are. Only JSON bodies are stored: a pickled message (or any other content
type, or a compressed body) is refused with MessageRefusedError before
anything is written. The message's `priority` property is the job's priority
(higher is leased first, as on RabbitMQ), its `eta` header the job's delay.
"""

from __future__ import annotations

import json
import time
from datetime import datetime
from typing import Any, Final

from ..errors import NobrokerError

__all__ = ["MessageRefusedError", "CommandNotServedError", "JOB_ID_HEADER", "JSON",
           "UNSERVED_COMMANDS", "payload_for", "message_from", "is_celery_payload",
           "priority_of", "delay_of", "job_id_of", "expires_at", "has_expired",
           "refuse_unserved"]

JSON: Final = "application/json"
_PICKLE: Final = frozenset({"application/x-python-serialize", "application/python-pickle"})
# A message carrying this header (a scope, such as "chord-callback") is enqueued
# under the job id "SCOPE:TASK_ID:NESTING:RETRIES", so that publishing it again (a
# chord callback sent again by a redelivered member) writes nothing: nobroker keeps
# a known id for its key_retention. Each task of a group body keeps its own id; a
# retry (RETRIES + 1) or a replacement (Task.replace keeps the task id, NESTING + 1)
# is a new message, not a copy.
JOB_ID_HEADER: Final = "x-nobroker-dedup"
# A stored message's expiry (seconds since the epoch), from its queue's message TTL
_EXPIRES: Final = "expires_at"
_NO_EVENTS: Final = ("worker events are not delivered by the nobroker transport (no "
                     "`celery events`, Flower's live view or -E): docs/CELERY.md")
# Remote-control commands that the workers would run but that serve nothing here.
UNSERVED_COMMANDS: Final = {"enable_events": _NO_EVENTS, "heartbeat": _NO_EVENTS}


class MessageRefusedError(NobrokerError, ValueError):
    """A Celery message cannot be stored as a nobroker job (pickle, non-JSON); nothing
    was written."""


class CommandNotServedError(NobrokerError, NotImplementedError):
    """A remote-control command (`app.control`) the nobroker transport cannot serve;
    nothing was sent."""


def refuse_unserved(message: dict[str, Any]) -> None:
    """Raise CommandNotServedError if a broadcast carries a command in UNSERVED_COMMANDS."""
    try:
        body = json.loads(message.get("body") or "null")
    except (TypeError, ValueError):
        return
    method = body.get("method") if isinstance(body, dict) else None
    if isinstance(method, str) and method in UNSERVED_COMMANDS:
        raise CommandNotServedError(f"the control command {method!r} is not served: "
                                    f"{UNSERVED_COMMANDS[method]}")


def payload_for(message: dict[str, Any], queue: str) -> dict[str, Any]:
    """The job payload for a kombu message published to the Celery queue `queue`."""
    content_type = message.get("content-type") or ""
    if content_type in _PICKLE or "pickle" in content_type:
        raise MessageRefusedError(
            f"refusing a pickle-serialized message for queue {queue!r}: nobroker stores "
            f"JSON only (set task_serializer = 'json' and accept_content = ['json'])")
    if content_type != JSON:
        raise MessageRefusedError(
            f"refusing a {content_type or 'untyped'} message for queue {queue!r}: nobroker "
            f"stores JSON only (set task_serializer = 'json')")
    body = message.get("body")
    if isinstance(body, bytes):
        try:
            body = body.decode("utf-8")
        except UnicodeDecodeError:
            body = None
    if not isinstance(body, str):
        raise MessageRefusedError(f"refusing a message for queue {queue!r} whose body is not "
                                  f"UTF-8 JSON text (compressed? nobroker stores plain JSON)")
    try:
        value = json.loads(body)
    except ValueError as exc:
        raise MessageRefusedError(f"refusing a message for queue {queue!r}: its body is not "
                                  f"JSON ({exc})") from None
    properties = {key: item for key, item in message.get("properties", {}).items()
                  if key != "delivery_tag"}  # a fresh tag per delivery: see message_from
    return {"body": value, "content-type": content_type,
            "content-encoding": message.get("content-encoding") or "utf-8",
            "headers": message.get("headers") or {}, "properties": properties}


def message_from(payload: dict[str, Any], delivery_tag: str, redelivered: bool) -> dict[str, Any]:
    """The kombu message a job's payload holds, with this delivery's tag."""
    properties = dict(payload.get("properties") or {})
    properties["delivery_tag"] = delivery_tag
    properties["body_encoding"] = None  # the body is plain text: no base64 round trip
    # Celery reads `redelivered` from delivery_info (Reject(requeue=True) tasks do)
    properties["delivery_info"] = {**(properties.get("delivery_info") or {}),
                                   "redelivered": redelivered}
    return {"body": json.dumps(payload.get("body")),
            "content-type": payload.get("content-type", JSON),
            "content-encoding": payload.get("content-encoding", "utf-8"),
            "headers": payload.get("headers") or {}, "properties": properties}


def is_celery_payload(payload: Any) -> bool:
    """Whether a job's payload is a message `payload_for` stored."""
    return isinstance(payload, dict) and "body" in payload and \
        isinstance(payload.get("headers"), dict) and isinstance(payload.get("properties"), dict)


def priority_of(message: dict[str, Any]) -> int:
    """The job priority for a message: its `priority` property (an int), else 0."""
    priority = message.get("properties", {}).get("priority")
    return priority if isinstance(priority, int) and not isinstance(priority, bool) else 0


def delay_of(message: dict[str, Any], now: float | None = None) -> float:
    """Seconds until a message's `eta` header (Celery's countdown and eta), else 0. A
    naive or unreadable eta is delivered at once: the worker holds it until then."""
    eta = (message.get("headers") or {}).get("eta")
    if not isinstance(eta, str):
        return 0.0
    try:
        when = datetime.fromisoformat(eta)
    except ValueError:
        return 0.0
    if when.tzinfo is None:
        return 0.0
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def expires_at(payload: dict[str, Any], ttl: float | None, now: float) -> dict[str, Any]:
    """`payload` stamped to expire `ttl` seconds from `now` (unchanged without a ttl)."""
    return payload if ttl is None else {**payload, _EXPIRES: now + ttl}


def has_expired(payload: dict[str, Any], now: float) -> bool:
    """Whether a stored message's queue TTL ran out before it was delivered."""
    expiry = payload.get(_EXPIRES)
    return isinstance(expiry, (int, float)) and expiry <= now


def job_id_of(message: dict[str, Any]) -> str | None:
    """The job id a message is enqueued under: "SCOPE:TASK_ID:NESTING:RETRIES" when
    it carries JOB_ID_HEADER and a task id, else None (a fresh id)."""
    headers = message.get("headers") or {}
    scope, task_id = headers.get(JOB_ID_HEADER), headers.get("id")
    if isinstance(scope, str) and scope and isinstance(task_id, str) and task_id:
        nesting = headers.get("replaced_task_nesting") or 0
        return f"{scope}:{task_id}:{nesting}:{headers.get('retries') or 0}"
    return None
