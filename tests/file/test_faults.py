"""Fault injection: failing fsyncs and writes, lock holders, network file systems, modes.

Theory. Every storage operation of a Queue goes through its `FileSystem`
(src/nobroker/fs.py), so `FaultFS` below can make any one call fail the way
a real kernel would: EIO or ENOSPC, once or from that call on, or a short
write followed by ENOSPC (a write that dies halfway through a record). The
SQLite-style loop (reliability.md §10.4) runs a ~10-call workload once to
count its mutating calls, then once per (call index, errno, mode), and after
each run disables the faults, reopens twice and checks the audit:

- every call that returned kept its effect (an acked job stays gone, an
  enqueued job is pending, leased, dead or acked by some ack);
- a call that raised is either wholly applied or not at all, and a write
  that failed (handle not poisoned, log cut back) is not applied at all;
- after a failed fsync the handle is poisoned: the next call raises
  QueueClosedError without a single file-system call (fsyncgate: a retried
  fsync proves nothing);
- every error a call raised is a NobrokerError; recovery is idempotent.

`drop` mode goes one step further: a failed fsync also throws away every
byte written since the last successful fsync of that file, as a power cut
after the kernel dropped the dirty pages would.

`run_fault_matrix` is shared with tools/torture.py, which runs it with more
workload seeds.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import random
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

from support import FakeClock, TempDirTestCase, file_queue, scratch_root, slow, store_of

import nobroker
from nobroker import (
    CompactionError,
    JobState,
    LockTimeoutError,
    NobrokerError,
    NotLeasedError,
    QueueClosedError,
    StorageError,
    UnsafeFilesystemError,
)
from nobroker.file.disk.fs import FileSystem, filesystem_type

__all__ = ["FaultFS", "FakeClock", "FaultOutcome", "run_fault_case", "run_fault_matrix",
           "count_mutating_calls"]

ERRNOS = (errno.EIO, errno.ENOSPC)
MODES = ("once", "persist", "short", "drop")


class FaultFS(FileSystem):
    """A FileSystem that counts mutating calls and can make one of them fail.

    `arm(index, err, mode)`: the `index`-th mutating call (1-based) fails with
    `err`; mode "once" fails only it, "persist" fails it and every later
    mutating call, "short" turns it (if a pwrite) into a write of half the
    bytes and fails the next pwrite with ENOSPC, "drop" fails it and, if it
    is an fsync, also reverts the file to what the last successful fsync made
    durable. `calls` counts every call, mutating or not, so a test can prove
    a poisoned handle touched nothing.
    """

    def __init__(self) -> None:
        self.mutating = 0
        self.calls = 0
        self.injected = 0
        self.target: int | None = None
        self.err = errno.EIO
        self.mode = "once"
        self.enabled = True
        self.trace: list[str] = []
        self._fail_next_write = False
        self._paths: dict[int, str] = {}
        self._durable: dict[str, bytes] = {}
        self._match: str | None = None
        self._matched = 0

    def arm(self, index: int, err: int, mode: str) -> None:
        self.target, self.err, self.mode = index, err, mode

    def arm_matching(self, prefix: str, nth: int, err: int, mode: str = "once") -> None:
        """Fail the `nth` mutating call from now on whose description starts with `prefix`."""
        self._match, self._matched = prefix, 0
        self.target, self.err, self.mode = nth, err, mode

    def disable(self) -> None:
        self.enabled = False

    # -- the decision -------------------------------------------------------

    def _mutation(self, what: str) -> bool:
        """Count one mutating call; True if it must fail."""
        self.mutating += 1
        self.trace.append(what)
        if not self.enabled or self.target is None:
            return False
        if self._match is not None:
            if not what.startswith(self._match):
                return False
            self._matched += 1
            return self._matched == self.target or (
                self.mode == "persist" and self._matched > self.target)
        if self.mutating == self.target:
            return True
        return self.mode == "persist" and self.mutating > self.target

    def _raise(self, what: str, err: int | None = None) -> None:
        self.injected += 1
        code = self.err if err is None else err
        raise OSError(code, f"{os.strerror(code)} (injected at call {self.mutating}: {what})")

    # -- the seam -----------------------------------------------------------

    def open(self, path: str, flags: int, mode: int = 0o600) -> int:
        self.calls += 1
        if flags & os.O_CREAT and self._mutation(f"open-create {os.path.basename(path)}"):
            self._raise("open")
        fd = super().open(path, flags, mode)
        self._paths[fd] = path
        return fd

    def close(self, fd: int) -> None:
        self.calls += 1
        self._paths.pop(fd, None)
        super().close(fd)

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        self.calls += 1
        return super().pread(fd, size, offset)

    def pwrite(self, fd: int, data: bytes, offset: int) -> int:
        self.calls += 1
        if self._fail_next_write:
            self._fail_next_write = False
            self._raise("pwrite after a short write", errno.ENOSPC)
        if self._mutation(f"pwrite {len(data)}@{offset}"):
            if self.mode == "short" and len(data) > 1:
                self.injected += 1
                self._fail_next_write = True
                return super().pwrite(fd, data[:len(data) // 2], offset)
            self._raise("pwrite")
        return super().pwrite(fd, data, offset)

    def _sync(self, fd: int, real: Callable[[int], None], what: str) -> None:
        self.calls += 1
        path = self._paths.get(fd, "?")
        if self._mutation(f"{what} {os.path.basename(path)}"):
            if self.mode == "drop" and path in self._durable:
                self._revert(fd, path)
            self._raise(what)
        real(fd)
        if path != "?":
            with open(path, "rb") as handle:  # the test's own read, not the queue's
                self._durable[path] = handle.read()

    def _revert(self, fd: int, path: str) -> None:
        """The pages of the failed write-back are gone: only the synced image remains."""
        image = self._durable[path]
        os.ftruncate(fd, len(image))
        os.pwrite(fd, image, 0)

    def fsync(self, fd: int) -> None:
        self._sync(fd, super().fsync, "fsync")

    def fdatasync(self, fd: int) -> None:
        self._sync(fd, super().fdatasync, "fdatasync")

    def fsync_dir(self, path: str) -> None:
        self.calls += 1
        if self._mutation(f"fsync_dir {os.path.basename(path)}"):
            self._raise("fsync_dir")
        super().fsync_dir(path)

    def ftruncate(self, fd: int, length: int) -> None:
        self.calls += 1
        if self._mutation(f"ftruncate {length}"):
            self._raise("ftruncate")
        super().ftruncate(fd, length)

    def fstat(self, fd: int) -> os.stat_result:
        self.calls += 1
        return super().fstat(fd)

    def stat(self, path: str) -> os.stat_result:
        self.calls += 1
        return super().stat(path)

    def replace(self, src: str, dst: str) -> None:
        self.calls += 1
        if self._mutation(f"replace {os.path.basename(src)}"):
            self._raise("replace")
        super().replace(src, dst)
        # Open descriptors follow the file to its new name (compaction renames a
        # generation it still has open), and so does what was made durable.
        for fd, path in self._paths.items():
            if path == src:
                self._paths[fd] = dst
        if src in self._durable:
            self._durable[dst] = self._durable.pop(src)

    def unlink(self, path: str) -> None:
        self.calls += 1
        if self._mutation(f"unlink {os.path.basename(path)}"):
            self._raise("unlink")
        super().unlink(path)

    def mkdir(self, path: str, mode: int = 0o700) -> None:
        self.calls += 1
        if self._mutation(f"mkdir {os.path.basename(path)}"):
            self._raise("mkdir")
        super().mkdir(path, mode)

    def listdir(self, path: str) -> list[str]:
        self.calls += 1
        return super().listdir(path)


# --------------------------------------------------------------------------
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
        self.poisoned_by: str | None = None

    def open(self) -> bool:
        try:
            self.q = file_queue(self.directory, clock=self.clock, fs=self.fs,
                                visibility_timeout=30.0, max_attempts=3,
                                backoff=nobroker.BackoffPolicy(jitter=0.0))
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
                              lambda q: q.enqueue_many([{"tag": t} for t in tags]))
        if status != "skipped":
            for tag in tags:
                self.enq[tag] = _status(status)
            self.batches.append((tags, _status(status)))

    def lease(self, count: int) -> None:
        status, jobs = self.call(f"lease {count}", lambda q: q.lease(count))
        if status == "ok":
            self.held.extend(jobs)
            self.seen.update(job.payload["tag"] for job in jobs)

    def purge(self) -> None:
        status, _ = self.call("purge", lambda q: q.purge())
        if status not in ("skipped", "failed", "refused"):
            self.purged.update(self.enq)  # any pending job enqueued so far may be gone

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
        elif how == "nack":
            self.call(f"nack {tag}", lambda q: q.nack(job, error="boom", delay=0))
        elif how == "snooze":
            self.call(f"snooze {tag}", lambda q: q.snooze(job, 0, error="later"))
        else:
            status, new = self.call(f"extend {tag}", lambda q: q.extend(job, 60))
            if status == "ok":
                self.held.insert(0, new)


def _status(status: str) -> str:
    return {"ok": "ok", "failed": "failed"}.get(status, "indeterminate")


def workload(d: _Driver, seed: int = 0) -> None:
    """About ten calls that touch every kind of record and one compaction.

    Seeds 0 and 1 are fixed scripts; seed 2 and up draw ten to twenty calls
    from `random.Random(seed)` (tools/torture.py runs those).
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
    d.call("compact", lambda q: q.compact())
    d.enqueue("e")
    d.settle("ack")
    d.lease(1)
    d.settle("ack_result")  # kept with its result
    d.cancel("e")
    d.pause(True)
    if seed % 2:
        d.pause(False)
        d.lease(2)
        d.settle("ack")
        d.purge()
        d.enqueue_many(["f", "g"])
        d.call("compact", lambda q: q.compact())


def random_workload(d: _Driver, seed: int) -> None:
    rng = random.Random(seed)
    serial = 0
    for _ in range(rng.randint(10, 20)):
        serial += 1
        op = rng.random()
        if op < 0.25:
            d.enqueue(f"t{serial}", **({"job_id": f"key{serial}"} if rng.random() < 0.3 else {}))
        elif op < 0.35:
            d.enqueue_many([f"t{serial}.{i}" for i in range(rng.randint(2, 4))])
        elif op < 0.55:
            d.lease(rng.randint(1, 3))
        elif op < 0.8:
            d.settle(rng.choice(("ack", "ack", "ack_result", "nack", "snooze", "extend")))
        elif op < 0.88:
            d.call("compact", lambda q: q.compact())
        elif op < 0.92:
            d.purge()
        elif op < 0.94:
            d.call("requeue_dead", lambda q: q.requeue_dead())
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
    for job in jobs:
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
    if d.paused is not None and d.paused[0] == "ok" and stats.paused != d.paused[1]:
        v.append(f"the last pause/resume returned, yet paused is {stats.paused}")
    if stats.kept != len(kept):
        v.append(f"stats.kept {stats.kept} disagrees with the kept jobs listed {len(kept)}")
    cancelled = {tag for tag, (status, _) in d.cancels.items() if status != "failed"}
    evidence = set(present) | set(d.acks) | d.seen | cancelled
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


# --------------------------------------------------------------------------
# the tests


class IOErrorLoopTest(TempDirTestCase):
    """reliability.md §10.4: fail every mutating call, every way, and audit."""

    def test_fault_free_workload_passes_the_audit(self) -> None:
        outcome = run_fault_case(str(self.tmp / "q"), None, errno.EIO, "once")
        self.assertEqual(outcome.violations, [])
        self.assertTrue(all(res == "returned" for _, res in outcome.calls), outcome.calls)

    def check_matrix(self, seed: int) -> None:
        # Hundreds of small queues: on tmpfs when there is one (the faults are ours,
        # the disk's speed is beside the point).
        scratch = tempfile.mkdtemp(prefix="nobroker-faults-", dir=scratch_root())
        self.addCleanup(shutil.rmtree, scratch, ignore_errors=True)
        runs, injected, bad = run_fault_matrix(scratch, seed)
        self.assertGreater(runs, 100)
        self.assertGreaterEqual(injected, runs)
        report = "\n".join(f"{o.label}: {o.violations}\n  calls: {o.calls}" for o in bad[:5])
        self.assertEqual(len(bad), 0, f"{len(bad)} of {runs} runs broke a promise:\n{report}")

    def test_every_mutating_call_failing_breaks_no_promise(self) -> None:
        self.check_matrix(0)

    @slow
    def test_the_same_for_a_workload_with_purge_and_a_second_compaction(self) -> None:
        self.check_matrix(1)


class FsyncFailureTest(TempDirTestCase):
    """A failed fsync is never retried into a success: the handle is poisoned."""

    def open(self, fs: FileSystem) -> nobroker.Queue:
        return file_queue(self.tmp / "q", fs=fs, clock=FakeClock())

    def test_failed_fsync_raises_and_poisons_until_reopened(self) -> None:
        fs = FaultFS()
        q = self.open(fs)
        kept = q.enqueue({"n": 1})
        fs.arm(fs.mutating + 2, errno.EIO, "once")  # the pwrite succeeds, the fdatasync fails
        with self.assertRaises(StorageError) as caught:
            q.enqueue({"n": 2})
        self.assertEqual(caught.exception.operation, "fsync")
        self.assertEqual(caught.exception.errno, errno.EIO)
        self.assertIn("fdatasync", fs.trace[-1])
        before_calls, before_syncs = fs.calls, fs.trace.count("fdatasync default.000000.log")
        for attempt in (lambda: q.enqueue({"n": 3}), q.stats, lambda: q.lease(1), q.compact):
            with self.assertRaises(QueueClosedError):
                attempt()
        self.assertEqual(fs.calls, before_calls, "a poisoned handle touched the disk")
        self.assertEqual(fs.trace.count("fdatasync default.000000.log"), before_syncs,
                         "fsync was retried after it failed")
        q.close()
        with nobroker.Queue(self.tmp / "q") as again:
            payloads = [job.payload for job in again.list_jobs()]
            self.assertIn(kept.payload, payloads)
            self.assertNotIn({"n": 3}, payloads)
            # {"n": 2} is indeterminate: present or not, but whole
            self.assertLessEqual(len(payloads), 2)
            again.enqueue({"n": 4})  # the reopened queue takes writes again

    def test_failed_fsync_with_dropped_pages_recovers_the_synced_prefix(self) -> None:
        fs = FaultFS()
        q = self.open(fs)
        kept = [q.enqueue({"n": i}) for i in range(3)]
        fs.arm(fs.mutating + 2, errno.EIO, "drop")
        with self.assertRaises(StorageError):
            q.enqueue_many([{"n": 10}, {"n": 11}])
        q.close()
        with nobroker.Queue(self.tmp / "q") as again:
            self.assertEqual([job.id for job in again.list_jobs()], [job.id for job in kept])

    def test_failed_directory_fsync_of_the_flip_poisons(self) -> None:
        fs = FaultFS()
        q = self.open(fs)
        job = q.enqueue({"n": 1})
        # compaction syncs the directory four times: the new file under its temporary
        # name, its rename to the real one, the flip of NAME.current, the cleanup
        fs.arm_matching("fsync_dir", 3, errno.EIO)
        with self.assertRaises(CompactionError):
            q.compact()
        with self.assertRaises(QueueClosedError):
            q.enqueue({"n": 2})
        q.close()
        with nobroker.Queue(self.tmp / "q") as again:
            self.assertEqual([j.id for j in again.list_jobs()], [job.id])
            again.enqueue({"n": 3})

    def test_failed_fsync_of_the_new_generation_keeps_the_old_one(self) -> None:
        fs = FaultFS()
        q = self.open(fs)
        job = q.enqueue({"n": 1})
        fs.arm_matching("fdatasync", 1, errno.EIO)
        with self.assertRaises(CompactionError):
            q.compact()
        self.assertEqual(q.generation, 0)
        self.assertFalse((self.tmp / "q" / "default.000001.log").exists())
        self.assertFalse((self.tmp / "q" / "default.current").exists())
        q.enqueue({"n": 2})  # the live generation was never at risk
        q.close()
        with nobroker.Queue(self.tmp / "q") as again:
            self.assertEqual(again.generation, 0)
            self.assertEqual(len(again.list_jobs()), 2)
            self.assertEqual(again.list_jobs()[0].id, job.id)


class _StallingFS(FaultFS):
    """The first fdatasync waits until a second thread has written its batch, then fails
    and drops the dirty pages. Any later fdatasync runs only after that failure, and
    succeeds, as a second fsync after a failed write-back does on Linux (the error is
    reported once per open file)."""

    def __init__(self) -> None:
        super().__init__()
        self.second_written = threading.Event()
        self.first_failed = threading.Event()
        self.armed = False
        self.syncs = 0

    def pwrite(self, fd: int, data: bytes, offset: int) -> int:
        written = super().pwrite(fd, data, offset)
        if self.armed and self.syncs >= 1:
            self.second_written.set()
        return written

    def fdatasync(self, fd: int) -> None:
        if not self.armed:
            return super().fdatasync(fd)
        self.syncs += 1
        if self.syncs == 1:
            if not self.second_written.wait(10):
                raise AssertionError("the second writer never came")
            self.arm_matching("fdatasync", 1, errno.EIO, "drop")
            try:
                super().fdatasync(fd)
            finally:
                self.first_failed.set()
        else:
            self.first_failed.wait(10)
            self.target = None  # no more faults
            super().fdatasync(fd)


class ConcurrentFsyncFailureTest(TempDirTestCase):
    """Threads sharing one handle share its fsyncs; a failure must reach all of them."""

    def test_a_second_fsync_after_a_failed_one_does_not_make_a_success(self) -> None:
        fs = _StallingFS()
        q = file_queue(self.tmp / "q", fs=fs, clock=FakeClock())
        durable = q.enqueue("durable")
        fs.armed = True
        outcomes: dict[str, object] = {}

        def call(name: str) -> None:
            try:
                outcomes[name] = q.enqueue(name)
            except NobrokerError as exc:
                outcomes[name] = exc

        first = threading.Thread(target=call, args=("first",))
        first.start()
        deadline = time.monotonic() + 10
        while fs.syncs < 1 and time.monotonic() < deadline:  # first is inside its fsync
            time.sleep(0.001)
        second = threading.Thread(target=call, args=("second",))
        second.start()
        first.join(20)
        second.join(20)
        q.close()
        self.assertIsInstance(outcomes["first"], StorageError)
        with nobroker.Queue(self.tmp / "q") as again:
            payloads = [job.payload for job in again.list_jobs()]
        self.assertIn(durable.payload, payloads)
        if isinstance(outcomes["second"], nobroker.Job):
            self.assertIn("second", payloads,
                          "enqueue returned after the handle's fsync had failed, and its "
                          "job was lost with the dropped pages")


class FailedCallTest(TempDirTestCase):
    """A call that fails after committing records still fsyncs them (or poisons), and
    never leaves its generation held open (LogFile.inflight), which would keep a
    retired generation from ever closing."""

    LOG = "fdatasync default.000000.log"

    def open(self, fs: FileSystem, clock: FakeClock | None = None) -> nobroker.Queue:
        return file_queue(self.tmp / "q", fs=fs, clock=clock or FakeClock())

    def test_a_call_whose_result_cannot_be_built_still_fsyncs_its_records(self) -> None:
        fs = FaultFS()
        q = self.open(fs)
        q.enqueue({"n": 1})
        job = q.lease_one()
        assert job is not None
        syncs = fs.trace.count(self.LOG)
        # The nack is committed under the lock; only then does building its view fail.
        with mock.patch.object(q.backend, "_view", side_effect=RuntimeError("view")):
            with self.assertRaisesRegex(RuntimeError, "view"):
                q.nack(job, error="boom")
        self.assertEqual(fs.trace.count(self.LOG), syncs + 1, "the committed nack not synced")
        self.assertEqual(store_of(q).log.inflight, 0)
        self.assertEqual(q.stats().pending, 1)  # the handle works on
        q.close()
        with nobroker.Queue(self.tmp / "q") as again:
            self.assertEqual(again.get(job.id).last_error, "boom")

    def test_expiries_recorded_by_a_call_that_then_fails_are_fsynced(self) -> None:
        fs, clock = FaultFS(), FakeClock()
        q = self.open(fs, clock)
        q.enqueue({"n": 1})
        q.enqueue({"n": 2})
        first, _second = q.lease(2, visibility_timeout=1)
        clock.advance(5)
        syncs = fs.trace.count(self.LOG)
        # The ack records `second`'s expiry as a batch of its own, then refuses the token.
        with self.assertRaises(NotLeasedError):
            q.ack(dataclasses.replace(first, token=(first.token or 0) + 1000))
        self.assertEqual(fs.trace.count(self.LOG), syncs + 1, "the committed expiry not synced")
        self.assertEqual(store_of(q).log.inflight, 0)
        q.close()

    def test_a_lease_whose_fsync_fails_releases_its_generation(self) -> None:
        for call in ("lease", "ack_and_lease"):
            with self.subTest(call):
                fs = FaultFS()
                q = self.open(fs)
                q.enqueue({"n": 1})
                q.enqueue({"n": 2})
                leased = q.lease_one()
                assert leased is not None
                fs.arm_matching("fdatasync", 1, errno.EIO)
                with self.assertRaises(StorageError):
                    if call == "lease":
                        q.lease(1)
                    else:
                        q.ack_and_lease(leased)
                self.assertEqual(store_of(q).log.inflight, 0, "the lease's pin leaked")
                q.close()
                shutil.rmtree(self.tmp / "q")


class WriteFailureTest(TempDirTestCase):
    """ENOSPC halfway through a record or a batch: clear error, clean log, nothing half done."""

    def test_enospc_halfway_through_a_batch_leaves_the_log_on_a_boundary(self) -> None:
        fs = FaultFS()
        q = file_queue(self.tmp / "q", fs=fs, clock=FakeClock())
        durable = [q.enqueue({"n": i}) for i in range(5)]
        big = [{"n": 100 + i, "pad": "x" * 3000} for i in range(40)]  # ~120 KiB: grows the file
        writes_before = sum(w.startswith("pwrite") for w in fs.trace)
        # Fail each pwrite of the big batch in turn, half-written then ENOSPC.
        for nth in (1, 2):  # the zero-fill that grows the file, then the batch itself
            fs.arm(fs.mutating + nth, errno.ENOSPC, "short")
            with self.assertRaises(StorageError) as caught:
                q.enqueue_many(big)
            self.assertEqual(caught.exception.errno, errno.ENOSPC)
            self.assertEqual(caught.exception.operation, "write")
            self.assertIn("No space left", str(caught.exception))
            self.assertEqual(q.stats().total, 5, "a failed batch became visible")
        self.assertGreater(sum(w.startswith("pwrite") for w in fs.trace), writes_before)
        q.enqueue({"n": 6})  # space came back: the same handle works on
        q.close()
        with nobroker.Queue(self.tmp / "q") as again:
            self.assertTrue(again.recovery.clean, again.recovery.describe())
            self.assertEqual([j.payload for j in again.list_jobs()],
                             [j.payload for j in durable] + [{"n": 6}])

    def test_enospc_in_the_middle_of_one_record(self) -> None:
        fs = FaultFS()
        q = file_queue(self.tmp / "q", fs=fs, clock=FakeClock())
        first = q.enqueue("first")
        fs.arm(fs.mutating + 1, errno.ENOSPC, "short")
        with self.assertRaises(StorageError):
            q.enqueue("x" * 500)
        size_after = os.path.getsize(store_of(q).live_log().path)
        self.assertEqual(q.stats().log_bytes, size_after, "the half record was not cut away")
        q.close()
        with nobroker.Queue(self.tmp / "q") as again:
            self.assertTrue(again.recovery.clean)
            self.assertEqual([j.id for j in again.list_jobs()], [first.id])

    def test_failed_cut_after_a_failed_write_poisons(self) -> None:
        fs = FaultFS()
        q = file_queue(self.tmp / "q", fs=fs, clock=FakeClock())
        first = q.enqueue("first")
        fs.arm(fs.mutating + 1, errno.EIO, "persist")  # the write and then the ftruncate fail
        with self.assertRaises(StorageError):
            q.enqueue("second")
        with self.assertRaises(QueueClosedError):
            q.enqueue("third")
        q.close()
        with nobroker.Queue(self.tmp / "q") as again:
            self.assertEqual([j.id for j in again.list_jobs()], [first.id])


_HOLDER = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
print("locked", flush=True)
time.sleep(120)
"""


@unittest.skipUnless(sys.platform.startswith("linux") or sys.platform == "darwin", "POSIX flock")
class LockHolderTest(TempDirTestCase):
    def start_holder(self) -> subprocess.Popen[str]:
        nobroker.Queue(self.tmp / "q").close()
        child = subprocess.Popen([sys.executable, "-c", _HOLDER, str(self.tmp / "q/default.lock")],
                                 stdout=subprocess.PIPE, text=True)
        assert child.stdout is not None
        self.addCleanup(child.stdout.close)
        self.addCleanup(lambda: (child.poll() is None and child.kill(), child.wait()))
        self.assertEqual(child.stdout.readline().strip(), "locked")
        return child

    def test_live_holder_gives_lock_timeout_error_naming_its_pid(self) -> None:
        child = self.start_holder()
        started = time.monotonic()
        with self.assertRaises(LockTimeoutError) as caught:
            nobroker.Queue(self.tmp / "q", lock_timeout=0.3)
        waited = time.monotonic() - started
        self.assertGreaterEqual(waited, 0.3)
        self.assertLess(waited, 5.0)
        if os.path.exists("/proc/locks"):
            self.assertEqual(caught.exception.holder_pid, child.pid)
            self.assertIn(f"pid {child.pid}", str(caught.exception))

    def test_killed_holder_frees_the_lock_at_once(self) -> None:
        child = self.start_holder()
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        started = time.monotonic()
        with nobroker.Queue(self.tmp / "q", lock_timeout=30) as q:
            q.enqueue("after the holder died")
        self.assertLess(time.monotonic() - started, 2.0)

    def test_holder_killed_while_waiting_lets_the_waiter_in(self) -> None:
        child = self.start_holder()
        threading.Timer(0.3, os.kill, (child.pid, signal.SIGKILL)).start()
        started = time.monotonic()
        with nobroker.Queue(self.tmp / "q", lock_timeout=20) as q:
            self.assertEqual(q.stats().total, 0)
        self.assertLess(time.monotonic() - started, 5.0)


class NetworkFilesystemTest(TempDirTestCase):
    def test_network_mount_is_refused_with_a_clear_error(self) -> None:
        for kind in ("nfs", "nfs4", "cifs", "smb3", "fuse.sshfs"):
            with mock.patch("nobroker.file.opening.filesystem_type", return_value=kind):
                with self.assertRaises(UnsafeFilesystemError) as caught:
                    nobroker.Queue(self.tmp / kind)
            message = str(caught.exception)
            self.assertIn(kind, message)
            self.assertIn("network file system", message)
            self.assertIn("allow_network_fs=True", message)
            self.assertFalse((self.tmp / kind / "default.000000.log").exists())

    def test_opting_in_opens_the_queue(self) -> None:
        with mock.patch("nobroker.file.opening.filesystem_type", return_value="nfs4"):
            with nobroker.Queue(self.tmp / "q", allow_network_fs=True) as q:
                q.enqueue("on nfs, at my own risk")
                self.assertEqual(q.stats().total, 1)

    def test_local_file_systems_are_not_refused(self) -> None:
        for kind in ("ext4", "xfs", "btrfs", "tmpfs", "apfs", None):
            with mock.patch("nobroker.file.opening.filesystem_type", return_value=kind):
                nobroker.Queue(self.tmp / str(kind)).close()

    @unittest.skipUnless(os.path.exists("/proc/self/mountinfo"), "Linux mountinfo")
    def test_filesystem_type_reads_the_real_mount_table(self) -> None:
        kind = filesystem_type(str(self.tmp))
        self.assertIsInstance(kind, str)
        self.assertTrue(kind)
        self.assertEqual(filesystem_type("/proc"), "proc")

    def test_filesystem_type_picks_the_innermost_mount(self) -> None:
        table = "\n".join([
            "22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw",
            "40 22 0:50 / /mnt/share rw - nfs4 server:/export rw",
            "41 40 0:51 / /mnt/share/local rw - tmpfs tmpfs rw",
            "42 22 0:52 / /mnt/my\\040files rw - cifs //srv/files rw",
            "43 22 0:53 / /mnt/sharebut rw - ext4 /dev/sdb1 rw",
        ]) + "\n"
        with mock.patch("builtins.open", mock.mock_open(read_data=table)):
            self.assertEqual(filesystem_type("/mnt/share/jobs"), "nfs4")
            self.assertEqual(filesystem_type("/mnt/share"), "nfs4")
            self.assertEqual(filesystem_type("/mnt/share/local/jobs"), "tmpfs")
            self.assertEqual(filesystem_type("/mnt/my files/q"), "cifs")
            self.assertEqual(filesystem_type("/mnt/sharebut/q"), "ext4")
            self.assertEqual(filesystem_type("/home/q"), "ext4")


@unittest.skipIf(os.name == "nt", "POSIX permission bits")
class PermissionsTest(TempDirTestCase):
    def test_queue_files_and_directory_are_private_to_their_owner(self) -> None:
        for umask in (0o022, 0o000):
            old = os.umask(umask)
            try:
                directory = self.tmp / f"umask{umask:o}" / "q"
                clock = FakeClock()
                with nobroker.Queue(directory, clock=clock) as q:
                    q.enqueue({"secret": "hunter2"})
                    q.compact()
                    q.enqueue({"secret": "swordfish"})
                    size = q.stats().log_bytes
                # a torn tail makes a side file
                log = directory / "default.000001.log"
                with open(log, "r+b") as handle:
                    handle.seek(size)
                    handle.write(b"\x07" * 20)
                with nobroker.Queue(directory) as q:
                    self.assertIsNotNone(q.recovery.side_file)
            finally:
                os.umask(old)
            self.assertEqual(stat.S_IMODE(os.stat(directory).st_mode), 0o700)
            names = sorted(os.listdir(directory))
            self.assertIn("default.lock", names)
            self.assertIn("default.current", names)
            self.assertTrue(any(".torn-" in n for n in names), names)
            for name in names:
                mode = stat.S_IMODE(os.stat(directory / name).st_mode)
                self.assertEqual(mode, 0o600, f"{name} has mode {mode:o} under umask {umask:o}")


if __name__ == "__main__":
    unittest.main()
