"""What the page's event stream (`/api/events`) sends, in either of its two forms.

The standalone dashboard holds the stream open and sends an `update` whenever
the hub samples a change. A dashboard mounted in a web framework (Django) must
not hold a server worker per open page, so it sends a *polled* stream: a
`poll` event, one `update`, then the response ends and the browser's
EventSource comes back after `retry`. The `poll` event tells the page that the
end is expected, so its badge stays "live" while each poll brings an update.
"""

from __future__ import annotations

from typing import Any, Final

from ..errors import NobrokerError
from . import api
from .hub import Hub

__all__ = ["RETRY_MS", "polled", "update"]

RETRY_MS: Final = 2000  # the browser's wait before it reconnects


def update(hub: Hub, name: str | None) -> dict[str, Any]:
    """The `update` event's data: the overview, and the named queue's page if any
    (an error reading the queue goes into the event, not the stream)."""
    event: dict[str, Any] = {"overview": api.get_overview(hub)}
    if name:
        try:
            event["queue"] = api.get_queue(hub, name)
            event["series"] = hub.series(name, 10.0)
        except (NobrokerError, api.ApiError) as exc:
            event["error"] = str(exc)
    return event


def polled(hub: Hub, name: str | None) -> str:
    """A whole polled stream: `retry`, `poll`, one `update`. UnknownQueue for a
    queue the hub does not know, before anything is sent."""
    if name:
        hub.queue(name)
    data = api.to_json(update(hub, name))
    return f"retry: {RETRY_MS}\n\nevent: poll\ndata: {{}}\n\nevent: update\ndata: {data}\n\n"
