"""The SQLite-style I/O-error loop: a workload run once per (call, errno, mode), then audited.

tests/file/test_faults.py runs it bounded; tools/torture/run.py runs `run_fault_matrix`
with more workload seeds.
"""

from __future__ import annotations

import errno
import os
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import nobroker
from harness.support import FakeClock, file_queue, store_of
from nobroker import (
    CompactionError,
    JobState,
    NobrokerError,
    QueueClosedError,
    StorageError,
)
from nobroker.dependencies import GraphNode
from nobroker.limits import Limits

from .fs import ERRNOS, MODES, FaultFS

# the I/O-error loop


@dataclass
class FaultOutcome:
    """What one run of the workload under one fault did, and what the audit found."""

    label: str
    injected: int = 0
    calls: list[tuple[str, str]] = field(default_factory=list)  # (call, outcome)
    violations: list[str] = field(default_factory=list)


class _Driver:
    """Runs the workload on a (possibly failing) queue and keeps the books."""

    def __init__(self, directory: str, fs: FaultFS, clock: FakeClock,
                 outcome: FaultOutcome) -> None:
        self.directory, self.fs, self.clock, self.out = directory, fs, clock, outcome
        self.q: nobroker.Queue | None = None
        self.enq: dict[str, str] = {}  # tag -> "ok" | "indeterminate" | "failed"
        self.batches: list[tuple[list[str], str]] = []  # enqueue_many tags, outcome
        self.acks: dict[str, str] = {}  # tag -> "ok" | "indeterminate" | "failed"
        self.held: list[nobroker.Job] = []  # leases we hold (returned by lease calls)
        self.seen: set[str] = set()  # tags some lease returned: they surely existed
        self.purged: set[str] = set()  # tags a purge may have removed
        self.ids: dict[str, str] = {}  # tag -> job id, for the jobs an enqueue returned
        self.results: dict[str, tuple[str, str, Any]] = {}  # tag -> (status, id, result)
        self.cancels: dict[str, tuple[str, str]] = {}  # tag -> (status, id)
        self.paused: tuple[str, bool] | None = None  # the last pause/resume: status, flag
        # tag -> (status, id, progress) of the last note written on its job (format 1.2)
        self.notes: dict[str, tuple[str, str, tuple[float, str | None]]] = {}
        self.poisoned_by: str | None = None

    def open(self) -> bool:
        try:
            self.q = file_queue(self.directory, clock=self.clock, fs=self.fs,
                                visibility_timeout=30.0, max_attempts=3,
                                backoff=nobroker.BackoffPolicy(jitter=0.0), limits=LIMITS)
        except NobrokerError as exc:
            self.out.calls.append(("open", f"raised {type(exc).__name__}"))
            return False
        except OSError as exc:
            # Opening may fail with the OS's own error (mkdir, lock file, ...):
            # nothing was promised, so this is allowed; the audit still runs.
            self.out.calls.append(("open", f"raised OSError {exc.errno}"))
            return False
        self.out.calls.append(("open", "returned"))
        return True

    def call(self, name: str, fn: Callable[[nobroker.Queue], Any]) -> tuple[str, Any]:
        """Run one API call; classify the outcome. Reopens a poisoned handle."""
        if self.q is None and not self.open():
            self.out.calls.append((name, "skipped: cannot open"))
            return "skipped", None
        assert self.q is not None
        self.clock.advance(1.0)
        if self.poisoned_by is not None:
            # Fail-stop: the poisoned handle must refuse without touching the disk.
            before = self.fs.calls
            try:
                self.q.stats()
                self.out.violations.append(
                    f"{name}: handle poisoned by {self.poisoned_by} still answered")
            except QueueClosedError:
                pass
            if self.fs.calls != before:
                self.out.violations.append(
                    f"{name}: poisoned handle made {self.fs.calls - before} fs calls")
            self.q.close()
            self.q, self.poisoned_by = None, None  # held leases stay valid across handles
            return self.call(name, fn)
        try:
            result = fn(self.q)
        except (StorageError, CompactionError) as exc:
            kind = getattr(exc, "operation", "compaction")
            self.out.calls.append((name, f"raised {type(exc).__name__} ({kind})"))
            if store_of(self.q).poisoned is not None:
                self.poisoned_by = name
                return "indeterminate", exc
            if isinstance(exc, StorageError) and exc.operation == "write":
                return "failed", exc  # cut back to the batch boundary: not applied
            return "indeterminate", exc
        except QueueClosedError as exc:
            self.out.calls.append((name, "raised QueueClosedError"))
            self.poisoned_by = name
            return "indeterminate", exc
        except NobrokerError as exc:
            self.out.calls.append((name, f"raised {type(exc).__name__}"))
            return "refused", exc
        except Exception as exc:
            self.out.violations.append(f"{name}: raised {type(exc).__name__}: {exc}")
            self.out.calls.append((name, f"raised {type(exc).__name__}"))
            if self.q is not None:
                self.q.close()
            self.q = None
            return "indeterminate", exc
        self.out.calls.append((name, "returned"))
        return "ok", result

    def enqueue(self, tag: str, **kw: Any) -> None:
        status, job = self.call(f"enqueue {tag}", lambda q: q.enqueue({"tag": tag}, **kw))
        if status != "skipped":
            self.enq[tag] = _status(status)
        if status == "ok":
            self.ids[tag] = job.id

    def enqueue_after(self, tag: str, after: list[str], allow_failure: bool = False) -> None:
        """A job waiting for the jobs of tags `after` (those whose enqueue returned)."""
        ids = [self.ids[t] for t in after if t in self.ids]
        if ids:
            self.enqueue(tag, depends_on=ids, allow_failure=allow_failure)

    def cancel(self, tag: str) -> None:
        job_id = self.ids.get(tag)
        if job_id is None:
            return
        status, done = self.call(f"cancel {tag}", lambda q: q.cancel(job_id))
        if status not in ("skipped", "refused") and (status != "ok" or done):
            self.cancels[tag] = (_status(status), job_id)

    def pause(self, paused: bool) -> None:
        status, _ = self.call("pause" if paused else "resume",
                              lambda q: q.pause() if paused else q.resume())
        if status not in ("skipped", "refused"):
            self.paused = (_status(status), paused)

    def enqueue_many(self, tags: list[str]) -> None:
        status, _ = self.call(f"enqueue_many {','.join(tags)}",
                              lambda q: q.enqueue_many([_limited(t) for t in tags]))
        if status != "skipped":
            for tag in tags:
                self.enq[tag] = _status(status)
            self.batches.append((tags, _status(status)))

    def graph(self, tags: list[str], after: list[str]) -> None:
        """enqueue_graph, all or nothing: a chain of `tags` (each waiting for the one
        before; the first for the jobs of tags `after`, those whose enqueue returned)
        and an on_error handler over all of them (mode "failure", the ENQUEUE's `of`)."""
        ids = [self.ids[t] for t in after if t in self.ids]
        nodes = [GraphNode({"tag": tag}, (index - 1,) if index else tuple(ids))
                 for index, tag in enumerate(tags)]
        handler = f"{tags[-1]}.on_error"
        nodes.append(GraphNode({"tag": handler}, tuple(range(len(tags))), "failure"))
        status, jobs = self.call(f"enqueue_graph {','.join(tags)}",
                                 lambda q: q.enqueue_graph(nodes))
        if status != "skipped":
            for tag in [*tags, handler]:
                self.enq[tag] = _status(status)
            self.batches.append(([*tags, handler], _status(status)))
        if status == "ok":
            self.ids.update((job.payload["tag"], job.id) for job in jobs)

    def lease(self, count: int) -> None:
        status, jobs = self.call(f"lease {count}", lambda q: q.lease(count))
        if status == "ok":
            self.held.extend(jobs)
            self.seen.update(job.payload["tag"] for job in jobs)

    def purge(self) -> None:
        status, _ = self.call("purge", lambda q: q.purge())
        if status not in ("skipped", "failed", "refused"):
            self.purged.update(self.enq)  # any pending job enqueued so far may be gone

    def note(self) -> None:
        """The first held job's progress and metadata (a PROGRESS record), each unique."""
        if not self.held:
            return
        job = self.held[0]
        tag = job.payload["tag"]
        progress = (0.5, f"{tag} note {len(self.notes)}")
        status, _ = self.call(f"note {tag}", lambda q: q.backend.write_notes(
            job, progress, {"tag": tag}))
        if status not in ("skipped", "refused"):
            self.notes[tag] = (_status(status), job.id, progress)

    def settle(self, how: str) -> None:
        if not self.held:
            return
        job = self.held.pop(0)
        tag = job.payload["tag"]
        if how == "ack":
            status, _ = self.call(f"ack {tag}", lambda q: q.ack(job))
            if status not in ("skipped", "refused"):
                self.acks[tag] = _status(status)
        elif how == "ack_result":
            value = {"of": tag, "n": len(self.results)}
            status, _ = self.call(f"ack {tag} with a result",
                                  lambda q: q.ack(job, result=value))
            if status not in ("skipped", "refused"):
                self.acks[tag] = _status(status)
                self.results[tag] = (_status(status), job.id, value)
        elif how == "ack_many_and_lease":  # its ACK and the next LEASE in one batch
            status, jobs = self.call(f"ack {tag} and lease 1",
                                     lambda q: q.ack_many_and_lease([job], 1))
            if status not in ("skipped", "refused"):
                self.acks[tag] = _status(status)
            if status == "ok":
                self.held.extend(jobs)
                self.seen.update(leased.payload["tag"] for leased in jobs)
        elif how == "nack":
            self.call(f"nack {tag}", lambda q: q.nack(job, error="boom", delay=0))
        elif how == "nack_dead":  # a NACK with dl
            self.call(f"dead-letter {tag}", lambda q: q.nack(job, error="rejected", dead=True))
        elif how == "snooze":
            self.call(f"snooze {tag}", lambda q: q.snooze(job, 0, error="later"))
        else:
            status, new = self.call(f"extend {tag}", lambda q: q.extend(job, 60))
            if status == "ok":
                self.held.insert(0, new)


# Limits that never hold a job back here (the audit expects every job leasable), so
# that every run writes LIMIT records, keyed ENQUEUEs and windows under its faults.
LIMITS = Limits()
LIMITS.declare_queue((1000, 1.0))
LIMITS.declare_task("held", concurrency=1000, concurrency_key=lambda tag: tag[:1])


def _limited(tag: str) -> dict[str, Any]:
    """enqueue_many's payload: a call of the limited task, with its tag."""
    return {"tag": tag, "task": "held", "args": [tag], "kwargs": {}}


def _status(status: str) -> str:
    return {"ok": "ok", "failed": "failed"}.get(status, "indeterminate")


def workload(d: _Driver, seed: int = 0) -> None:
    """About ten calls that touch every kind of record and one compaction.

    Seeds 0 and 1 are fixed scripts; seed 2 and up draw ten to twenty calls
    from `random.Random(seed)` (tools/torture/run.py runs those).
    """
    if seed >= 2:
        random_workload(d, seed)
        return
    d.enqueue("a")
    d.enqueue_many(["b", "c", "d"])
    d.enqueue("k", job_id="key-k")
    d.lease(2)
    d.settle("ack")
    d.settle("nack")
    d.lease(1)
    d.settle("snooze")
    d.lease(1)
    d.settle("extend")
    d.settle("ack_many_and_lease")  # the extended job, and the next one leased
    d.enqueue_after("w", ["k"])  # waits through the compaction below
    d.enqueue_after("w2", ["w"], allow_failure=True)
    d.graph(["g1", "g2"], ["w"])  # a chain after w, with its on_error handler
    d.call("compact", lambda q: q.compact())
    d.enqueue("e")
    d.settle("ack")
    d.lease(1)
    d.note()  # kept with the job and its result
    d.settle("ack_result")  # kept with its result
    d.cancel("e")
    d.pause(True)
    if seed % 2:
        d.pause(False)
        d.lease(2)
        d.settle("ack")
        d.settle("nack_dead")  # a NACK with dl: dead with attempts left
        d.purge()
        d.enqueue_many(["f", "g"])
        d.call("compact", lambda q: q.compact())


def random_workload(d: _Driver, seed: int) -> None:
    rng = random.Random(seed)
    serial = 0
    for _ in range(rng.randint(10, 20)):
        serial += 1
        op = rng.random()
        if op < 0.22:
            d.enqueue(f"t{serial}", **({"job_id": f"key{serial}"} if rng.random() < 0.3 else {}))
        elif op < 0.25:  # waits for up to two earlier jobs (RELEASE, CANCEL with err)
            after = rng.sample(sorted(d.ids), min(len(d.ids), rng.randint(1, 2)))
            d.enqueue_after(f"t{serial}", after, allow_failure=rng.random() < 0.3)
        elif op < 0.30:
            d.enqueue_many([f"t{serial}.{i}" for i in range(rng.randint(2, 4))])
        elif op < 0.35:  # a chain and its on_error handler (enqueue_graph, `of`)
            after = rng.sample(sorted(d.ids), min(len(d.ids), rng.randint(0, 1)))
            d.graph([f"t{serial}.{i}" for i in range(rng.randint(1, 3))], after)
        elif op < 0.55:
            d.lease(rng.randint(1, 3))
        elif op < 0.8:
            if rng.random() < 0.2:
                d.note()
            d.settle(rng.choice(("ack", "ack", "ack_result", "ack_many_and_lease", "nack",
                                 "nack_dead", "snooze", "extend")))
        elif op < 0.88:
            d.call("compact", lambda q: q.compact())
        elif op < 0.92:
            d.purge()
        elif op < 0.94:
            d.call("requeue_dead", lambda q: q.requeue_dead())  # REVIVEs what deaths cancelled
        elif op < 0.96:
            if rng.random() < 0.5:
                d.cancel(rng.choice(sorted(d.ids))) if d.ids else None
            else:
                d.pause(rng.random() < 0.5)
        else:
            d.clock.advance(60.0)  # leases run out: the next call writes EXPIREs


def audit(directory: str, d: _Driver, out: FaultOutcome) -> None:
    """Reopen without faults (twice) and check the promises."""
    if d.q is not None:
        d.q.close()
    d.fs.disable()
    v = out.violations
    try:
        first = nobroker.Queue(directory, clock=d.clock)
    except Exception as exc:
        v.append(f"reopen after the fault raised {type(exc).__name__}: {exc}")
        return
    try:
        jobs = first.list_jobs()
        stats = first.stats()
        fingerprint = store_of(first).state.fingerprint()
        kept = {job.id: job for state in (JobState.DONE, JobState.CANCELLED)
                for job in first.list_jobs(state)}
    finally:
        first.close()
    with nobroker.Queue(directory, clock=d.clock) as second:
        if not second.recovery.clean:
            v.append(f"second reopen still repaired: {second.recovery.describe()}")
        if store_of(second).state.fingerprint() != fingerprint:
            v.append("recovery is not idempotent: two reopens give different states")
    present: dict[str, str] = {}
    live_ids = {job.id for job in jobs}
    for job in jobs:
        # A waiting job waits only for live jobs: the batch that finished a
        # prerequisite released or cancelled it (and never half of that).
        if job.state is JobState.WAITING and not set(job.waiting_for) <= live_ids:
            v.append(f"job {job.id} waits for {job.waiting_for}, not all live")
        tag = job.payload.get("tag") if isinstance(job.payload, dict) else None
        if tag is None or tag in present:
            v.append(f"unexpected or duplicated job {job.id}: {job.payload!r}")
        present[str(tag)] = str(job.state)
    if (stats.pending, stats.leased, stats.dead, stats.total) != (
            sum(s == "pending" for s in present.values()),
            sum(s == "leased" for s in present.values()),
            sum(s == "dead" for s in present.values()), len(jobs)):
        v.append(f"stats {stats} disagree with the listed jobs {present}")
    for tag in present:
        if tag not in d.enq:
            v.append(f"job {tag!r} present but never enqueued")
        elif d.enq[tag] == "failed":
            v.append(f"job {tag!r} present although its enqueue definitely failed")
    for tag, (status, job_id, value) in d.results.items():
        got = kept.get(job_id)
        if status == "ok" and (got is None or got.state is not JobState.DONE
                               or got.result != value):
            v.append(f"ack of {tag!r} with a result returned, yet the queue holds {got}")
        if status == "failed" and got is not None and got.state is JobState.DONE:
            v.append(f"ack of {tag!r} with a result definitely failed, yet {got} is kept")
    for tag, (status, job_id) in d.cancels.items():
        got = kept.get(job_id)
        if status == "ok" and (got is None or got.state is not JobState.CANCELLED):
            v.append(f"cancel of {tag!r} returned True, yet the queue holds {got}")
        # Kept as DONE is no sign of the cancel: the job may have been acked with a
        # result before or after it (the results check above covers that).
        if status == "failed" and got is not None and got.state is JobState.CANCELLED:
            v.append(f"cancel of {tag!r} definitely failed, yet {got} is kept")
    noted = {job.id: job for job in jobs} | kept
    for tag, (status, job_id, progress) in d.notes.items():
        got = noted.get(job_id)
        if status == "ok" and got is not None and got.progress != progress:
            v.append(f"note on {tag!r} returned, yet the queue holds {got.progress}")
        if status == "failed" and got is not None and got.progress == progress:
            v.append(f"note on {tag!r} definitely failed, yet the queue holds it")
    if d.paused is not None and d.paused[0] == "ok" and stats.paused != d.paused[1]:
        v.append(f"the last pause/resume returned, yet paused is {stats.paused}")
    if stats.kept != len(kept):
        v.append(f"stats.kept {stats.kept} disagrees with the kept jobs listed {len(kept)}")
    cancelled = {tag for tag, (status, _) in d.cancels.items() if status != "failed"}
    settled = {tag for tag, job_id in d.ids.items() if job_id in kept}  # cancelled with it
    evidence = set(present) | set(d.acks) | d.seen | cancelled | settled
    for tag, status in d.enq.items():
        if status == "ok" and tag not in evidence and tag not in d.purged:
            v.append(f"lost: enqueue of {tag!r} returned, yet it is gone and never acked")
    for tag, status in d.acks.items():
        if status == "ok" and tag in present:
            v.append(f"resurrected: ack of {tag!r} returned, yet it is {present[tag]}")
    for tags, status in d.batches:
        there = [t for t in tags if t in evidence]
        if status == "failed" and there:
            v.append(f"batch {tags} definitely failed, yet {there} exist")
        missing = [t for t in tags if t not in evidence and t not in d.purged]
        if there and missing:
            v.append(f"batch {tags} half applied: {missing} missing, {there} exist")
    ok_acks = sum(1 for s in d.acks.values() if s == "ok")
    maybe = sum(1 for s in d.acks.values() if s == "indeterminate")
    if not ok_acks <= stats.done <= ok_acks + maybe:
        v.append(f"done count {stats.done} outside [{ok_acks}, {ok_acks + maybe}]")


def run_fault_case(directory: str, index: int | None, err: int, mode: str,
                   seed: int = 0) -> FaultOutcome:
    """One run of the workload with mutating call `index` failing (None: no fault)."""
    label = f"seed={seed} call={index} errno={errno.errorcode.get(err, err)} mode={mode}"
    out = FaultOutcome(label)
    fs = FaultFS()
    if index is not None:
        fs.arm(index, err, mode)
    driver = _Driver(directory, fs, FakeClock(), out)
    workload(driver, seed)
    out.injected = fs.injected
    if index is not None and fs.trace[index - 1:index]:
        out.label += f" ({fs.trace[index - 1]})"
    audit(directory, driver, out)
    return out


def count_mutating_calls(directory: str, seed: int = 0) -> int:
    """How many mutating file-system calls the fault-free workload makes."""
    fs = FaultFS()
    driver = _Driver(directory, fs, FakeClock(), FaultOutcome("count"))
    workload(driver, seed)
    if driver.q is not None:
        driver.q.close()
    return fs.mutating


def run_fault_matrix(scratch: str, seed: int = 0,
                     errnos: tuple[int, ...] = ERRNOS,
                     modes: tuple[str, ...] = MODES) -> tuple[int, int, list[FaultOutcome]]:
    """Every (call index, errno, mode): returns (runs, faults injected, failing outcomes)."""
    total = count_mutating_calls(os.path.join(scratch, "count"), seed)
    runs = injected = 0
    bad: list[FaultOutcome] = []
    for index in range(1, total + 1):
        for err in errnos:
            for mode in modes:
                if mode == "short" and err != errno.ENOSPC:
                    continue  # a short write ends in ENOSPC by construction
                runs += 1
                directory = os.path.join(scratch, f"s{seed}-{index}-{err}-{mode}")
                outcome = run_fault_case(directory, index, err, mode, seed)
                injected += outcome.injected
                if outcome.violations:
                    bad.append(outcome)
    return runs, injected, bad
