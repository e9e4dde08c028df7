"""nobroker for Django: a `django.tasks` backend with no server, and its worker.

    INSTALLED_APPS = [..., "nobroker.django"]
    TASKS = {"default": {"BACKEND": "nobroker.django.NobrokerBackend",
                         "QUEUES": ["default", "emails"],
                         "OPTIONS": {"location": BASE_DIR / "jobs"}}}

then `python manage.py nobroker_work`. Django (6.0 or newer) is imported only
by this subpackage, and only when it is used: `import nobroker` never imports
it. Modules: `backend` (NobrokerBackend: enqueue, results), `records` (a job
as Django's TaskResult, and the attempt history kept in the job), `running`
(what a worker runs for each job), `checks` (system checks),
`management/commands/nobroker_work.py` (the worker command).
"""

from __future__ import annotations

from typing import Any

__all__ = ["NobrokerBackend"]


def __getattr__(name: str) -> Any:
    # Lazy, so that Django's app loading can import this package before settings
    # are read, and `import nobroker.django` alone imports no Django.
    if name == "NobrokerBackend":
        from .backend import NobrokerBackend
        return NobrokerBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
