"""Celery on nobroker: a kombu transport and a Celery result backend over `Queue`.

    broker_url = "nobroker:///var/lib/myapp/jobs"
    result_backend = "nobroker:///var/lib/myapp/jobs"

Both stand on nobroker's public `Queue` API only. kombu and Celery are imported
by `transport` and `backend` alone, which only kombu and Celery import (when
an application names the URL); the modules below them are stdlib-only, and
nothing in the core imports this subpackage. How the two names are found:
`nobroker://` as a kombu transport through the `.pth` hook (`hook`), the
result backend through Celery's `celery.result_backends` entry point.
See docs/CELERY.md.

Layers, top first: transport, backend (kombu/Celery) -> bindings, leases,
results, messages -> locations (URL and queue names) -> nobroker's Queue.
"""

from .locations import directory_from_url, location_from_url, queue_name_for
from .messages import MessageRefusedError

__all__ = ["MessageRefusedError", "directory_from_url", "location_from_url", "queue_name_for"]
