"""System checks: each nobroker backend's settings, read before a worker starts."""

from __future__ import annotations

from typing import Any

from django.core import checks
from django.core.exceptions import ImproperlyConfigured

from .. import validation


@checks.register(checks.Tags.compatibility)
def check_backends(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """Queue names nobroker can hold, and a location (or a PostgreSQL database alias),
    for every NobrokerBackend."""
    from django.tasks import task_backends

    from .backend import NobrokerBackend
    from .database import connection_of

    messages: list[checks.CheckMessage] = []
    for backend in task_backends.all():
        if not isinstance(backend, NobrokerBackend):
            continue
        where = f"TASKS[{backend.alias!r}]"
        if backend.database is not None:
            try:
                connection_of(backend.database)
            except ImproperlyConfigured as exc:
                messages.append(checks.Error(f"{where}: {exc}", id="nobroker.E003"))
        elif backend.location is None:
            messages.append(checks.Error(
                f"{where} has no OPTIONS['location']",
                hint="a directory for the queue files, a postgresql:// URL or 'memory://' "
                     "(or OPTIONS['database'], a PostgreSQL alias of DATABASES)",
                id="nobroker.E001"))
        for name in backend.queue_names:
            try:
                validation.queue_name(name)
            except ValueError as exc:
                messages.append(checks.Error(f"{where}['QUEUES']: {exc}",
                                             id="nobroker.E002"))
    return messages
