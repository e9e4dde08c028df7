"""Handlers to point `nobroker work` at, from a clone of the repository.

    python -m nobroker --dir /tmp/q enqueue '{"name": "Ada"}'
    python -m nobroker --dir /tmp/q work examples.handlers:hello --idle-timeout 1

A handler is a plain function that takes a `nobroker.Job`. Returning acks
the job; raising nacks it, and the queue retries it after a backoff, or
moves it to the dead-letter queue once it has used its attempts. Handlers
must be idempotent: a job can be delivered more than once (for example
when a worker is killed after the work but before the ack).

These print to stdout because they are examples; the library itself
only logs.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from nobroker import Job

__all__ = ["echo", "hello", "slow", "flaky", "broken", "sleepy"]


def _field(job: Job, key: str, default: Any) -> Any:
    return job.payload.get(key, default) if isinstance(job.payload, dict) else default


def echo(job: Job) -> None:
    """Prints the job's payload and succeeds."""
    print(f"job {job.id} (attempt {job.attempts}): {json.dumps(job.payload)}", flush=True)


def hello(job: Job) -> None:
    """Greets and succeeds at once."""
    print(f"hello, {_field(job, 'name', 'world')} (job {job.id})", flush=True)


def slow(job: Job) -> None:
    """Works for `seconds` (default 30): the one to kill mid-job.

    It announces itself on stdout and, if the payload names a `started`
    file, writes its pid there, so a demo or test can wait for it instead
    of guessing. A `kill -9` now leaves the job leased; once the lease runs
    out it is delivered again. A SIGTERM lets it finish first.
    """
    seconds = float(_field(job, "seconds", 30))
    print(f"slow job {job.id}: attempt {job.attempts}, working for {seconds:g}s "
          f"in pid {os.getpid()}", flush=True)
    marker = _field(job, "started", None)
    if marker:
        with open(marker, "w", encoding="ascii") as handle:
            handle.write(str(os.getpid()))
    time.sleep(seconds)
    print(f"slow job {job.id}: done", flush=True)


def flaky(job: Job) -> None:
    """Fails until its attempt number reaches `succeed_on` (default 3)."""
    succeed_on = int(_field(job, "succeed_on", 3))
    if job.attempts < succeed_on:
        raise ConnectionError(f"upstream timed out (attempt {job.attempts} of {succeed_on} "
                              f"needed)")
    print(f"flaky job {job.id}: worked on attempt {job.attempts}", flush=True)


def broken(job: Job) -> None:
    """Always fails: its jobs end in the dead-letter queue."""
    raise ValueError(f"cannot handle payload {job.payload!r}")


def sleepy(job: Job) -> None:
    """Sleeps `seconds` (default 0.5) quietly: run several at once with --concurrency."""
    time.sleep(float(_field(job, "seconds", 0.5)))
