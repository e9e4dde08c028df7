"""The dashboard inside a Django site, for its staff.

    path("jobs/", include("nobroker.django.urls"))   # in the site's URLconf

The same page and JSON API as `nobroker dashboard` (nobroker.dashboard: its
api.py answers, its hub.py samples the queues), over the queues of one
NobrokerBackend (settings.NOBROKER_DASHBOARD_BACKEND, default "default"; a
directory, PostgreSQL, or memory://: the queues of the site's own process).
What changes is who may use it:

- Django's authentication instead of the dashboard's token: an anonymous
  visitor is sent to settings.LOGIN_URL, a signed-in user who is not active
  staff gets 403, on every URL (the page, its files, the API);
- a change (POST) also needs Django's CSRF token (`csrf_protect`, whatever
  MIDDLEWARE holds), which the page reads from its <meta> tag and sends as
  X-CSRFToken; its body is JSON, as the standalone dashboard's;
- the event stream is polled: one update per request, then the browser comes
  back in 2 s (`retry:`), so no request holds a server worker for long; the
  page knows (a `poll` event) and keeps its badge "live".

Every answer carries the standalone dashboard's Content-Security-Policy.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.middleware.csrf import get_token
from django.urls import reverse
from django.utils.html import escape
from django.views.decorators.csrf import csrf_protect

from ..dashboard import api, metrics, stream
from ..dashboard.api import to_json
from ..dashboard.handler import CSP, MAX_BODY, STATIC_TYPES, page_files
from ..dashboard.hub import Hub, UnknownQueue
from ..errors import NobrokerError

__all__ = ["action", "api_get", "events", "page", "static", "hub"]

View = Callable[..., HttpResponse]
_HUBS: dict[str, Hub] = {}
_LOCK = threading.Lock()
_FILES: dict[str, bytes] = {}


def hub() -> Hub:
    """The Hub of the dashboard's backend, opened and sampling from the first request."""
    from django.tasks import task_backends

    from .backend import NobrokerBackend
    from .database import database_url

    alias = getattr(settings, "NOBROKER_DASHBOARD_BACKEND", "default")
    with _LOCK:
        found = _HUBS.get(alias)
        if found is None:
            backend = task_backends[alias]
            if not isinstance(backend, NobrokerBackend):
                raise NobrokerError(f"TASKS[{alias!r}] is not a NobrokerBackend")
            location = backend.location
            if location is None and backend.database is not None:
                location = database_url(backend.database, backend.schema)
            found = Hub(str(location), readonly=False, queues=backend.queue_names)
            found.start()
            _HUBS[alias] = found
        return found


def _staff(*methods: str) -> Callable[[View], View]:
    """Active staff only: others are sent to log in (anonymous) or refused (403); and
    only `methods` (405 for the rest)."""
    return lambda view: _checked(view, methods)


def _checked(view: View, methods: tuple[str, ...]) -> View:
    def checked(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if request.method not in methods:
            return _error(405, f"method {request.method} is not allowed")
        user = getattr(request, "user", None)
        if user is None or not user.is_authenticated:
            return redirect_to_login(request.get_full_path())
        if not (user.is_active and user.is_staff):
            return _error(403, "the jobs dashboard is for staff users")
        try:
            response = view(request, *args, **kwargs)
        except api.ApiError as exc:
            response = _error(exc.status, exc.reason)
        except UnknownQueue as exc:
            response = _error(404, str(exc))
        except NobrokerError as exc:  # the queue said no: locked, damaged, closed
            response = _error(409, str(exc))
        response["Content-Security-Policy"] = CSP
        response["X-Content-Type-Options"] = "nosniff"
        return response
    checked.__name__ = checked.__qualname__ = view.__name__
    checked.__doc__ = view.__doc__
    return checked


def _error(status: int, reason: str) -> JsonResponse:
    return JsonResponse({"error": reason}, status=status)


def _files() -> dict[str, bytes]:
    if not _FILES:
        _FILES.update(page_files())
    return _FILES


@_staff("GET", "HEAD")
def page(request: HttpRequest, **route: str) -> HttpResponse:
    """The single page, for every view of it (`/`, `q/NAME`, `q/NAME/job/ID`)."""
    base = reverse("nobroker:page")
    html = _files()["index.html"].decode()
    html = html.replace('"/static/', f'"{escape(base)}static/').replace(
        'href="/"', f'href="{escape(base)}"')
    tags = (f'<meta name="nobroker-base" content="{escape(base)}">\n'
            f'<meta name="nobroker-csrf" content="{escape(get_token(request))}">\n')
    html = html.replace("<title>", tags + "<title>", 1)
    response = HttpResponse(html, content_type=STATIC_TYPES["index.html"])
    response["Cache-Control"] = "no-store"
    return response


@_staff("GET", "HEAD")
def static(request: HttpRequest, name: str) -> HttpResponse:
    if name not in STATIC_TYPES:
        return _error(404, f"no file {name!r}")
    response = HttpResponse(_files()[name], content_type=STATIC_TYPES[name])
    versioned = "v" in request.GET  # the URL changes with the bytes
    response["Cache-Control"] = "private, max-age=31536000, immutable" if versioned \
        else "no-cache"
    return response


def _number(request: HttpRequest, key: str, default: float) -> float:
    try:
        return float(request.GET.get(key, default))
    except ValueError:
        raise api.ApiError(400, f"{key} must be a number") from None


@_staff("GET", "HEAD")
def api_get(request: HttpRequest, what: str, name: str = "", job_id: str = "") -> HttpResponse:
    """The API's reads, as nobroker.dashboard.api answers them."""
    found = hub()
    answers: dict[str, Callable[[], Any]] = {
        "overview": lambda: api.get_overview(found),
        "queue": lambda: api.get_queue(found, name),
        "series": lambda: api.get_series(found, name, _number(request, "step", 10.0)),
        "jobs": lambda: api.get_jobs(found, name, request.GET.get("state") or None,
                                     int(_number(request, "offset", 0)),
                                     int(_number(request, "limit", api.PAGE_DEFAULT))),
        "job": lambda: api.get_job(found, name, job_id),
        "records": lambda: api.get_records(found, name, job_id),
    }
    if what == "metrics":
        return HttpResponse(metrics.render(found), content_type=metrics.CONTENT_TYPE)
    return HttpResponse(to_json(answers[what]()), content_type="application/json")


@_staff("GET", "HEAD")
def events(request: HttpRequest) -> HttpResponse:
    """A polled stream (dashboard/stream.py): one update, then the stream ends and the
    browser's EventSource comes back after `retry`, so no request holds a worker."""
    body = stream.polled(hub(), request.GET.get("queue") or "")  # UnknownQueue: 404
    response = HttpResponse(body, content_type="text/event-stream; charset=utf-8")
    response["Cache-Control"] = "no-store"
    return response


@csrf_protect
@_staff("POST")
def action(request: HttpRequest, name: str, verb: str) -> HttpResponse:
    """A change (requeue, cancel, pause, ...): POST, staff, Django's CSRF token, JSON."""
    if request.content_type != "application/json":
        return _error(415, "a change must be sent as application/json")
    if len(request.body) > MAX_BODY:
        return _error(413, f"the body is larger than {MAX_BODY} bytes")
    try:
        body = json.loads(request.body or b"{}")
    except ValueError as exc:
        return _error(400, f"the body is not JSON: {exc}")
    if not isinstance(body, dict):
        return _error(400, "the body must be a JSON object")
    return HttpResponse(to_json(api.post_action(hub(), name, verb, body)),
                        content_type="application/json")
