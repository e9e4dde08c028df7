"""Makes kombu find the `nobroker://` transport: run at interpreter start by the
`nobroker-celery.pth` file that installing nobroker puts in site-packages.

kombu 5.x looks transports up in `kombu.transport.TRANSPORT_ALIASES` only (it
loads no entry point for them), so the alias has to be added by someone. This
module imports nothing but the standard library and never imports kombu: it
puts an import hook on `sys.meta_path` that waits for `kombu.transport` to be
imported by the application, adds the alias to it right after, and removes
itself. A process that never imports kombu pays one list append. Celery's
result backend needs none of this: Celery loads it from the
`celery.result_backends` entry point in nobroker's metadata.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from types import ModuleType
from typing import Any

ALIAS = "nobroker"
TRANSPORT = "nobroker.celery.transport:Transport"
_TARGET = "kombu.transport"


def register(module: ModuleType) -> None:
    """Add the alias to an imported `kombu.transport` (kept if someone set it already)."""
    aliases = getattr(module, "TRANSPORT_ALIASES", None)
    if isinstance(aliases, dict):
        aliases.setdefault(ALIAS, TRANSPORT)


class _RegisteringLoader(importlib.abc.Loader):
    """kombu.transport's own loader, then `register` on the module it made."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        created: ModuleType | None = self._inner.create_module(spec)
        return created

    def exec_module(self, module: ModuleType) -> None:
        self._inner.exec_module(module)
        register(module)

    def __getattr__(self, name: str) -> Any:  # get_resource_reader, is_package, ...
        return getattr(self._inner, name)


class _Finder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: asks the other finders for kombu.transport, once."""

    def find_spec(self, fullname: str, path: Any, target: Any = None
                  ) -> importlib.machinery.ModuleSpec | None:
        if fullname != _TARGET:
            return None
        sys.meta_path[:] = [f for f in sys.meta_path if f is not self]
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find is not None else None
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _RegisteringLoader(spec.loader)
                return spec
        return None


def install() -> None:
    """Register now if kombu.transport is loaded, else when it is."""
    if _TARGET in sys.modules:
        register(sys.modules[_TARGET])
    elif not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


install()
