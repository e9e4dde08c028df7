"""The dashboard's JSON API: what every page shows and every button does.

Each endpoint is one function of the Hub and the request's decoded arguments
that returns a JSON-able value or raises `ApiError(status, reason)`. HTTP,
tokens and origins are the handler's business (handler.py); this module never
sees a socket, so the endpoints can be read (and are documented, in
docs/DASHBOARD.md) without the plumbing.

Rules: read through the public Queue API only; a control the queue's backend
lacks (pause, cancel, delete-dead on an older engine) is reported as absent
in `features` and refused with 501, never emulated; job ids and payloads are
data, returned as JSON strings and values, never as markup.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from typing import Any

from ..errors import JobNotFoundError, NobrokerError
from ..models import Job, JobState, QueueStats
from ..queue import Queue
from . import records
from .hub import Hub, UnknownQueue

__all__ = ["ApiError", "PAGE_MAX", "job_dict", "queue_summary", "features", "to_json"]

PAGE_MAX = 500  # jobs per page at most
PAGE_DEFAULT = 50
LISTED_STATES = ("pending", "leased", "dead", "waiting")


class ApiError(Exception):
    """A request the API refuses: an HTTP status and a one-line reason."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def features(queue: Queue) -> dict[str, bool]:
    """Which controls this queue's backend offers (the pages hide the others)."""
    caps = getattr(queue, "capabilities", None)
    return {
        "pause": callable(getattr(queue, "pause", None))
        and callable(getattr(queue, "resume", None)),
        "cancel": callable(getattr(queue, "cancel", None)),
        "delete_dead": callable(getattr(queue, "delete_dead", None)),
        "requeue_dead": True,
        "compaction": bool(getattr(caps, "compaction", True)),
        "inspection": records.available(queue),
    }


def job_dict(job: Job, *, full: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": job.id, "state": str(job.state), "priority": job.priority,
        "attempts": job.attempts, "max_attempts": job.max_attempts,
        "enqueued_at": job.enqueued_at, "available_at": job.available_at,
        "lease_expires_at": job.lease_expires_at, "last_error": job.last_error,
        "result": getattr(job, "result", None), "finished_at": getattr(job, "finished_at", None),
        "payload": job.payload,
        # what its holder reported (current_job().progress), and what a waiting job waits for
        "progress": None if job.progress is None else {"fraction": job.progress[0],
                                                       "note": job.progress[1]},
        "waiting_for": list(job.waiting_for),
    }
    if full:
        out["meta"] = job.meta  # its metadata (set_meta): on the job page only
    else:
        out["last_error"] = _clip(job.last_error)
        if job.progress is not None:
            out["progress"]["note"] = _clip(job.progress[1], 80)
    return out


def _clip(text: str | None, width: int = 200) -> str | None:
    return text if text is None or len(text) <= width else text[:width - 1] + "\u2026"


def _stats_dict(stats: QueueStats) -> dict[str, Any]:
    return dataclasses.asdict(stats)


def oldest_pending_age(queue: Queue, now: float) -> float | None:
    """Seconds since the oldest pending job was enqueued (the first in enqueue order)."""
    first = queue.list_jobs(JobState.PENDING, limit=1)
    return max(0.0, now - first[0].enqueued_at) if first else None


def limits_list(queue: Queue) -> list[dict[str, Any]]:
    """Each rate and concurrency key's use / limit now (Queue.limit_use): the
    dashboard's process declares none, so a limit is the one storage recorded (a rate
    key's window, on files and memory://) or None (shown as unknown)."""
    return [dataclasses.asdict(use) for use in queue.limit_use()]


def queue_summary(hub: Hub, name: str) -> dict[str, Any]:
    queue = hub.queue(name)
    stats = queue.stats()
    now = time.time()
    return {"name": name, "stats": _stats_dict(stats), "paused": bool(stats.paused),
            "oldest_pending_age": oldest_pending_age(queue, now), "features": features(queue),
            "limits": limits_list(queue)}


# -- reading ----------------------------------------------------------------

def get_overview(hub: Hub) -> dict[str, Any]:
    queues = []
    for name in hub.names():
        try:
            queues.append(queue_summary(hub, name))
        except NobrokerError as exc:
            queues.append({"name": name, "error": str(exc)})
    return {"directory": hub.directory, "readonly": hub.readonly, "time": time.time(),
            "queues": queues}


def _queue(hub: Hub, name: str) -> Queue:
    try:
        return hub.queue(name)
    except UnknownQueue as exc:
        raise ApiError(404, str(exc)) from None


def get_queue(hub: Hub, name: str) -> dict[str, Any]:
    _queue(hub, name)
    return queue_summary(hub, name)


def get_series(hub: Hub, name: str, step: float) -> dict[str, Any]:
    _queue(hub, name)
    if not 1 <= step <= 300:
        raise ApiError(400, "step must be between 1 and 300 seconds")
    return hub.series(name, step)


def get_jobs(hub: Hub, name: str, state: str | None, offset: int, limit: int) -> dict[str, Any]:
    queue = _queue(hub, name)
    if state is not None and state not in LISTED_STATES:
        raise ApiError(400, f"state must be one of {', '.join(LISTED_STATES)}, not {state!r}")
    if not 0 <= limit <= PAGE_MAX:
        raise ApiError(400, f"limit must be between 0 and {PAGE_MAX}")
    if offset < 0:
        raise ApiError(400, "offset must be 0 or more")
    stats = queue.stats()
    total = stats.total if state is None else int(getattr(stats, state))
    jobs = queue.list_jobs(state, limit=limit, offset=offset)
    return {"queue": name, "state": state, "offset": offset, "limit": limit, "total": total,
            "jobs": [job_dict(job, full=False) for job in jobs], "features": features(queue)}


def get_job(hub: Hub, name: str, job_id: str) -> dict[str, Any]:
    queue = _queue(hub, name)
    try:
        job = queue.get(job_id)
    except JobNotFoundError:
        raise ApiError(404, f"no job {job_id!r} in queue {name!r}") from None
    place = hub.places.of(queue, name, job)  # falsy for a job in no workflow: null
    return {"queue": name, "job": job_dict(job), "features": features(queue),
            "workflow": place.as_dict() if place else None}


def get_records(hub: Hub, name: str, job_id: str) -> dict[str, Any]:
    queue = _queue(hub, name)
    if not records.available(queue):
        raise ApiError(501, "this queue's backend cannot list raw log records")
    path, found, scanned = records.of_job(queue, job_id)
    return {"queue": name, "id": job_id, "log": path, "records_scanned": scanned,
            "records": found}


# -- changing ---------------------------------------------------------------

def _job_id(body: dict[str, Any], required: bool) -> str | None:
    value = body.get("id")
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value:
        raise ApiError(400, "'id' must be a non-empty string" + ("" if required else " or null"))
    return value


def _call(queue: Queue, method: str, *args: Any) -> Any:
    """A Queue method that older engines lack (`features` says whether it is there)."""
    found: Callable[..., Any] = getattr(queue, method)
    return found(*args)


def _need(queue: Queue, feature: str) -> None:
    if not features(queue)[feature]:
        raise ApiError(501, f"this queue's backend has no {feature.replace('_', '-')}")


def post_action(hub: Hub, name: str, action: str, body: dict[str, Any]) -> dict[str, Any]:
    """Carry out one change; the caller has checked the token, origin and mode."""
    queue = _queue(hub, name)
    unknown = set(body) - {"id"}
    if unknown:
        raise ApiError(400, f"unknown field {sorted(unknown)[0]!r}")
    try:
        if action == "requeue":
            return {"requeued": queue.requeue_dead(_job_id(body, False))}
        if action == "delete-dead":
            _need(queue, "delete_dead")
            return {"deleted": int(_call(queue, "delete_dead", _job_id(body, False)))}
        if action == "cancel":
            _need(queue, "cancel")
            return {"cancelled": bool(_call(queue, "cancel", _job_id(body, True)))}
        if action in ("pause", "resume"):
            _need(queue, "pause")
            _call(queue, action)
            return {"paused": bool(queue.stats().paused)}
        if action == "compact":
            _need(queue, "compaction")
            return {"compaction": dataclasses.asdict(queue.compact())}
    except JobNotFoundError as exc:
        raise ApiError(404, str(exc)) from None
    except (ValueError, TypeError) as exc:
        raise ApiError(400, str(exc)) from None
    raise ApiError(404, f"no action {action!r}")


def to_json(value: Any) -> str:
    """JSON text with <, > and & escaped too: even a body a browser misreads as HTML
    (an old one ignoring nosniff) holds no markup."""
    text = json.dumps(value, ensure_ascii=True, allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
