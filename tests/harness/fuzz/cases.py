"""Running fuzz cases: open each damaged queue under a watchdog and judge the outcome.

tests/file/test_fuzz.py runs a bounded number; tools/torture/run.py calls `fuzz(count=...)`.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import logging
import os
import shutil
import signal
import tempfile
import time
import tracemalloc
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

from harness.support import FakeClock, scratch_root, store_of
from nobroker import CorruptLogError, NobrokerError, Queue

from .corpus import (
    CASE_SECONDS,
    IGNORED,
    MEMORY_LIMIT,
    MEMORY_SAMPLE,
    REGRESSIONS,
    Corpus,
    Files,
    build_corpus,
)
from .mutations import make_case

# --------------------------------------------------------------------------
# running one case


class Hang(Exception):
    pass


@contextlib.contextmanager
def watchdog(seconds: float) -> Iterator[None]:
    """Raise Hang in the main thread after `seconds` (POSIX main thread only)."""
    usable = hasattr(signal, "setitimer") and _in_main_thread()
    if not usable:
        yield
        return

    def fire(signum: int, frame: object) -> None:
        raise Hang(f"no answer within {seconds}s")

    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _in_main_thread() -> bool:
    import threading
    return threading.current_thread() is threading.main_thread()


def digest(directory: str) -> dict[str, str]:
    found = {}
    for entry in sorted(os.listdir(directory)):
        if entry in IGNORED:
            continue
        path = os.path.join(directory, entry)
        if os.path.isfile(path):
            with open(path, "rb") as handle:
                found[entry] = hashlib.sha256(handle.read()).hexdigest()
        else:
            found[entry] = "dir"
    return found


def materialise(directory: str, files: Files) -> None:
    os.makedirs(directory, mode=0o700)
    for name, data in files.items():
        fd = os.open(os.path.join(directory, name), os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)


def exercise(directory: str, clock: FakeClock) -> tuple[str, str | None]:
    """Open and use the queue. Returns (outcome, problem or None)."""
    try:
        q = Queue(directory, clock=clock, auto_compact=None)
    except CorruptLogError as exc:
        if not isinstance(exc.offset, int) or exc.offset < 0 or not exc.reason:
            return "corrupt", f"CorruptLogError without a usable offset/reason: {exc!r}"
        return "corrupt", None
    problem = None
    try:
        repaired = not q.recovery.clean
        stats = q.stats()
        jobs = q.list_jobs()
        if len(jobs) != stats.total:
            problem = f"stats say {stats.total} jobs, list gives {len(jobs)}"
        clock.advance(1e6)  # every lease expires, every delay is due
        leased = q.lease(5)
        for job in leased[:2]:
            q.ack(job)
        q.ack_many_and_lease(leased[2:], 2)  # its ACKs and the next LEASE, one batch
        q.enqueue({"fuzz": "after"})
        q.compact()
        before = store_of(q).state.fingerprint()
    except NobrokerError as exc:
        # Typed and honest (e.g. a payload record found unreadable later): allowed.
        q.close()
        return f"used-then-{type(exc).__name__}", None
    q.close()
    with Queue(directory, clock=clock, auto_compact=None) as again:
        if not again.recovery.clean:
            problem = f"reopen still repairs: {again.recovery.describe()}"
        elif store_of(again).state.fingerprint() != before:
            problem = "reopen gives a different state"
    return ("repaired" if repaired else "clean"), problem


@dataclass
class FuzzReport:
    cases: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)
    peak_memory: int = 0
    memory_samples: int = 0
    seconds: float = 0.0

    def summary(self) -> str:
        kinds = ", ".join(f"{k} {v}" for k, v in self.outcomes.most_common())
        return (f"{self.cases} fuzz cases in {self.seconds:.1f}s ({kinds}); "
                f"peak traced memory {self.peak_memory / 1e6:.1f} MB over "
                f"{self.memory_samples} sampled cases; failures: {len(self.failures)}")


def run_case(corpus: Corpus, seed: int, index: int, scratch: str,
             report: FuzzReport) -> None:
    files, steps = make_case(corpus, seed, index)
    directory = os.path.join(scratch, f"c{seed}-{index}")
    case_id = f"case ({seed}, {index}): {'; '.join(steps)}"
    materialise(directory, files)
    before = digest(directory)
    traced = index % MEMORY_SAMPLE == 0
    if traced:
        tracemalloc.start()
    try:
        with watchdog(CASE_SECONDS):
            outcome, problem = exercise(directory, FakeClock(2_000_000.0))
    except Hang as exc:
        outcome, problem = "hang", str(exc)
    except Exception as exc:
        outcome, problem = "crash", f"{type(exc).__name__}: {exc}"[:500]
    finally:
        if traced:
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            report.memory_samples += 1
            report.peak_memory = max(report.peak_memory, peak)
            if peak > MEMORY_LIMIT:
                report.failures.append(f"{case_id}: traced peak {peak} bytes > {MEMORY_LIMIT}")
    if outcome == "corrupt" and problem is None and digest(directory) != before:
        problem = "CorruptLogError, yet files changed"
    report.cases += 1
    report.outcomes[outcome] += 1
    if problem is not None:
        report.failures.append(f"{case_id}: {outcome}: {problem}")
    shutil.rmtree(directory, ignore_errors=True)


@contextlib.contextmanager
def fuzz_root(prefix: str) -> Iterator[tuple[str, Corpus]]:
    """A scratch directory holding the corpus (seed 0), removed afterwards; the
    nobroker logger is silenced meanwhile (repairs log warnings, and thousands of
    them say nothing here)."""
    root = tempfile.mkdtemp(prefix=prefix, dir=scratch_root())
    logger = logging.getLogger("nobroker")
    saved = logger.disabled
    logger.disabled = True
    try:
        yield root, build_corpus(os.path.join(root, "corpus"), seed=0)
    finally:
        logger.disabled = saved
        shutil.rmtree(root, ignore_errors=True)


def fuzz(count: int, seed: int = 0, *, deadline: float | None = None,
         regressions: bool = True) -> FuzzReport:
    """Run `count` cases of `seed` (and the regression cases), or until `deadline`."""
    report = FuzzReport()
    started = time.perf_counter()
    with fuzz_root("nobroker-fuzz-") as (root, corpus):
        fixed = list(REGRESSIONS) if regressions else []
        cases = itertools.chain(fixed, ((seed, i) for i in range(count)))
        for case_seed, index in cases:
            if deadline is not None and time.monotonic() > deadline:
                break
            run_case(corpus, case_seed, index, root, report)
    report.seconds = time.perf_counter() - started
    return report
