"""The Django app `nobroker.django`: its system checks and its management command."""

from __future__ import annotations

from django.apps import AppConfig


class NobrokerConfig(AppConfig):
    name = "nobroker.django"
    label = "nobroker"
    verbose_name = "nobroker"

    def ready(self) -> None:
        from . import checks  # noqa: F401  (registers the checks)
