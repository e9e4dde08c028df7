"""tools/bench/peers/run.py's own side: nobroker as a System (Queue(fsync=True)), and the
Baseline System, the physical floor run as one more contender.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tools.bench.common import REPO, SRC, json_loads_log, log_files, raw_fsync_loop, small_payloads
from tools.bench.peers.systems import System, timed_first_job


class NobrokerSystem(System):
    name = "nobroker"
    takes = "lease: back after the visibility timeout"
    supports_batch = True

    def __init__(self, two_calls: bool = False) -> None:
        super().__init__()
        self.nb = importlib.import_module("nobroker")
        self.two_calls = two_calls
        if two_calls:
            self.name = "nobroker (lease_one + ack)"
        self.q: Any = None
        self.durability = "write-ahead log, fsync per call"

    def open(self, d: Path) -> None:
        self.q = self.nb.Queue(str(d), fsync=True)

    def close(self) -> None:
        self.q.close()

    def enqueue(self, payload: dict[str, Any]) -> None:
        self.q.enqueue(payload)

    def enqueue_batch(self, payloads: list[dict[str, Any]]) -> None:
        self.q.enqueue_many(payloads)

    def prefill(self, payloads: list[dict[str, Any]]) -> None:
        for i in range(0, len(payloads), 10_000):
            self.q.enqueue_many(payloads[i : i + 10_000])

    def take_ack(self, n: int) -> float:
        q = self.q
        if self.two_calls or not hasattr(q, "ack_and_lease"):
            t = time.perf_counter()
            for _ in range(n):
                job = q.lease_one()
                q.ack(job)
            return time.perf_counter() - t
        job = q.lease_one()
        t = time.perf_counter()
        for _ in range(n - 1):
            job = q.ack_and_lease(job)
        q.ack(job)
        return time.perf_counter() - t

    def cold_open(self, d: Path) -> float:
        return timed_first_job(lambda: self.nb.Queue(str(d), fsync=True),
                               lambda q: q.lease_one(), lambda q: q.close())

    def memory_per_job(self, d: Path, n: int) -> tuple[float, str]:
        code = (  # warm up on a one-job queue, then: open + first lease, RSS growth per job
            "import gc, sys, json, os, tempfile; sys.path[:0] = sys.argv[2:]\n"
            "from tools.bench.common import rss_bytes\n"
            "import nobroker\n"
            "w = nobroker.Queue(tempfile.mkdtemp(dir=os.path.dirname(sys.argv[1])))\n"
            "w.enqueue(1); w.ack(w.lease_one()); w.stats(); w.close()\n"
            "gc.collect(); r0 = rss_bytes(); q = nobroker.Queue(sys.argv[1]); q.lease_one()\n"
            "gc.collect(); r1 = rss_bytes(); s = q.stats(); q.close()\n"
            "print(json.dumps([r1 - r0, s.pending + s.leased]))\n"
        )
        out = subprocess.run([sys.executable, "-c", code, str(d), str(REPO),
                              str(SRC)], capture_output=True, text=True, check=True)
        delta, jobs = json.loads(out.stdout.strip().splitlines()[-1])
        return delta / max(1, jobs), "process RSS growth on open + first lease"


class Baseline(System):
    """The physical floor of each workload, run as a contender so it interleaves with the peers.

    enqueue and take+ack: the raw O_APPEND write+fsync loop with nobroker's
    record size; batch: json.dumps of the list; cold open: json.loads of every
    record of a nobroker log holding the same jobs (built untimed by prefill).
    """

    name = "baseline"
    supports_batch = True

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size
        self.dir: Path | None = None
        self.durability = "physical floor: fsync per write, or no I/O"

    def open(self, d: Path) -> None:
        self.dir = d

    def close(self) -> None:
        pass

    def _path(self) -> Path:
        assert self.dir is not None
        return self.dir / "raw.bin"

    def enqueue(self, payload: dict[str, Any]) -> None:
        raise AssertionError("measured as a whole loop")

    def enqueue_loop(self, payloads: list[dict[str, Any]]) -> float:
        return raw_fsync_loop(self._path(), self.size, len(payloads))

    def enqueue_batch(self, payloads: list[dict[str, Any]]) -> None:
        json.dumps(payloads)

    def prefill(self, payloads: list[dict[str, Any]]) -> None:
        self._pending = len(payloads)

    def take_ack(self, n: int) -> float:
        return raw_fsync_loop(self._path(), self.size, n)

    def cold_open(self, d: Path) -> float:
        if not log_files(d):  # first round: build the nobroker log, untimed
            nobroker = importlib.import_module("nobroker")
            with nobroker.Queue(str(d)) as q:
                for i in range(0, self._pending, 10_000):
                    q.enqueue_many(small_payloads(i, min(10_000, self._pending - i)))
        t = time.perf_counter()
        json_loads_log(d)
        return time.perf_counter() - t

    _pending = 0
