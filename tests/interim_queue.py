"""A stand-in for `Queue(url)` until the Queue facade takes PostgreSQL URLs.

It checks every argument with the file Queue's own helpers, then calls the
backend, as the facade will; delete this file when the seam lands.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import support  # noqa: F401

from nobroker.backend import Settings
from nobroker.backoff import BackoffPolicy
from nobroker.errors import QueueClosedError, SerializationError
from nobroker.file.records import check_id, check_number, encode_payload
from nobroker.models import CompactionResult, Job, JobState, QueueStats
from nobroker.postgres import open_backend
from nobroker.queue import _INT_LIMIT, MAX_ERROR_LENGTH, _check_int


class InterimQueue:
    def __init__(self, url: str, name: str = "default", *, fsync: bool = True,
                 visibility_timeout: float = 30.0, max_attempts: int = 5,
                 backoff: BackoffPolicy | None = None, lock_timeout: float = 10.0,
                 key_retention: float = 86400.0, auto_compact: float | None = 0.5,
                 readonly: bool = False, clock: Callable[[], float] | None = None,
                 result_ttl: float = 86400.0) -> None:
        self.visibility_timeout = check_number("visibility_timeout", visibility_timeout,
                                               minimum=0.001)
        self.max_attempts = _check_int("max_attempts", max_attempts, 1, _INT_LIMIT)
        check_number("lock_timeout", lock_timeout, minimum=0)
        check_number("key_retention", key_retention, minimum=0)
        if auto_compact is not None:
            check_number("auto_compact", auto_compact, minimum=0)
            if not 0 < auto_compact < 1:
                raise ValueError("auto_compact")
        self.url, self.name = url, name
        self.readonly = readonly
        self.lock_timeout = lock_timeout
        self._closed = False
        self._b = open_backend(url, name, Settings(
            visibility_timeout=self.visibility_timeout, max_attempts=self.max_attempts,
            backoff=backoff or BackoffPolicy(), key_retention=key_retention,
            result_ttl=result_ttl, lock_timeout=lock_timeout, fsync=fsync,
            readonly=readonly, clock=clock))
        self.backend = self._b
        self.directory = self._b.location  # what the Worker logs

    def _live(self) -> Any:
        if self._closed:
            raise QueueClosedError("closed")
        return self._b

    @staticmethod
    def _encode(payload: Any, index: int | None = None) -> str:
        try:
            return encode_payload(payload)
        except ValueError as exc:
            raise SerializationError(f"{index}: {exc}") from None

    def _options(self, priority: int, delay: float,
                 max_attempts: int | None) -> tuple[int, float, int]:
        return (_check_int("priority", priority, -_INT_LIMIT, _INT_LIMIT),
                check_number("delay", delay, minimum=0),
                self.max_attempts if max_attempts is None
                else _check_int("max_attempts", max_attempts, 1, _INT_LIMIT))

    def enqueue(self, payload: Any, *, priority: int = 0, delay: float = 0.0,
                max_attempts: int | None = None, job_id: str | None = None) -> Job:
        text = self._encode(payload)
        pr, de, ma = self._options(priority, delay, max_attempts)
        key = check_id(job_id) if job_id is not None else None
        return self._live().enqueue(text, payload, priority=pr, delay=de, max_attempts=ma,
                                    job_id=key)  # type: ignore[no-any-return]

    def enqueue_many(self, payloads: Iterable[Any], *, priority: int = 0, delay: float = 0.0,
                     max_attempts: int | None = None) -> list[Job]:
        items = list(payloads)
        pr, de, ma = self._options(priority, delay, max_attempts)
        texts = [self._encode(p, i) for i, p in enumerate(items)]
        b = self._live()
        return b.enqueue_many(texts, items, priority=pr, delay=de,
                              max_attempts=ma) if items else []

    def _vt(self, vt: float | None) -> float:
        return self.visibility_timeout if vt is None else check_number(
            "visibility_timeout", vt, minimum=0.001)

    def lease(self, count: int = 1, *, visibility_timeout: float | None = None) -> list[Job]:
        count = _check_int("count", count, 1)
        return self._live().lease(count, self._vt(visibility_timeout))  # type: ignore

    def lease_one(self, *, visibility_timeout: float | None = None) -> Job | None:
        jobs = self.lease(1, visibility_timeout=visibility_timeout)
        return jobs[0] if jobs else None

    def ack(self, job: Job, *, result: Any = None, result_ttl: float | None = None) -> None:
        text = None if result is None else self._encode(result)
        self._live().ack(job, text, result_ttl)

    def ack_many(self, jobs: list[Job]) -> None:
        self._live().ack_many(jobs)

    def ack_and_lease(self, job: Job, *, visibility_timeout: float | None = None
                      ) -> Job | None:
        return self._live().ack_and_lease(job, self._vt(visibility_timeout))  # type: ignore

    def nack(self, job: Job, *, error: str | None = None, delay: float | None = None) -> Job:
        if error is not None:
            error = str(error)[:MAX_ERROR_LENGTH]
        wait = None if delay is None else check_number("delay", delay, minimum=0)
        return self._live().nack(job, error, wait)  # type: ignore[no-any-return]

    def extend(self, job: Job, seconds: float) -> Job:
        seconds = check_number("seconds", seconds, minimum=0.001)
        return self._live().extend(job, seconds)  # type: ignore[no-any-return]

    def wait(self, timeout: float) -> bool:
        return self._live().wait(check_number("timeout", timeout, minimum=0))  # type: ignore

    def result(self, job_id: str, timeout: float | None = None) -> Job | None:
        return self._live().wait_finished(job_id, timeout)  # type: ignore[no-any-return]

    def cancel(self, job_id: str) -> bool:
        return self._live().cancel(job_id)  # type: ignore[no-any-return]

    def pause(self) -> None:
        self._live().set_paused(True)

    def resume(self) -> None:
        self._live().set_paused(False)

    def requeue_dead(self, job_id: str | None = None) -> int:
        return self._live().requeue_dead(job_id)  # type: ignore[no-any-return]

    def purge(self) -> int:
        return self._live().purge()  # type: ignore[no-any-return]

    def delete_dead(self, job_id: str | None = None) -> int:
        return self._live().delete_dead(job_id)  # type: ignore[no-any-return]

    def get(self, job_id: str) -> Job:
        return self._live().get(job_id)  # type: ignore[no-any-return]

    def stats(self) -> QueueStats:
        return self._live().stats()  # type: ignore[no-any-return]

    def list_jobs(self, state: JobState | str | None = None, *,
                  limit: int | None = None) -> list[Job]:
        wanted = JobState(state) if state is not None else None
        if wanted is JobState.DONE:
            raise ValueError("finished jobs are not listed")
        if limit is not None:
            limit = _check_int("limit", limit, 0)
        return self._live().list_jobs(wanted, limit)  # type: ignore[no-any-return]

    def dlq(self, *, limit: int | None = None) -> list[Job]:
        return self.list_jobs(JobState.DEAD, limit=limit)

    def compact(self) -> CompactionResult:
        return self._live().compact()  # type: ignore[no-any-return]

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._b.close()

    def __enter__(self) -> InterimQueue:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Queue({self._b.location!r}, name={self.name!r})"

