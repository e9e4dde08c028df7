"""Which queue a command means, and opening it the way the command needs.

--url, then --dir, then $NOBROKER_URL, then $NOBROKER_DIR, then ./jobs; a
directory is made absolute, a postgresql:// URL passed as it is. No
command but `enqueue` and `work` creates a queue that is not there
(`create=True`): the others fail with one line if it is missing.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from ..backend import is_memory_url, is_postgres_url
from ..errors import NobrokerError
from ..file.opening import queue_exists
from ..queue import Queue

DEFAULT_DIR = "./jobs"
DIR_ENV = "NOBROKER_DIR"
URL_ENV = "NOBROKER_URL"  # a PostgreSQL URL; wins over $NOBROKER_DIR


def queue_location(args: argparse.Namespace) -> str:
    """The queue's directory, or its PostgreSQL URL (--url, --dir, $NOBROKER_URL)."""
    chosen = (getattr(args, "url", None) or getattr(args, "dir", None)
              or os.environ.get(URL_ENV) or os.environ.get(DIR_ENV) or DEFAULT_DIR)
    if is_memory_url(chosen):
        raise NobrokerError(f"{chosen}: a memory:// queue lives inside one process; "
                            f"no command can reach it")
    return chosen if is_postgres_url(chosen) else os.path.abspath(chosen)


def queue_name(args: argparse.Namespace) -> str:
    return getattr(args, "queue", None) or "default"


def require_queue(args: argparse.Namespace) -> tuple[str, str]:
    """The queue's directory and name, or a NobrokerError if no such queue exists."""
    directory, name = queue_location(args), queue_name(args)
    if is_postgres_url(directory):
        return directory, name  # the server says whether it is there
    if not os.path.isdir(directory):
        raise NobrokerError(f"no queue directory at {directory} (set --dir or ${DIR_ENV})")
    if not queue_exists(directory, name):
        raise NobrokerError(f"no queue named {name!r} in {directory}")
    return directory, name


def open_queue(args: argparse.Namespace, *, readonly: bool = False, create: bool = False,
               **options: Any) -> Queue:
    if create:
        directory, name = queue_location(args), queue_name(args)
    else:
        directory, name = require_queue(args)
    return Queue(directory, name, readonly=readonly, lock_timeout=args.lock_timeout, **options)
