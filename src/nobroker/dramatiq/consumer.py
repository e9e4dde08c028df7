"""Dramatiq's consumer over one nobroker queue: leases in, acks and dead letters out.

`__next__` hands Dramatiq one message: from the ones it leased last time, or
by leasing up to the prefetch's free room in one call. With nothing to lease
it blocks in `Queue.wait` (woken by a producer in any process, or when a
delayed message or a lease deadline comes due: no polling) for at most the
worker timeout, and returns None then, as Dramatiq expects. With the
prefetch full it waits for an ack instead.

Settling: Dramatiq's ack is nobroker's ack; its nack (the message failed
for good: Retries gave up, or its actor is unknown) is `Queue.nack(job,
dead=True)`: the job is dead at once, whatever attempts it has left, in
nobroker's dead-letter queue (`nobroker dlq`, `requeue-dead`). `requeue` (a
stopping worker's unstarted messages) gives them back untried
(`Queue.snooze(job, 0)`). A lease that runs out (its worker was killed) is
nobroker's expired lease: the message is delivered again after the queue's
backoff, until its delivery limit (broker.py).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from typing import Any

from dramatiq.broker import Consumer, MessageProxy
from dramatiq.message import Message

from ..errors import NobrokerError, NotLeasedError
from ..models import Job
from .leases import LeaseBook
from .messages import message_from

__all__ = ["NobrokerConsumer", "Delivery", "REQUEUED"]

log = logging.getLogger("nobroker.dramatiq")

# the last_error of a job a stopping worker gave back untried
REQUEUED = "given back unstarted by a stopping Dramatiq worker"


class Delivery(MessageProxy):
    """A message Dramatiq holds, with the id of the job whose lease it is."""

    def __init__(self, message: Message[Any], job_id: str) -> None:
        super().__init__(message)
        self.job_id = job_id
        self.kept_exception: BaseException | None = None  # see NobrokerBroker.join


class NobrokerConsumer(Consumer):
    """Iterates over one queue's messages (see the module docstring)."""

    def __init__(self, book: LeaseBook, prefetch: int, timeout: float,
                 dead_letters: list[Delivery] | None = None) -> None:
        self.book = book
        self.dead_letters = dead_letters  # where a test broker keeps what this nacks
        self.queue = book.queue
        self.prefetch = max(1, prefetch)
        self.timeout = timeout  # seconds
        self._ready: deque[Delivery] = deque()  # leased, not yet handed to Dramatiq

    def __next__(self) -> Delivery | None:
        deadline = time.monotonic() + self.timeout
        while True:
            if self._ready:
                return self._ready.popleft()
            self.book.settled.clear()
            room = self.prefetch - len(self.book)
            if room > 0 and self._lease(room):
                continue
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            if room > 0:
                self.queue.wait(left)
            else:
                self.book.settled.wait(left)

    def _lease(self, room: int) -> bool:
        jobs = self.queue.lease(room, visibility_timeout=self.book.visibility_timeout)
        for job in jobs:
            message = message_from(job.payload)
            if message is None:
                # Enqueued by something else (`nobroker enqueue` into a Dramatiq queue).
                log.error("job %s in %s is not a Dramatiq message: dead-lettered", job.id,
                          self.queue)
                self.queue.nack(job, error="not a Dramatiq message", dead=True)
                continue
            self.book.add(job)
            self._ready.append(Delivery(message, job.id))
        return bool(jobs)

    # -- settling -----------------------------------------------------------

    def ack(self, message: MessageProxy) -> None:
        job = self.book.take(_job_id(message))
        if job is None:
            return
        try:
            self.queue.ack(job)
        except NotLeasedError:
            log.warning("job %s in %s: its lease ran out before Dramatiq acked it; "
                        "another worker may have run it too (at-least-once)", job.id,
                        self.queue)

    def nack(self, message: MessageProxy) -> None:
        job = self.book.take(_job_id(message))
        if job is None:
            return
        exception = getattr(message, "_exception", None)
        error = f"dramatiq: {exception!r}" if exception is not None else "dramatiq: nacked"
        if self.dead_letters is not None and isinstance(message, Delivery):
            message.kept_exception = exception  # Dramatiq clears _exception after the nack
            self.dead_letters.append(message)
        try:
            self.queue.nack(job, error=error, dead=True)
        except NotLeasedError:
            log.warning("job %s in %s: its lease ran out before Dramatiq dead-lettered it",
                        job.id, self.queue)

    def requeue(self, messages: Any) -> None:
        for message in messages:
            self._give_back(self.book.take(_job_id(message)))

    def _give_back(self, job: Job | None) -> None:
        if job is None:
            return
        try:
            self.queue.snooze(job, 0.0, error=REQUEUED)
        except NotLeasedError:
            pass  # its lease ran out: it is someone else's now

    def close(self) -> None:
        """Give back the messages leased but never handed to Dramatiq."""
        while self._ready:
            self._give_back(self.book.take(self._ready.popleft().job_id))


def _job_id(message: MessageProxy) -> str:
    job_id = getattr(message, "job_id", None)
    if not isinstance(job_id, str):
        raise NobrokerError(f"{message!r} was not delivered by a nobroker consumer")
    return job_id
