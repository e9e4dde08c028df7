"""Opening the backend a location names: a directory, a PostgreSQL URL, or memory://.

The one place that knows which backend a location means (as urllib's opener
picks a handler by a URL's scheme):

- `postgresql://...` or `postgres://...`: the PostgreSQL backend
  (nobroker.postgres, and with it psycopg);
- `memory://NAME`: the in-memory backend (nobroker.memory): handles of one
  process on the same NAME share one queue set, as handles on one directory do;
- anything else is a directory: the file log (nobroker.file).

Each backend is imported only when a location names it, so that opening a
directory never imports psycopg, and `memory://` imports neither engine.
The Queue's directory-only arguments (`auto_compact`, `allow_network_fs`)
are accepted and ignored by the other backends, as the Queue documents;
any other option a backend does not take is a TypeError.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from .backend import Backend, Settings, is_memory_url, is_postgres_url
from .errors import NobrokerError

__all__ = ["open_backend", "postgres_package", "DIRECTORY_ONLY"]

# Queue arguments that only a directory has; other backends ignore them.
DIRECTORY_ONLY = frozenset({"auto_compact", "allow_network_fs"})


def open_backend(location: str | os.PathLike[str], name: str = "default",
                 settings: Settings | None = None, **options: Any) -> Backend:
    """The backend of queue `name` at `location`, opened (created unless read-only).

    `settings` are the Queue's (checked by it; default: Settings()); `options`
    the backend's own: FileOptions fields for a directory (auto_compact, and
    the test hooks such as fs= and checkpoints=), none for the others.
    """
    where = os.fspath(location)
    chosen = settings if settings is not None else Settings()
    if is_memory_url(where):
        _directory_options_only(where, options)
        from .memory import MemoryBackend
        return MemoryBackend(where, name, chosen)
    if is_postgres_url(where):
        _directory_options_only(where, options)
        opened: Backend = postgres_package().open_backend(where, name, chosen)
        return opened
    from .file.backend import FileBackend, FileOptions
    return FileBackend(where, name, chosen, FileOptions(**options))


def postgres_package() -> ModuleType:
    """`nobroker.postgres`, imported on first use; without its driver, an error
    that names the pip extra."""
    try:
        return importlib.import_module("nobroker.postgres")
    except ModuleNotFoundError as exc:
        if exc.name not in ("nobroker.postgres", "psycopg"):
            raise
        raise NobrokerError('a postgresql:// queue needs the PostgreSQL backend: '
                            'pip install "nobroker[postgres]"') from None


def _directory_options_only(location: str, options: Mapping[str, Any]) -> None:
    """Refuse options a backend other than the file log would silently drop."""
    unknown = sorted(set(options) - DIRECTORY_ONLY)
    if unknown:
        kind = location.partition("://")[0]
        raise TypeError(f"a {kind}:// queue takes no option {', '.join(unknown)}")
