"""A small, ordinary Celery application: the two nobroker URLs are its only nobroker.

The tests run it with `celery -A celery_app worker`; the queue directory comes
from NOBROKER_CELERY_DIR (or the whole URL, nobroker+postgresql://..., from
NOBROKER_CELERY_URL), the visibility timeout from NOBROKER_CELERY_VT, and
the tasks that must leave traces write them under NOBROKER_CELERY_TRACE.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Any

from celery import Celery, group
from celery.exceptions import Reject

DIRECTORY = os.environ.get("NOBROKER_CELERY_DIR", "/tmp/nobroker-celery-app")
TRACE = Path(os.environ.get("NOBROKER_CELERY_TRACE", DIRECTORY + "-trace"))
URL = os.environ.get("NOBROKER_CELERY_URL") or f"nobroker://{DIRECTORY}"

app = Celery("celery_app")
app.conf.update(
    broker_url=URL,
    result_backend=URL,
    broker_transport_options={"visibility_timeout": float(os.environ.get("NOBROKER_CELERY_VT",
                                                                        "30"))},
    task_default_queue="a",
    task_routes={"celery_app.mul": {"queue": "b"}},
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)


@app.task
def add(x: int, y: int) -> int:
    return x + y


@app.task
def mul(x: int, y: int) -> int:
    return x * y


@app.task
def tsum(numbers: list[int]) -> int:
    return sum(numbers)


@app.task
def boom(message: str) -> None:
    raise ValueError(message)


@app.task(bind=True, max_retries=5)
def flaky(self: Any, failures: int) -> int:
    """Fails `failures` times, retrying each time; returns how many retries it took."""
    if self.request.retries < failures:
        raise self.retry(exc=RuntimeError("not yet"), countdown=0.1)
    return int(self.request.retries)


def _trace(kind: str, key: str) -> None:
    folder = TRACE / kind
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{key}.{os.getpid()}.{uuid.uuid4().hex}").write_text(str(time.time()))


@app.task(acks_late=True)
def slow(key: str, seconds: float) -> str:
    """Runs `seconds` the first time it is started for `key`, at once afterwards."""
    first = not (TRACE / "started").exists() or not any(
        p.name.startswith(key + ".") for p in (TRACE / "started").iterdir())
    _trace("started", key)
    if first:
        time.sleep(seconds)
    _trace("done", key)
    return key


@app.task(acks_late=True)
def refuse(key: str) -> None:
    """Rejects its message without requeue (Celery's Reject): dead-lettered."""
    _trace("started", key)
    raise Reject(f"refused {key}", requeue=False)


@app.task(acks_late=True)
def record(key: str, seconds: float) -> str:
    """Leaves one trace per completed run."""
    time.sleep(seconds)
    _trace("done", key)
    return key


@app.task
def collect(keys: list[str]) -> int:
    """A chord callback that leaves one trace per run."""
    _trace("callback", "chord")
    return len(keys)


@app.task(bind=True)
def spread(self: Any, numbers: list[int], extra: int) -> None:
    """Replaces itself with a group (Task.replace keeps this task's id)."""
    raise self.replace(group(add.s(n, extra) for n in numbers))
