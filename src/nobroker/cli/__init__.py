"""The `nobroker` command line (being split into modules by command group)."""

from .jobs import UsageError, load_handler, main

__all__ = ["main", "load_handler", "UsageError"]
