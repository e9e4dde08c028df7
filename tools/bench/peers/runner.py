"""tools/bench/peers/run.py's workloads: the result cells, the sizes, and the Runner
that runs every System interleaved, round by round, with the baseline first.
"""

from __future__ import annotations

import importlib
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tools.bench.common import framed_sizes, log_record_bytes, median, small_payloads
from tools.bench.peers.nobroker_system import Baseline, NobrokerSystem
from tools.bench.peers.redis_systems import RQSystem
from tools.bench.peers.systems import NotApplicable, Skip, System, skip_text


@dataclass
class Cell:
    """One system's result in one workload."""

    seconds: float | None = None  # median seconds for `ops` operations (or per open)
    ops: int = 0
    value: float | None = None  # for memory: bytes per job
    text: str = ""
    skipped: str = ""  # "skipped: ..." or "n/a: ..."
    samples: list[float] = field(default_factory=list)

    def speed(self) -> float | None:
        if self.seconds is None or self.seconds <= 0:
            return None
        return self.ops / self.seconds


@dataclass
class Workload:
    key: str
    title: str
    kind: str  # "rate" (ops/s, higher better), "time" (lower better), "bytes" (lower better)
    cells: dict[str, Cell] = field(default_factory=dict)
    baselines: dict[str, Cell] = field(default_factory=dict)
    note: str = ""


@dataclass
class Sizes:
    rounds: int
    enqueue_ops: int
    batch: int
    take_ops: int
    cold_n: int
    drain_jobs: int


def sizes_for(quick: bool, rounds: int | None) -> Sizes:
    s = (Sizes(2, 100, 2_000, 100, 5_000, 2_000) if quick
         else Sizes(5, 300, 10_000, 300, 50_000, 8_000))
    if rounds is not None:
        s.rounds = rounds
    return s


class Runner:
    def __init__(self, sizes: Sizes, root: Path, systems: list[System],
                 skipped: dict[str, str], log: Callable[[str], None]) -> None:
        self.sizes = sizes
        self.root = root
        self.systems = systems
        self.skipped = skipped  # system name -> reason, for systems that could not be built
        self.log = log
        self._n = 10_000_000
        self.baseline = Baseline(self.record_size())

    def payloads(self, count: int) -> list[dict[str, Any]]:
        first, self._n = self._n, self._n + count
        return small_payloads(first, count)

    def new_dir(self, label: str) -> Path:
        safe = "".join(c if c.isalnum() else "-" for c in label)[:40]
        return Path(tempfile.mkdtemp(prefix=f"{safe}-", dir=self.root))

    def _skip_all(self, wl: Workload) -> None:
        for name, why in self.skipped.items():
            wl.cells[name] = Cell(skipped=f"skipped: {why}")

    def _order(self, wl: Workload) -> None:
        """Cells in the order of the systems list, then the skipped systems."""
        order = [s.name for s in self.systems] + list(self.skipped)
        wl.cells = {n: wl.cells[n] for n in order if n in wl.cells} | wl.cells

    def interleaved(self, wl: Workload, ops: int,
                    prepare: Callable[[System, Path], None],
                    measure: Callable[[System, Path], float],
                    finish: Callable[[System, Path], None]) -> None:
        """prepare each system, then rounds x (measure each system), then finish each."""
        self._skip_all(wl)
        live: list[tuple[System, Path]] = []
        for s in self.systems:
            d = self.new_dir(s.name)
            try:
                prepare(s, d)
                live.append((s, d))
            except Skip as exc:
                wl.cells[s.name] = Cell(skipped=skip_text(exc))
            except Exception as exc:
                traceback.print_exc(file=sys.stderr)
                wl.cells[s.name] = Cell(skipped=f"skipped: error: {type(exc).__name__}: {exc}")
        samples: dict[str, list[float]] = {s.name: [] for s, _ in live}
        failed: dict[str, str] = {}
        for _ in range(self.sizes.rounds):
            for s, d in live:
                if s.name in failed:
                    continue
                try:
                    samples[s.name].append(measure(s, d))
                except Skip as exc:
                    failed[s.name] = skip_text(exc)
                except Exception as exc:
                    traceback.print_exc(file=sys.stderr)
                    failed[s.name] = f"skipped: error: {type(exc).__name__}: {exc}"
        for s, d in live:
            try:
                finish(s, d)
            except Exception:
                traceback.print_exc(file=sys.stderr)
            if s.name in failed:
                wl.cells[s.name] = Cell(skipped=failed[s.name])
            else:
                wl.cells[s.name] = Cell(seconds=median(samples[s.name]), ops=ops,
                                        samples=samples[s.name])
            shutil.rmtree(d, ignore_errors=True)
        self._order(wl)

    # ---- workloads

    def record_size(self) -> int:
        nobroker = importlib.import_module("nobroker")
        d = self.new_dir("recsize")
        with nobroker.Queue(str(d)) as q:
            for p in self.payloads(50):
                q.enqueue(p)
        sizes = framed_sizes(d).get(1, [])
        if len(sizes) >= 50:
            size = round(sum(sizes) / len(sizes))
        else:
            size = round(log_record_bytes(d) / 50)
        shutil.rmtree(d, ignore_errors=True)
        return size

    def with_baseline(self, wl: Workload, text: str, ops: int,
                      prepare: Callable[[System, Path], None],
                      measure: Callable[[System, Path], float],
                      finish: Callable[[System, Path], None]) -> Workload:
        """interleaved() with the physical baseline as the first contender of every round."""
        self.systems.insert(0, self.baseline)
        try:
            self.interleaved(wl, ops, prepare, measure, finish)
        finally:
            self.systems.remove(self.baseline)
        cell = wl.cells.pop(self.baseline.name)
        cell.text = text
        wl.baselines[self.baseline.name] = cell
        return wl

    def wl_enqueue(self) -> Workload:
        n = self.sizes.enqueue_ops
        wl = Workload("enqueue", "durable single enqueue", "rate",
                      note=f"{n} enqueues per round, one call each")

        def measure(s: System, d: Path) -> float:
            return s.enqueue_loop(self.payloads(n))

        return self.with_baseline(
            wl, f"raw O_APPEND write+fsync of {self.baseline.size} B", n,
            lambda s, d: s.open(d), measure, lambda s, d: s.close())

    def wl_batch(self) -> Workload:
        b = self.sizes.batch
        wl = Workload("batch", f"batch enqueue of {b:,}", "rate",
                      note="one call (or one transaction) per batch; rate in jobs/s")

        def measure(s: System, d: Path) -> float:
            payloads = self.payloads(b)
            t = time.perf_counter()
            s.enqueue_batch(payloads)
            return time.perf_counter() - t

        def prepare(s: System, d: Path) -> None:
            if not s.supports_batch:
                raise NotApplicable("no batch API")
            s.open(d)

        return self.with_baseline(wl, "json.dumps(list of the payloads)", b, prepare, measure,
                                  lambda s, d: s.close())

    def wl_take_ack(self) -> Workload:
        n = self.sizes.take_ops
        wl = Workload("take_ack", "take + ack round trip, one consumer", "rate",
                      note=f"{n} jobs per round, queued before the clock starts")

        def measure(s: System, d: Path) -> float:
            s.prefill(self.payloads(n))
            return s.take_ack(n)

        return self.with_baseline(
            wl, f"raw O_APPEND write+fsync of {self.baseline.size} B", n,
            lambda s, d: s.open(d), measure, lambda s, d: s.close())

    def wl_cold_open(self) -> Workload:
        n = self.sizes.cold_n
        wl = Workload("cold_open", f"cold open with {n:,} pending, to first job", "time",
                      note="open the closed store + take one job; warm page cache "
                           "(RQ: restart redis-server on its AOF)")

        def prepare(s: System, d: Path) -> None:
            s.open(d)
            s.prefill(small_payloads(0, n))
            if not isinstance(s, RQSystem):  # RQ's jobs stay in the server it restarts
                s.close()

        def finish(s: System, d: Path) -> None:
            if isinstance(s, RQSystem):
                s.close()

        return self.with_baseline(wl, "json.loads of every record in nobroker's log", 1,
                                  prepare, lambda s, d: s.cold_open(d), finish)

    def wl_memory(self) -> Workload:
        n = self.sizes.cold_n
        wl = Workload("memory", f"memory per pending job ({n:,} jobs)", "bytes",
                      note="nobroker: RSS growth of a warmed-up process opening the queue "
                           "and leasing once; "
                           "RQ: redis used_memory growth")
        self._skip_all(wl)
        for s in self.systems:
            d = self.new_dir(s.name)
            try:
                if isinstance(s, NobrokerSystem):
                    if s.two_calls:
                        continue
                    s.open(d)
                    s.prefill(small_payloads(0, n))
                    s.close()
                value, how = s.memory_per_job(d, n)
                wl.cells[s.name] = Cell(value=value, text=how)
            except Skip as exc:
                wl.cells[s.name] = Cell(skipped=skip_text(exc))
            except Exception as exc:
                traceback.print_exc(file=sys.stderr)
                wl.cells[s.name] = Cell(skipped=f"skipped: error: {type(exc).__name__}: {exc}")
            finally:
                shutil.rmtree(d, ignore_errors=True)
        self._order(wl)
        return wl
