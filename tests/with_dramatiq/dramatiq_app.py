"""A small, ordinary Dramatiq application: its broker lines are its only nobroker.

The tests run it with `dramatiq dramatiq_app`; the queue directory comes from
NOBROKER_DRAMATIQ_DIR, the visibility timeout from NOBROKER_DRAMATIQ_VT, and
the actors that must leave traces write them under NOBROKER_DRAMATIQ_TRACE.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import dramatiq
from dramatiq.middleware import CurrentMessage
from dramatiq.results import Results

from nobroker.dramatiq import NobrokerBroker, NobrokerResultBackend

DIRECTORY = os.environ.get("NOBROKER_DRAMATIQ_DIR", "/tmp/nobroker-dramatiq-app")
TRACE = Path(os.environ.get("NOBROKER_DRAMATIQ_TRACE", DIRECTORY + "-trace"))

broker = NobrokerBroker(DIRECTORY,
                        visibility_timeout=float(os.environ.get("NOBROKER_DRAMATIQ_VT", "30")))
broker.add_middleware(Results(backend=NobrokerResultBackend(DIRECTORY)))
broker.add_middleware(CurrentMessage())
dramatiq.set_broker(broker)


def _trace(kind: str, key: str) -> None:
    folder = TRACE / kind
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{key}.{os.getpid()}.{uuid.uuid4().hex}").write_text(str(time.time()))


@dramatiq.actor(store_results=True)
def add(x: int, y: int) -> int:
    return x + y


@dramatiq.actor(store_results=True, max_retries=5, min_backoff=50, max_backoff=100)
def flaky(failures: int) -> int:
    """Fails `failures` times (Dramatiq's Retries re-enqueues it), then returns the retries."""
    message = CurrentMessage.get_current_message()
    assert message is not None
    retries = int(message.options.get("retries", 0))
    if retries < failures:
        raise RuntimeError("not yet")
    return retries


@dramatiq.actor(max_retries=0)
def boom(text: str) -> None:
    raise ValueError(text)


@dramatiq.actor(store_results=True)
def stamp(key: str) -> float:
    """Leaves a trace and returns when it ran."""
    _trace("done", key)
    return time.time()


@dramatiq.actor(queue_name="b.slow", store_results=True, max_retries=0)
def slow(key: str, seconds: float) -> str:
    """Runs `seconds` the first time it is started for `key`, at once afterwards."""
    started = TRACE / "started"
    first = not started.exists() or not any(p.name.startswith(key + ".")
                                            for p in started.iterdir())
    _trace("started", key)
    if first:
        time.sleep(seconds)
    _trace("done", key)
    return key


@dramatiq.actor(store_results=True, max_retries=0, time_limit=120_000)
def record(key: str, seconds: float) -> str:
    """Leaves one trace per completed run."""
    time.sleep(seconds)
    _trace("done", key)
    return key


@dramatiq.actor(priority=0)
def urgent(key: str) -> None:
    _trace("order", key)


@dramatiq.actor(priority=100)
def later(key: str) -> None:
    _trace("order", key)
