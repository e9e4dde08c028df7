"""The Django app `nobroker.django`: its system checks, Task.delay_on_commit through
Django's on_commit, and the autodiscovery of each installed app's `tasks` module."""

from __future__ import annotations

from django.apps import AppConfig


class NobrokerConfig(AppConfig):
    name = "nobroker.django"
    label = "nobroker"
    verbose_name = "nobroker"

    def ready(self) -> None:
        from django.db import transaction
        from django.utils.module_loading import autodiscover_modules

        from ..transactions import use_on_commit
        from . import checks  # noqa: F401  (registers the checks)

        use_on_commit(transaction.on_commit)
        # Each installed app's tasks.py, imported once Django is set up: its @q.task
        # functions register on the Queue objects it uses (`manage.py nobroker_work
        # --registered` serves them), as its django.tasks @task functions are declared.
        autodiscover_modules("tasks")
