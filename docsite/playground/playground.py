"""The playground's driver: real nobroker calls on one queue, and what they left on disk.

The browser page runs this module under Pyodide, over Pyodide's in-memory
file system, with the unmodified `nobroker` package beside it; CPython runs
the same module in the tests. There is no second implementation of anything:
every byte the page shows was written by nobroker's own engine, and every
state it shows was read back through the public `Queue` API.

What the page can do that a program cannot do to itself is simulated here,
in the open, at the level of files and handles:

- "kill the worker": forget the worker's leases without settling them, as a
  `kill -9` does. The jobs stay leased until their deadline, then the next
  call records EXPIRE for them.
- "tear the tail": a producer dies halfway through writing its batch. The
  batch is written by nobroker (an ordinary `enqueue`), then the second half
  of its bytes is zeroed, which is what a crash mid-write leaves in a
  preallocated log. Every handle is dropped, as the process died with it.
- "recover": open the queue again; the page shows `queue.recovery`.

Time is a virtual clock that only the "wait" button advances, so leases
expire when the visitor says so, and the times in the log are round numbers.

Each action returns `snapshot()`: a JSON-ready dict of the queue's jobs, its
files and the current log's bytes with the record boundaries, for the page
to draw (and the tests to check).
"""

from __future__ import annotations

import json
import os
from typing import Any

from nobroker import Job, NobrokerError, Queue
from nobroker.file.inspection import current_log_path, read_records
from nobroker.file.state.state import TRANSITIONS

__all__ = ["Playground"]

START_TIME = 1_700_000_000.0  # the virtual clock's first reading (2023-11-14 22:13:20 UTC)
VISIBILITY = 30.0  # seconds a lease lasts in the playground
ZERO_TAIL = 32  # preallocated zero bytes shown after the last record


class Playground:
    """One queue in `directory`, a producer handle and a worker's leases."""

    def __init__(self, directory: str, name: str = "default") -> None:
        self.directory = directory
        self.name = name
        self.now = START_TIME
        self.events: list[str] = []
        self.crashed = False
        self.held: dict[str, Job] = {}  # the worker's leases, by job id
        self.counter = 0
        self.queue: Queue | None = None
        self.recovery = ""
        self._seen: tuple[str, int] = ("", 0)  # (log file, records end) at the last snapshot
        self._open()

    # -- plumbing -----------------------------------------------------------

    def _clock(self) -> float:
        return self.now

    def _open(self) -> None:
        # auto_compact off: compaction happens when the visitor asks for it.
        self.queue = Queue(self.directory, self.name, clock=self._clock, auto_compact=None,
                           visibility_timeout=VISIBILITY, max_attempts=3)
        self.recovery = self.queue.recovery.describe()

    def _live(self) -> Queue:
        if self.queue is None:
            raise NobrokerError("the process crashed: press recover to open the queue again")
        return self.queue

    def _say(self, line: str) -> None:
        self.events.append(f"t+{self.now - START_TIME:.0f}s  {line}")
        del self.events[:-50]

    def act(self, action: str, arg: str = "") -> dict[str, Any]:
        """Run one page action by name; an error is reported, never raised."""
        handler = getattr(self, f"do_{action.replace('-', '_')}", None)
        if handler is None:
            self._say(f"unknown action {action!r}")
        else:
            try:
                handler(arg)
            except NobrokerError as exc:
                self._say(f"{type(exc).__name__}: {exc}")
        return self.snapshot()

    # -- actions ------------------------------------------------------------

    def _payload(self, text: str) -> Any:
        """The visitor's JSON payload, or {"n": N} when they typed none."""
        self.counter += 1
        if not text.strip():
            return {"n": self.counter}
        try:
            return json.loads(text)
        except ValueError as exc:
            raise NobrokerError(f"the payload is not JSON: {exc}") from None

    def do_enqueue(self, arg: str = "") -> None:
        payload = self._payload(arg)
        job = self._live().enqueue(payload)
        self._say(f"enqueue {json.dumps(payload)} -> {job.id}")

    def do_enqueue_many(self, arg: str = "") -> None:
        payloads = [self._payload(arg) for _ in range(3)]
        jobs = self._live().enqueue_many(payloads)
        self._say(f"enqueue_many of {len(jobs)} (one batch) -> {', '.join(j.id for j in jobs)}")

    def do_lease(self, arg: str = "") -> None:
        job = self._live().lease_one()
        if job is None:
            self._say("lease: nothing ready")
            return
        self.held[job.id] = job
        self._say(f"lease -> {job.id} (token {job.token}, attempt {job.attempts})")

    def _settle(self, verb: str, job_id: str) -> Job | None:
        """Take the worker's lease on `job_id` (default: its oldest) off its hands."""
        key = job_id or next(iter(self.held), "")  # dicts keep insertion order
        job = self.held.pop(key, None)
        if job is None:
            self._say(f"{verb}: the worker holds no lease" + (f" on {job_id}" if job_id else ""))
        return job

    def do_ack(self, arg: str = "") -> None:
        job = self._settle("ack", arg)
        if job is not None:
            self._live().ack(job)
            self._say(f"ack {job.id}")

    def do_nack(self, arg: str = "") -> None:
        job = self._settle("nack", arg)
        if job is not None:
            after = self._live().nack(job, error="RuntimeError: the handler failed")
            self._say(f"nack {job.id} -> {after.state.value}")

    def do_kill_worker(self, arg: str = "") -> None:
        lost = sorted(self.held)
        self.held.clear()
        self._say(f"kill -9 the worker: {len(lost)} lease(s) left to expire {lost}")

    def do_wait(self, arg: str = "") -> None:
        seconds = float(arg) if arg else VISIBILITY + 1
        self.now += seconds
        self._say(f"clock +{seconds:.0f}s")

    def do_tear(self, arg: str = "") -> None:
        queue = self._live()
        path = current_log_path(self.directory, self.name)
        before = queue.stats().log_bytes
        self.counter += 1
        job = queue.enqueue({"n": self.counter, "torn": True})
        after = queue.stats().log_bytes
        kept = (after - before) // 2
        # The process dies with every handle it had: nothing is closed or checkpointed.
        self.queue = None
        self.held.clear()
        self.crashed = True
        with open(path, "r+b") as log:
            log.seek(before + kept)
            log.write(bytes(after - before - kept))
        self._say(f"a producer died writing {job.id}: {kept} of its {after - before} bytes "
                  f"reached the log at offset {before}")

    def do_recover(self, arg: str = "") -> None:
        if self.queue is not None:
            self.queue.close()
        self.held.clear()
        self._open()
        self.crashed = False
        self._say("open: " + self.recovery.replace("\n", "; "))

    def do_compact(self, arg: str = "") -> None:
        result = self._live().compact()
        self._say(f"compact -> generation {result.new_generation}: {result.bytes_before} -> "
                  f"{result.bytes_after} bytes, {result.live_jobs} live job(s)")

    def do_requeue(self, arg: str = "") -> None:
        moved = self._live().requeue_dead(arg or None)
        self._say(f"requeue dead: {moved} job(s) back to pending")

    # -- what the page draws ------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        jobs: list[dict[str, Any]] = []
        stats: dict[str, Any] = {}
        if self.queue is not None:
            queue = self.queue
            s = queue.stats()
            stats = {"pending": s.pending, "leased": s.leased, "dead": s.dead, "done": s.done,
                     "generation": s.generation, "log_bytes": s.log_bytes}
            jobs = [{"id": j.id, "state": j.state.value, "payload": j.payload,
                     "attempts": j.attempts, "max_attempts": j.max_attempts,
                     "token": j.token, "lease_expires_at": j.lease_expires_at,
                     "available_at": j.available_at, "last_error": j.last_error,
                     "held": j.id in self.held}
                    for j in queue.list_jobs()]
        log = self.log_view()
        # Bytes the last action added: from where the records ended last time, or all
        # of them when the log is a new generation.
        path, end = self._seen
        log["new_from"] = end if path == log["path"] else 16
        self._seen = (log["path"], log["records_end"])
        return {"now": self.now, "elapsed": self.now - START_TIME, "crashed": self.crashed,
                "stats": stats, "jobs": jobs, "events": list(self.events),
                "recovery": self.recovery, "files": self.files(), "log": log,
                "transitions": transitions()}

    def files(self) -> list[dict[str, Any]]:
        """The queue directory's files and their sizes."""
        out = []
        for name in sorted(os.listdir(self.directory)):
            path = os.path.join(self.directory, name)
            out.append({"name": name, "size": os.stat(path).st_size})
        return out

    def log_view(self) -> dict[str, Any]:
        """The current log's bytes up to its last record (plus a little of the zeros)."""
        path = current_log_path(self.directory, self.name)
        records: list[dict[str, Any]] = []
        end = 0
        for raw in read_records(path):
            size = 9 + raw.length if raw.crc_ok else 0
            records.append({"offset": raw.offset, "size": size, "type": raw.type,
                            "more": raw.more, "crc_ok": raw.crc_ok, "payload": raw.payload,
                            "error": raw.error})
            end = raw.offset + size
        with open(path, "rb") as log:
            data = log.read()
        end = max(end, 16)  # the file header
        nonzero = len(data.rstrip(b"\0"))  # a torn batch's surviving bytes show too
        shown = data[:min(len(data), max(end, nonzero) + ZERO_TAIL)]
        return {"path": os.path.basename(path), "file_size": len(data), "records_end": end,
                "hex": shown.hex(), "records": records}


def transitions() -> list[dict[str, Any]]:
    """The replay state's TRANSITIONS table, as rows for the page to draw."""
    def name(state: Any) -> str:
        return "(gone)" if state is None else str(state.value)

    return [{"record": record.name, "before": "(none)" if before is None else before.value,
             "after": [name(state) for state in after]}
            for (record, before), after in TRANSITIONS.items()]
