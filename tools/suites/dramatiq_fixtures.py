"""Fixtures that give Dramatiq's own tests a NobrokerBroker. dramatiq_suite.py copies this
file into the unpacked suite twice, as tests/conftest.py and as tests/common.py (what the
test files import from `.common`); only pytest in the Dramatiq venv loads it.

Dramatiq's tests take their broker from the `stub_broker` fixture (their worker from
`stub_worker`, their result backend from `result_backend`): each is replaced by its
nobroker counterpart on a fresh directory, built as Dramatiq's conftest.py builds the
stub ones. The broker keeps the messages it dead-letters (fail_fast_default=True), as
StubBroker does, so that `join` raises their exceptions. Services this run has none of
(Redis, RabbitMQ, memcached) are skipped.
"""

from __future__ import annotations

import logging
import platform
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import dramatiq
import pytest
from dramatiq import Worker
from dramatiq.rate_limits.backends import StubBackend as StubRateLimiterBackend

from nobroker.dramatiq import NobrokerBroker, NobrokerResultBackend

logging.basicConfig(level=logging.INFO,
                    format="[%(asctime)s] [%(threadName)s] [%(name)s] [%(levelname)s] %(message)s")

# -- tests/common.py ---------------------------------------------------------


@contextmanager
def worker(*args: Any, **kwargs: Any) -> Iterator[Worker]:
    started = Worker(*args, **kwargs)
    try:
        started.start()
        yield started
    finally:
        started.stop()


skip_on_windows = pytest.mark.skipif(platform.system() == "Windows",
                                     reason="test skipped on Windows")
skip_on_pypy = pytest.mark.skipif(platform.python_implementation() == "PyPy",
                                  reason="Time limits are not supported under PyPy.")
RABBITMQ_CREDENTIALS = None  # no RabbitMQ here (and no pika)

# -- tests/conftest.py -------------------------------------------------------


@pytest.fixture()
def stub_broker(tmp_path: Path) -> Iterator[NobrokerBroker]:
    broker = NobrokerBroker(tmp_path / "jobs", visibility_timeout=5.0, fail_fast_default=True)
    broker.emit_after("process_boot")
    dramatiq.set_broker(broker)
    yield broker
    broker.flush_all()
    broker.close()


@pytest.fixture()
def stub_worker(stub_broker: NobrokerBroker) -> Iterator[Worker]:
    with worker(stub_broker, worker_timeout=100, worker_threads=32) as started:
        yield started


@pytest.fixture()
def result_backend(tmp_path: Path) -> Iterator[NobrokerResultBackend]:
    backend = NobrokerResultBackend(tmp_path / "results")
    yield backend
    backend.close()


@pytest.fixture()
def rate_limiter_backend() -> StubRateLimiterBackend:
    return StubRateLimiterBackend()


@pytest.fixture()
def redis_result_backend() -> None:
    pytest.skip("needs a Redis server")


@pytest.fixture()
def info_logging() -> Iterator[None]:
    logger = logging.getLogger()
    logger.setLevel(logging.INFO)
    yield
    logger.setLevel(logging.DEBUG)
