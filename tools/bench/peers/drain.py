"""tools/bench/peers/run.py's drain: N = 1, 2, 4 consumer processes emptying one
prefilled queue, for nobroker's Workers, Huey's process consumer and
persist-queue processes, and the drain's table and checks.
"""

from __future__ import annotations

import importlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tools.bench.scaling as bench_scaling
from tools.bench.common import (
    REPO,
    child_error,
    fmt_ratio,
    gather_at_barrier,
    median,
    small_payloads,
)
from tools.bench.peers.systems import Skip, die_with_parent, peer_module, skip_text

HUEY_APP = """\
# The Huey app of tools/bench/peers/drain.py; written to the scratch directory
# so that huey_consumer can import it (PYTHONPATH holds it and the repository).
import os

from huey import SqliteHuey

from tools.bench.scaling import record

huey = SqliteHuey("bench", filename=os.environ["BENCH_HUEY_DB"], fsync=True)
STAMPS = os.environ["BENCH_STAMPS"]


@huey.task()
def noop(i):
    record(STAMPS, float(i))


def prefill(jobs):
    huey.storage.conn.execute("pragma synchronous=OFF")  # untimed
    for i in range(jobs):
        noop(i)
"""


class DrainSystem:
    """One system's way of running N consumer processes over a prefilled queue."""

    name = "?"
    durability = "?"

    def drain(self, work: Path, workers: int, jobs: int) -> bench_scaling.Drain:
        raise NotImplementedError


class NobrokerDrain(DrainSystem):
    name = "nobroker Worker processes"
    durability = "write-ahead log, fsync per call; ack and next lease in one call"

    def __init__(self) -> None:
        importlib.import_module("nobroker")

    def drain(self, work: Path, workers: int, jobs: int) -> bench_scaling.Drain:
        return bench_scaling.drain(work, workers, jobs)


class HueyDrain(DrainSystem):
    name = "huey SqliteHuey consumer -k process (dequeue deletes: no ack)"

    def __init__(self) -> None:
        peer_module("huey")
        self.durability = "SQLite WAL, synchronous=FULL: fsync per commit (SqliteHuey fsync=True)"

    def drain(self, work: Path, workers: int, jobs: int) -> bench_scaling.Drain:
        stamps = bench_scaling.fresh(work / "stamps")
        app = bench_scaling.fresh(work / "app")
        (app / "bench_huey_app.py").write_text(HUEY_APP, encoding="utf-8")
        env = dict(os.environ, BENCH_HUEY_DB=str(app / "huey.db"), BENCH_STAMPS=str(stamps))
        env["PYTHONPATH"] = os.pathsep.join([str(app), str(REPO), env.get("PYTHONPATH", "")])
        subprocess.run([sys.executable, "-c", f"import bench_huey_app; "
                        f"bench_huey_app.prefill({jobs})"], env=env, check=True, cwd=app)
        log = app / "consumer.log"  # Huey logs its own lock timeouts; keep them out of the report
        with open(log, "wb") as sink:
            consumer = subprocess.Popen(
                [sys.executable, "-m", "huey.bin.huey_consumer", "bench_huey_app.huey",
                 "-k", "process", "-w", str(workers), "-n", "-q"],
                env=env, cwd=app, stdin=subprocess.DEVNULL, stdout=sink, stderr=sink,
                start_new_session=True, preexec_fn=die_with_parent)
        try:
            deadline = time.monotonic() + 300
            while bench_scaling.stamp_count(stamps) < jobs:  # waiting for the end, not timing
                if consumer.poll() is not None:
                    tail = log.read_text(errors="replace").strip().splitlines()[-1:]
                    raise RuntimeError(f"huey_consumer exited with {consumer.returncode}: "
                                       f"{' '.join(tail)}")
                if time.monotonic() > deadline:
                    raise RuntimeError("huey_consumer did not finish in 300 s")
                time.sleep(0.02)
        finally:
            consumer.send_signal(signal.SIGINT)  # graceful: its workers are idle by now
            try:
                consumer.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(consumer.pid, signal.SIGKILL)
                consumer.wait()
        return bench_scaling.drain_outcome(stamps, jobs)


def _child_persistqueue(path: str, stamps_dir: str, barrier: Any, out: Any) -> None:
    """Process body for PersistQueueDrain: get + ack until the queue reports Empty."""
    try:
        pq = importlib.import_module("persistqueue")
        q = pq.SQLiteAckQueue(path, auto_commit=True, multithreading=False)
        barrier.wait(timeout=120)
        taken = 0
        while True:
            try:
                item = q.get(block=False, raw=True)
            except pq.Empty:
                break
            bench_scaling.record(stamps_dir, float(item["data"]["user"]))
            q.ack(id=item["pqid"])
            taken += 1
        q.close()
        out.put(("ok", taken))
    except BaseException as exc:  # reported to the parent
        barrier.abort()
        out.put(("error", child_error(exc)))


class PersistQueueDrain(DrainSystem):
    name = "persist-queue SQLiteAckQueue processes"

    def __init__(self) -> None:
        self.pq = peer_module("persistqueue")
        self.durability = "SQLite WAL, synchronous=FULL: fsync per commit"

    def drain(self, work: Path, workers: int, jobs: int) -> bench_scaling.Drain:
        stamps, store = bench_scaling.fresh(work / "stamps"), bench_scaling.fresh(work / "pq")
        q = self.pq.SQLiteAckQueue(str(store), auto_commit=True, multithreading=False)
        q._putter.execute("pragma synchronous=OFF")  # untimed prefill
        for p in small_payloads(0, jobs):
            q.put(p)
        q.close()
        gather_at_barrier([(_child_persistqueue, (str(store), str(stamps)))] * workers)
        return bench_scaling.drain_outcome(stamps, jobs)


DRAIN_COUNTS = (1, 2, 4)


@dataclass
class DrainTable:
    """Each drain system's runs at each N, in round order."""

    jobs: int
    runs: dict[str, dict[int, list[bench_scaling.Drain]]] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    durability: dict[str, str] = field(default_factory=dict)

    def rate(self, name: str, workers: int) -> float:
        return median([d.rate for d in self.runs[name][workers]])


def run_drains(jobs: int, rounds: int, root: Path, log: Callable[[str], None]) -> DrainTable:
    """Every round: each N, each system (nobroker, Huey, persist-queue in rotation)."""
    table = DrainTable(jobs)
    systems: list[DrainSystem] = []
    for make in (NobrokerDrain, HueyDrain, PersistQueueDrain):
        try:
            systems.append(make())
        except Skip as exc:
            table.skipped[make.name] = skip_text(exc)
    for s in systems:
        table.runs[s.name] = {n: [] for n in DRAIN_COUNTS}
        table.durability[s.name] = s.durability
    for r in range(rounds):
        for workers in DRAIN_COUNTS:
            for s in list(systems):
                work = Path(tempfile.mkdtemp(prefix="drain-", dir=root))
                try:
                    table.runs[s.name][workers].append(s.drain(work, workers, jobs))
                except Exception as exc:
                    traceback.print_exc(file=sys.stderr)
                    table.skipped[s.name] = f"skipped: error: {type(exc).__name__}: {exc}"
                    del table.runs[s.name]
                    systems.remove(s)
                finally:
                    shutil.rmtree(work, ignore_errors=True)
        log(f"    round {r + 1}/{rounds} done")
    return table


def drain_rows(table: DrainTable) -> tuple[list[str], list[list[str]]]:
    """The drain as one table: a system per row, N = 1, 2, 4 and the ratios as columns."""
    headers = ["system", "durability", *(f"N = {n}" for n in DRAIN_COUNTS), "2 / 1", "4 / 1",
               "delivered twice (all rounds, N = 1 / 2 / 4)"]
    nb = NobrokerDrain.name
    rows = []
    for name, runs in table.runs.items():
        cells = [name, table.durability[name]]
        for n in DRAIN_COUNTS:
            text = f"{table.rate(name, n):,.0f}/s"
            if name != nb and nb in table.runs:
                text += f" (nobroker {fmt_ratio(table.rate(nb, n) / table.rate(name, n))})"
            cells.append(text)
        cells += [fmt_ratio(table.rate(name, 2) / table.rate(name, 1)),
                  fmt_ratio(table.rate(name, 4) / table.rate(name, 1)),
                  " / ".join(str(sum(d.duplicates for d in runs[n])) for n in DRAIN_COUNTS)]
        rows.append(cells)
    for name, why in table.skipped.items():
        rows.append([name, "—", why, *["—"] * (len(headers) - 3)])
    return headers, rows


def drain_checks(table: DrainTable) -> list[str]:
    """Issue #14's peer target for the drain, judged on this run."""
    nb, huey = NobrokerDrain.name, HueyDrain.name
    if nb not in table.runs or huey not in table.runs:
        return []
    lines = []
    for n in DRAIN_COUNTS:
        r = table.rate(nb, n) / table.rate(huey, n)
        lines.append(f"{n} worker process{'es' if n > 1 else ''} draining: nobroker ahead of "
                     f"Huey's process consumer: nobroker {fmt_ratio(r)} -> "
                     f"{'PASS' if r > 1.0 else 'MISS'}")
    return lines


def drain_title(table: DrainTable, rounds: int) -> str:
    return (f"N consumer processes draining one queue of {table.jobs:,} no-op jobs "
            f"(steady-state jobs/s, medians of {rounds} interleaved rounds; "
            "\"nobroker Nx\": above 1 = nobroker ahead)")
