"""`NobrokerResultBackend`: Dramatiq's Results middleware on a nobroker queue.

    broker.add_middleware(Results(backend=NobrokerResultBackend("/var/lib/myapp/jobs")))

The results live in one queue of the location, "dramatiq-results" (no
Dramatiq queue can land on it: names.py). A result is a keyed job: storing it
enqueues `{"value", "ttl"}` under the message's result key, which is atomic
and write-once (a second store of one key writes nothing: the first result
of a redelivered message wins). The stored job is then settled: leased and
acked with its own payload as its result, kept for the result's ttl
(Dramatiq's `result_ttl`) and then forgotten. Whoever stores or waits settles
every pending value, so a writer killed between its enqueue and its ack
leaves nothing unsettled for long; a value reads from the moment it is
enqueued.

`get_result(block=True)` blocks in `Queue.wait` on the results queue (a store
in any process wakes it), re-reading at most once a second: no polling
backoff as Dramatiq's default. JSON only, as the broker.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from dramatiq.encoder import Encoder
from dramatiq.results.backend import DEFAULT_TIMEOUT, Missing, ResultBackend
from dramatiq.results.errors import ResultMissing, ResultTimeout

from ..queue import Queue
from ..stored_values import read, settle
from .messages import check_json_encoder
from .names import RESULTS_QUEUE

__all__ = ["NobrokerResultBackend"]

_WAIT_SLICE = 1.0


class NobrokerResultBackend(ResultBackend):
    """Dramatiq results in the queue "dramatiq-results" at `location` (a directory or
    a postgresql:// URL); `queue_options` go to that `Queue`."""

    def __init__(self, location: str | os.PathLike[str], *,
                 namespace: str = "dramatiq-results", encoder: Encoder | None = None,
                 use_namespace_prefix_keys: bool = False, **queue_options: Any) -> None:
        super().__init__(namespace=namespace, encoder=encoder,
                         use_namespace_prefix_keys=use_namespace_prefix_keys)
        check_json_encoder(self.encoder)
        self.location = os.fspath(location)
        self.queue_options = queue_options
        self._queue: Queue | None = None

    @property
    def queue(self) -> Queue:
        """The results queue, opened on first use."""
        if self._queue is None:
            self._queue = Queue(self.location, RESULTS_QUEUE, **self.queue_options)
        return self._queue

    # -- Dramatiq's storage interface ---------------------------------------

    def _store(self, message_key: str, result: Any, ttl: int) -> None:
        """Store `result` (a JSON value) under `message_key` for `ttl` milliseconds,
        unless the key holds one already. Durable when it returns."""
        value = json.loads(self.encoder.encode(result))  # through a JSONEncoder subclass too
        self.queue.enqueue({"value": value, "ttl": ttl / 1000}, job_id=message_key)
        self._settle()

    def _get(self, message_key: str) -> Any:
        holder = read(self.queue, message_key)
        if holder is None or "value" not in holder:
            return Missing  # never stored, forgotten (only the bare key is left), expired
        return self.encoder.decode(json.dumps(holder["value"]).encode("utf-8"))

    def _settle(self) -> None:
        """Settle every pending value (stored_values.settle)."""
        settle(self.queue)

    def get_result(self, message: Any, *, block: bool = False,
                   timeout: int | None = None) -> Any:
        """The result of `message` (ResultMissing if none yet and not `block`); with
        `block`, wait up to `timeout` ms (default 10 s), then ResultTimeout."""
        deadline = time.monotonic() + (DEFAULT_TIMEOUT if timeout is None else timeout) / 1000
        key = self.build_message_key(message)
        while True:
            result = self._get(key)
            if result is not Missing:
                return self.unwrap_result(result)
            if not block:
                raise ResultMissing(message)
            left = deadline - time.monotonic()
            if left <= 0:
                raise ResultTimeout(message)
            if self.queue.wait(min(left, _WAIT_SLICE)):
                self._settle()  # so that the next wait blocks again

    def close(self) -> None:
        if self._queue is not None:
            self._queue.close()
            self._queue = None
