"""Driving a workload: the Driver runs real Queue calls, marks them and keeps the oracle.

Part of the crash-state explorer; the theory is in harness/explorer/__init__.py.
"""

from __future__ import annotations

import contextlib
import os
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.support import FakeClock, file_queue, store_of
from nobroker import Job, NobrokerError, Queue

from .frames import _complete_batches, _generation, _log_inodes, _scan_frames
from .recording import QUEUE, Event, RecordingFS, SimulatedCrash

EPOCH = 1_700_000_000.0  # where a workload's fake clock starts


@dataclass
class Call:
    """One API call of the workload and what the oracle needs to know about it."""

    index: int
    handle: int
    op: str
    args: str
    begin: int  # event index of its BEGIN marker
    end: int = -1
    outcome: str = ""  # returned | raised | crashed
    result: str = ""
    batches: tuple[tuple[int, int], ...] = ()  # positions (batch, generation) it wrote
    enqueued: tuple[str, ...] = ()  # job ids its ENQUEUE records carried
    acked: tuple[str, ...] = ()
    durable: bool = True  # the handle fsyncs before returning
    now: float = 0.0

    def describe(self) -> str:
        return f"call {self.index} h{self.handle}.{self.op}({self.args}) -> {self.outcome}" \
               f"{' ' + self.result if self.result else ''}"


class Driver:
    """What a workload talks to: opens handles, makes calls, moves the clock, arms faults."""

    def __init__(self, fs: RecordingFS, directory: str, **queue_kwargs: Any) -> None:
        self.fs = fs
        self.directory = directory
        self.clock = FakeClock(EPOCH)
        # One rng for every handle, as one process has (job ids, jitter, nonces): record()
        # seeds it, so that a workload writes the same bytes every time.
        self.rng = random.Random(0)
        self.queue_kwargs = {"auto_compact": None, **queue_kwargs}
        self.handles: list[Queue | None] = []
        self.dead: set[int] = set()  # crashed (a SimulatedCrash) or closed: unusable
        self.closed: set[int] = set()  # closed by the workload: nothing left to clean up
        self.calls: list[Call] = []
        # The oracle: position (batch, generation) -> fingerprints of the replay there.
        # Positions order by batch first: a new generation that lost batches copied into
        # it sorts below them; at equal batch, the newer generation is the later one.
        self.history: dict[tuple[int, int], set[tuple[object, ...]]] = {
            (0, 0): {_EMPTY_FINGERPRINT}}
        self.problems: list[str] = []
        self._replays: dict[int, tuple[bytes, int, Any]] = {}

    # -- the workload's vocabulary -------------------------------------------

    def open(self, **kwargs: Any) -> int:
        """Open a new handle; returns its number (or -1 if opening raised)."""
        options = {**self.queue_kwargs, **kwargs}
        handle = len(self.handles)
        self.handles.append(None)
        queue = self._run(handle, "open", (), options,
                          lambda: file_queue(self.directory, QUEUE, clock=self.clock,
                                             rng=self.rng, fs=self.fs, **options))
        if isinstance(queue, Queue):
            self.handles[handle] = queue
            self._observe(self.calls[-1], queue)
            return handle
        return -1

    def call(self, handle: int, op: str, *args: Any, **kwargs: Any) -> Any:
        """Call `op` on a handle ("backend.NAME": its backend's operation NAME, for what
        only a worker calls); returns its result, or the exception it raised."""
        queue = self.handles[handle]
        if queue is None or handle in self.dead:
            return QueueClosedErrorStub()
        owner, _, name = op.rpartition(".")
        target = queue.backend if owner == "backend" else queue
        result = self._run(handle, op, args, kwargs, lambda: getattr(target, name)(*args, **kwargs))
        self._observe(self.calls[-1], queue)
        return result

    def advance(self, seconds: float) -> None:
        self.clock.now += seconds

    def close(self, handle: int) -> None:
        queue = self.handles[handle]
        if queue is not None and handle not in self.dead:
            self._run(handle, "close", (), {}, queue.close)
            self.closed.add(handle)
        self.dead.add(handle)

    def crash_next(self, kind: str, *, skip: int = 0, keep: int | None = None) -> None:
        """The next `kind` call ("write", "fsync", ...) kills the process (keep: bytes first)."""
        self.fs.arm(kind, "crash", skip=skip, keep=keep)

    def fail_next(self, kind: str, *, skip: int = 0, error: str = "eio",
                  keep: int | None = None) -> None:
        self.fs.arm(kind, error, skip=skip, keep=keep)

    def before_next_fsync(self, action: Callable[[], None]) -> None:
        """Run `action` (other calls) when the next fsync is about to start: group commit."""
        self.fs._before_sync.append(action)

    # -- internals ------------------------------------------------------------

    def _run(self, handle: int, op: str, args: Sequence[Any], kwargs: dict[str, Any],
             thunk: Callable[[], Any]) -> Any:
        self.clock.now += 0.001  # every call at its own instant
        index = len(self.calls)
        text = ", ".join([_short(a) for a in args] + [f"{k}={_short(v)}" for k, v in
                                                      kwargs.items()])
        problem = self.fs.shadow_check(_ignored_name)
        if problem:
            self.problems.append(f"before call {index} ({op}): {problem}")
        outer = self.fs.call  # a call made from inside another's fsync (group commit)
        self.fs.call = index
        begin = self.fs.mark("begin", f"call {index} {op}")
        call = Call(index, handle, op, text, begin.index, now=self.clock.now)
        queue = self.handles[handle] if handle < len(self.handles) else None
        call.durable = bool(queue.fsync) if queue is not None else bool(
            kwargs.get("fsync", self.queue_kwargs.get("fsync", True)))
        self.calls.append(call)
        try:
            result = thunk()
            call.outcome = "returned"
        except SimulatedCrash:
            self.fs.frozen = False
            self.fs._faults.clear()
            self.dead.add(handle)
            call.outcome = "crashed"
            result = SimulatedCrash()
        except (NobrokerError, ValueError, TypeError, OSError) as exc:
            call.outcome = "raised"
            call.result = type(exc).__name__
            result = exc
        call.end = self.fs.mark("end", f"call {index} {call.outcome}").index
        self.fs.call = outer
        self._classify(call)
        problem = self.fs.shadow_check(_ignored_name)
        if problem:
            self.problems.append(f"after {call.describe()}: {problem}")
        return result

    def _classify(self, call: Call) -> None:
        batches: set[tuple[int, int]] = set()
        enqueued: list[str] = []
        acked: list[str] = []
        logs = _log_inodes(self.fs.events)
        touched = set()
        for event in self.fs.events[call.begin:call.end]:
            if event.kind in ("write", "trunc") and event.ino in logs:
                touched.add(event.ino)
            if event.kind != "write" or event.ino not in logs or event.offset < 16 or \
                    event.call != call.index:  # not a call made from inside this one
                continue
            generation = _generation(self.fs.files[event.ino])
            for rtype, _, record in _scan_frames(event.data):
                batches.add((record["b"], generation or 0))
                if rtype == 1 and isinstance(record.get("id"), str):
                    enqueued.append(record["id"])
                elif rtype == 3 and isinstance(record.get("id"), str):
                    acked.append(record["id"])
        call.batches = tuple(sorted(batches))
        call.enqueued = tuple(enqueued)
        call.acked = tuple(acked)
        for ino in sorted(touched):
            self._replay(ino)

    def _replay(self, ino: int) -> None:
        """Apply the log's new complete batches to the oracle's own replay of it."""
        from nobroker.file.state.state import QueueState
        data = bytes(self.fs.files[ino])
        generation = _generation(data)
        if generation is None:
            return
        prefix, offset, state = self._replays.get(ino, (b"", 16, None))
        if state is None or data[:offset] != prefix:  # new, or cut and rewritten
            offset, state = 16, QueueState()
        for end, batch in _complete_batches(data, offset):
            try:
                state.apply_batch(batch)
            except ValueError as exc:
                self.problems.append(f"the log holds a batch replay rejects at {offset}: {exc}")
                break
            self.history.setdefault((batch[0][1]["b"], generation), set()).add(
                state.fingerprint())
            offset = end
        self._replays[ino] = (data[:offset], offset, state)

    def _observe(self, call: Call, queue: Queue) -> None:
        """Cross-check: the handle's memory must be the replay of what it read and wrote."""
        store = store_of(queue)
        state, log = store.state, store.log
        if log is None or call.outcome != "returned" or store.poisoned:
            return
        position = (state.last_batch, log.generation)
        known = self.history.get(position)
        if known is not None and state.fingerprint() not in known:
            self.problems.append(f"after {call.describe()}: the handle's memory is not the "
                                 f"replay of its log at {position}")

    def finish(self) -> None:
        for handle, queue in enumerate(self.handles):
            if queue is not None and handle not in self.closed:
                with contextlib.suppress(Exception):
                    if handle in self.dead:
                        store = store_of(queue)
                        store.close(checkpoint=False)  # a dead process saves no checkpoint
                    else:
                        queue.close()


class QueueClosedErrorStub(Exception):
    """Returned for calls on a handle the workload already lost."""


def _short(value: Any) -> str:
    if isinstance(value, Job):
        return f"Job({value.id[:6]},tok={value.token})"
    if isinstance(value, list):
        return f"[{len(value)} items]"
    text = repr(value)
    return text if len(text) <= 24 else text[:21] + "..."


def _ignored_name(name: str) -> bool:
    return name.endswith(".wake")


def _empty_fingerprint() -> tuple[object, ...]:
    from nobroker.file.state.state import QueueState
    return QueueState().fingerprint()


_EMPTY_FINGERPRINT = _empty_fingerprint()


@dataclass
class Trace:
    """A recorded workload: the events, the calls and the oracle's history."""

    name: str
    events: list[Event]
    calls: list[Call]
    history: dict[tuple[int, int], set[tuple[object, ...]]]
    initial: dict[str, bytes] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0
    queue_kwargs: dict[str, Any] = field(default_factory=dict)


Workload = Callable[[Driver], None]


def record(workload: Workload, directory: str, *, seed: int = 0, name: str = "") -> Trace:
    """Run `workload` in `directory` (created if missing) and return its trace."""
    os.makedirs(directory, exist_ok=True)
    started = time.perf_counter()
    fs = RecordingFS(directory)
    driver = Driver(fs, directory)
    driver.rng.seed(seed)
    try:
        workload(driver)
    finally:
        driver.finish()
    return Trace(name or getattr(workload, "__name__", "workload"), fs.events, driver.calls,
                 driver.history, problems=driver.problems,
                 seconds=time.perf_counter() - started, queue_kwargs=driver.queue_kwargs)
