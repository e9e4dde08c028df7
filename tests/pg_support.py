"""What the PostgreSQL tests share: the server's URL, skipping without one, a fresh schema.

The server comes from `python make.py test-postgres` (tools/pg_cluster.py),
which sets NOBROKER_TEST_POSTGRES_URL; without it (or without psycopg) every
PostgreSQL test is skipped, and `make.py test` says so in its summary.

`open_queue(url, name, **options)` is how the tests open a queue on
PostgreSQL. Until the Queue facade takes URLs (the seam issue), it is a thin
stand-in that checks arguments with the file Queue's own helpers and calls
the backend; then it becomes `Queue(url, name, **options)`.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import time
import unittest
import uuid
from collections.abc import Callable
from typing import Any

import support  # noqa: F401  (puts src/ on sys.path)

URL_ENV = "NOBROKER_TEST_POSTGRES_URL"
PG_CTL_ENV = "NOBROKER_TEST_PG_CTL"
URL = os.environ.get(URL_ENV, "")
HAVE_DRIVER = importlib.util.find_spec("psycopg") is not None
SKIP_REASON = ("PostgreSQL suite skipped: no server (run `python make.py test-postgres`)"
               if not URL else
               "PostgreSQL suite skipped: psycopg is not installed "
               "(run `python make.py test-postgres`)")
ENABLED = bool(URL) and HAVE_DRIVER


def needs_postgres(cls: type) -> type:
    return unittest.skipUnless(ENABLED, SKIP_REASON)(cls)


def fresh_schema_url() -> str:
    """The test server's URL with a schema of its own, so tests never share tables."""
    schema = "t_" + uuid.uuid4().hex[:12]
    joiner = "&" if "?" in URL else "?"
    return f"{URL}{joiner}schema={schema}"


def drop_schema(url: str) -> None:
    import psycopg

    from nobroker.postgres.url import parse

    target = parse(url)
    with psycopg.connect(target.conninfo, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{target.schema}" CASCADE'.encode())


def restart_server() -> None:
    """`pg_ctl restart -m immediate`: the server dies without a checkpoint and comes back."""
    pg_ctl = json.loads(os.environ[PG_CTL_ENV])
    subprocess.run([*pg_ctl, "-m", "immediate", "-w", "restart"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


def open_queue(url: str, name: str = "default", **options: Any) -> Any:
    if _queue_takes_urls():
        from nobroker import Queue

        return Queue(url, name, **options)
    from interim_queue import InterimQueue

    return InterimQueue(url, name, **options)


def _queue_takes_urls() -> bool:
    import inspect

    from nobroker import queue

    return "postgres" in inspect.getsource(queue)
