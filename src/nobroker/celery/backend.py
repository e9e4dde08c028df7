"""`result_backend = "nobroker:///path"`: Celery's results in a nobroker queue.

A Celery key-value backend over results.ResultStore (one queue named
"celery_results" in the directory). Final states (SUCCESS, FAILURE, REVOKED)
are written once: the first one stored wins, as Celery's own backends keep a
SUCCESS against a late duplicate. Other states (STARTED, RETRY, custom
`update_state`) go to append-only slots, and the newest is read while no final
state exists. Every value lives for `result_expires` (0 or None: ten years).
Exceptions are stored as Celery's JSON serializer represents them
(`{"exc_type", "exc_message", "exc_module"}`); only `result_serializer =
"json"` is accepted.

`AsyncResult.get()`, `join()` and `GroupResult.get()` from any process block in
`Queue.wait` on the results queue (a write in any process wakes them), re-reading
at most once a second to run Celery's `on_interval` hooks: no busy polling.

Chords: the header's GroupResult is saved by `apply_chord`; each member, after
its own result is stored, checks whether every header result is ready, and the
member that sees them all ready publishes the callback with the
`x-nobroker-dedup` header, so that its message is enqueued under the job id
"chord-callback:BODY_TASK_ID:NESTING:RETRIES": a second publish (two members finishing at
once, or a member run again after a crash) writes nothing. What is atomic:
each result write, and the callback's enqueue (one keyed job). What is not:
the check and the publish are two steps, made safe by the keyed enqueue rather
than by a lock; nobroker forgets the key after `key_retention` (a day), so a
member redelivered later than that could publish the callback again.

`forget()` and `GroupResult.delete()` do nothing: the public Queue API cannot
delete a finished job before it expires.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from celery import states
from celery.backends.base import KeyValueStoreBackend
from celery.exceptions import ChordError, ImproperlyConfigured, TimeoutError
from celery.result import GroupResult, allow_join_result
from celery.utils.log import get_logger

from ..queue import Queue
from .locations import RESULTS_QUEUE, location_from_url
from .messages import JOB_ID_HEADER
from .results import FOREVER, ResultStore

__all__ = ["NobrokerBackend"]

log = get_logger(__name__)

_WAIT_SLICE = 1.0  # a waiting get() runs Celery's on_interval at least this often
CHORD_SCOPE = "chord-callback"


class NobrokerBackend(KeyValueStoreBackend):
    """Celery's result backend on a nobroker directory."""

    key_t = str
    supports_native_join = True
    supports_autoexpire = True
    implements_incr = True  # apply_chord saves the header's GroupResult

    def __init__(self, app: Any, url: str | None = None, **kwargs: Any) -> None:
        super().__init__(app, url=url, **kwargs)
        if self.serializer != "json":
            raise ImproperlyConfigured(
                f"the nobroker result backend stores JSON only: set result_serializer = "
                f"'json' (not {self.serializer!r})")
        location = url or app.conf.result_backend
        if not isinstance(location, str):
            raise ImproperlyConfigured("result_backend must be a nobroker:///path or "
                                       "nobroker+postgresql://... URL")
        self.directory = location_from_url(location)  # a directory or a PostgreSQL URL
        self._store: ResultStore | None = None
        self._pid = 0

    @property
    def store(self) -> ResultStore:
        """The results queue, opened on first use (and again in a forked child)."""
        if self._store is None or self._pid != os.getpid():
            ttl = self._ttl()
            self._store = ResultStore(Queue(self.directory, RESULTS_QUEUE,
                                            key_retention=ttl, result_ttl=ttl))
            self._pid = os.getpid()
        return self._store

    def _ttl(self) -> float:
        expires = self.expires
        return float(expires) if expires else FOREVER

    # -- Celery's key-value interface ---------------------------------------

    def get(self, key: str) -> str | None:
        value = self.store.get(key)
        if value is None:
            value = self.store.latest(key)
        return None if value is None else json.dumps(value)

    def mget(self, keys: Iterable[str]) -> list[str | None]:
        return [self.get(key) for key in keys]

    def set(self, key: str, value: Any) -> None:
        self._set_with_state(key, value, states.SUCCESS)

    def _set_with_state(self, key: str, value: Any, state: str) -> None:
        decoded = json.loads(value)
        if state in states.READY_STATES:
            self.store.put(key, decoded, self._ttl())
        else:
            self.store.append(key, decoded, self._ttl())

    def delete(self, key: str) -> None:
        """Not possible through the Queue API: the value stays until it expires."""

    def incr(self, key: str) -> int:
        """Atomic: each call claims the next write-once slot (not used by this backend's
        chords, which check the header's results instead; kept for Celery's API)."""
        return self.store.append(key, 1, self._ttl())

    def expire(self, key: str, value: Any) -> None:
        """Each value's time to live is set when it is written."""

    # -- waiting without polling --------------------------------------------

    def _wait_slice(self, deadline: float | None) -> None:
        left = _WAIT_SLICE if deadline is None else min(_WAIT_SLICE,
                                                        deadline - time.monotonic())
        if left > 0:
            self.store.wait_for_write(left)

    def wait_for(self, task_id: str, timeout: float | None = None, interval: float = 0.5,
                 no_ack: bool = True, on_interval: Callable[[], Any] | None = None) -> Any:
        self._ensure_not_eager()
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if on_interval:
                # first: it raises a failed parent's error (get(follow_parents=True)), which
                # must win over this task's own, a ChordError that says the same later
                on_interval()
            meta = self.get_task_meta(task_id)
            if meta["status"] in states.READY_STATES:
                return meta
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError("The operation timed out.")
            self._wait_slice(deadline)

    def get_many(self, task_ids: Iterable[str], timeout: float | None = None,
                 interval: float = 0.5, no_ack: bool = True,
                 on_message: Callable[[Any], Any] | None = None,
                 on_interval: Callable[[], Any] | None = None,
                 max_iterations: int | None = None,
                 READY_STATES: frozenset[str] = states.READY_STATES) -> Iterator[tuple[str, Any]]:
        waiting = list(dict.fromkeys(task_ids))
        deadline = None if timeout is None else time.monotonic() + timeout
        rounds = 0
        while waiting:
            for task_id in list(waiting):
                meta = self.get_task_meta(task_id)
                if meta["status"] in READY_STATES:
                    waiting.remove(task_id)
                    if on_message is not None:
                        on_message(meta)
                    yield task_id, meta
            if not waiting:
                return
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"Operation timed out ({timeout})")
            if on_interval:
                on_interval()
            rounds += 1
            if max_iterations and rounds >= max_iterations:
                return
            self._wait_slice(deadline)

    # -- chords -------------------------------------------------------------

    def on_chord_part_return(self, request: Any, state: str, result: Any,
                             **kwargs: Any) -> Any:
        from celery.canvas import maybe_signature

        gid = request.group
        if not gid or not request.chord:
            return None
        callback = maybe_signature(request.chord, app=self.app)
        try:
            deps = GroupResult.restore(gid, backend=self)
        except Exception as exc:  # as Celery's own backends: the callback fails
            log.exception("Chord %r raised: %r", gid, exc)
            return self.chord_error_from_stack(callback,
                                               ChordError(f"Cannot restore group: {exc!r}"))
        if deps is None:
            return self.chord_error_from_stack(
                callback, ChordError(f"GroupResult {gid} no longer exists"))
        # Last member first: members finish roughly in order, so a member that is not
        # the last usually stops at the first result it reads (deps.ready() reads from
        # the front: O(N) reads per member, O(N²) per chord).
        if not all(result.ready() for result in reversed(deps.results)):
            return None  # a later member will see them all ready
        join = deps.join_native if deps.supports_native_join else deps.join
        try:
            with allow_join_result():
                ret = join(timeout=self.app.conf.result_chord_join_timeout, propagate=True)
        except Exception as exc:
            culprit = next((result for result in deps.results if result.failed()), None)
            reason = repr(exc) if culprit is None else f"Dependency {culprit.id} raised {exc!r}"
            log.exception("Chord %r raised: %r", gid, reason)
            return self.chord_error_from_stack(callback, _chord_error(reason, exc))
        try:
            headers = dict(callback.options.get("headers") or {})
            headers[JOB_ID_HEADER] = CHORD_SCOPE
            callback.apply_async((ret,), headers=headers)
        except Exception as exc:
            log.exception("Chord %r raised: %r", gid, exc)
            return self.chord_error_from_stack(callback,
                                               _chord_error(f"Callback error: {exc!r}", exc))
        return None

    def as_uri(self, include_password: bool = False) -> str:
        return str(self.url or "")


def _chord_error(message: str, cause: BaseException) -> Exception:
    """A ChordError whose __cause__ is the member's exception, as Celery's own backends
    raise it: a group body's tasks are failed with that cause, not the wrapper."""
    error: Exception = ChordError(message)
    if isinstance(cause, Exception):
        error.__cause__ = cause
    return error
