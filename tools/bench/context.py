"""What every row of tools/bench/run.py shares: the sizes (Config), the result row (Row),
the PASS/MISS verdict, the Missing feature check, and the run Context (scratch
directories, payload numbers, nobroker's record size, the big queue built once).

Standard library only, plus nobroker (imported through nobroker_api()).
"""

from __future__ import annotations

import importlib
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tools.bench.common import fmt_bytes, fmt_ratio, framed_sizes, log_record_bytes, small_payloads

ENQUEUE_TYPE = 1  # records.RecordType.ENQUEUE, per docs/FORMAT.md


# --------------------------------------------------------------------------
# configuration and results


@dataclass
class Config:
    quick: bool
    big: bool
    rounds: int
    enqueue_ops: int  # single enqueues per round
    thread_ops: int  # enqueues per round, split over 4 threads
    proc_jobs: int  # enqueues per round, over 1 or 4 processes
    batch: int  # enqueue_many size
    ack_ops: int  # round trips per round
    ack_batch: int  # ack_many size
    big_n: int  # pending jobs for cold open / memory / stats / compaction
    stats_calls: int
    latency_samples: int
    idle_seconds: float
    drain_jobs: int  # prefilled jobs per drain (workers)
    mixed_jobs: int  # jobs the producer enqueues per mixed run

    @classmethod
    def make(cls, quick: bool, big: bool, rounds: int | None) -> Config:
        if quick:
            cfg = cls(quick, big, 2, 200, 400, 400, 1_000, 200, 1_000, 20_000, 2_000, 15, 2.0,
                      2_000, 1_000)
        else:
            cfg = cls(quick, big, 5, 1_000, 2_000, 2_000, 10_000, 1_000, 1_000, 200_000,
                      10_000, 50, 2.0, 8_000, 4_000)
        if big:
            cfg.big_n = 1_000_000
        if rounds is not None:
            cfg.rounds = rounds
        return cfg


@dataclass
class Row:
    key: str  # workload name (for --only and JSON)
    workload: str  # what the row measures, for humans
    nobroker: str = "—"
    baseline: str = "—"
    ratio: float | None = None
    target: str = "—"
    result: str = "info"
    note: str = ""
    data: dict[str, Any] = field(default_factory=dict)

    def cells(self) -> list[str]:
        return [self.workload, self.nobroker, self.baseline, fmt_ratio(self.ratio), self.target,
                self.result]


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


class Missing(Exception):
    """A nobroker feature this workload needs does not exist (yet)."""


def require(obj: object, *names: str) -> None:
    absent = [n for n in names if not hasattr(obj, n)]
    if absent:
        owner = obj.__name__ if isinstance(obj, type) else type(obj).__name__
        raise Missing(", ".join(f"{owner}.{n}" for n in absent))


def nobroker_api() -> Any:
    """The nobroker module, or Missing if it (or Queue) cannot be imported."""
    try:
        nobroker = importlib.import_module("nobroker")
    except ImportError as exc:
        raise Missing(f"nobroker ({exc})") from None
    if not hasattr(nobroker, "Queue"):
        raise Missing("nobroker.Queue")
    return nobroker


def worker_class() -> Any:
    """nobroker.Worker (or nobroker.worker.Worker), or Missing."""
    worker = getattr(nobroker_api(), "Worker", None)
    if worker is None:
        try:
            worker = importlib.import_module("nobroker.worker").Worker
        except (ImportError, AttributeError):
            raise Missing("nobroker.Worker") from None
    return worker


# --------------------------------------------------------------------------
# run context: scratch directories and shared fixtures


class Context:
    def __init__(self, cfg: Config, root: Path, log: Callable[[str], None]) -> None:
        self.cfg = cfg
        self.root = root
        self.log = log
        self._record_size: int | None = None
        self._big: Path | None = None
        self._next = 10_000_000  # payload numbers: distinct jobs, same digit count

    def new_dir(self, label: str) -> Path:
        return Path(tempfile.mkdtemp(prefix=f"{label}-", dir=self.root))

    def take(self, count: int) -> int:
        """Reserve `count` payload numbers; return the first."""
        first = self._next
        self._next += count
        return first

    def payloads(self, count: int) -> list[dict[str, Any]]:
        return small_payloads(self.take(count), count)

    def enqueue_record_size(self) -> int:
        """Mean framed size of nobroker's ENQUEUE record for the standard small job."""
        if self._record_size is None:
            nb = nobroker_api()
            d = self.new_dir("recsize")
            with nb.Queue(str(d)) as q:
                for p in self.payloads(50):
                    q.enqueue(p)
            sizes = framed_sizes(d).get(ENQUEUE_TYPE, [])
            if len(sizes) >= 50:
                self._record_size = round(sum(sizes) / len(sizes))
            else:  # unknown record types: fall back to bytes per call
                self._record_size = round(log_record_bytes(d) / 50)
            shutil.rmtree(d, ignore_errors=True)
        return self._record_size

    def big_queue(self) -> Path:
        """A queue directory holding cfg.big_n pending jobs (built once, with enqueue_many)."""
        if self._big is None:
            nb = nobroker_api()
            d = self.new_dir("big")
            n = self.cfg.big_n
            self.log(f"  building a log of {n:,} pending jobs (enqueue_many, 10k per call)...")
            t = time.perf_counter()
            with nb.Queue(str(d)) as q:
                done = 0
                while done < n:
                    k = min(10_000, n - done)
                    q.enqueue_many(small_payloads(done, k))
                    done += k
            size = sum(p.stat().st_size for p in d.glob("*.log"))
            self.log(f"  built in {time.perf_counter() - t:.1f} s; log files {fmt_bytes(size)}")
            self._big = d
        return self._big
