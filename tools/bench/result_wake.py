"""How fast a result reaches a waiter in another process, and what waking costs an ack.

    python3 -m tools.bench.result_wake [--results 200] [--acks 5000]

Two measurements of the "something finished" pipes (src/nobroker/file/finished.py):

1. latency: a child process waits in `Queue.result(id)`; the parent acks the
   job with a result (fsync on). Reported: from the ack's return to the
   child's return, and from the ack's start (so including its fsync).
2. cost: unsynced `ack_and_lease` in one process, with the writer's poke
   switched on and off in alternating rounds (nobody waits: the usual case).

Absolute numbers depend on the machine; run it on a quiet one, several times.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from nobroker import Queue
from nobroker.file.disk import finished
from tools.bench.common import SRC

CHILD = """
import sys, time
from nobroker import Queue
q = Queue(sys.argv[1])
for line in sys.stdin:
    q.result(line.strip(), timeout=30)
    print(time.monotonic(), flush=True)
"""


def _waiting(directory: str) -> bool:
    pipes = finished.finish_directory(directory, "default")
    return os.path.isdir(pipes) and any(not n.startswith(".") for n in os.listdir(pipes))


def latency(results: int) -> None:
    directory = tempfile.mkdtemp(prefix="nobroker-wake-")
    env = dict(os.environ, PYTHONPATH=str(SRC))
    child = subprocess.Popen([sys.executable, "-c", CHILD, directory], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, env=env)
    assert child.stdin is not None and child.stdout is not None
    after, whole = [], []
    try:
        with Queue(directory) as q:
            for i in range(results):
                job = q.enqueue(i)
                child.stdin.write(job.id + "\n")
                child.stdin.flush()
                deadline = time.monotonic() + 10
                while not _waiting(directory) and time.monotonic() < deadline:
                    time.sleep(0.0005)  # until the child's pipe is there: it waits now
                leased = q.lease_one()
                assert leased is not None
                started = time.monotonic()
                q.ack(leased, result=i)
                returned = time.monotonic()
                woke = float(child.stdout.readline())
                after.append((woke - returned) * 1000)
                whole.append((woke - started) * 1000)
    finally:
        child.stdin.close()
        child.wait(30)
        shutil.rmtree(directory, ignore_errors=True)
    for label, values in (("ack returned -> waiter returned", after),
                          ("ack called -> waiter returned (with the fsync)", whole)):
        values.sort()
        print(f"{label}: p50 {values[len(values) // 2]:.2f} ms, "
              f"p99 {values[int(len(values) * 0.99)]:.2f} ms, max {values[-1]:.2f} ms "
              f"({len(values)} results)")


def cost(acks: int, rounds: int = 6) -> None:
    real = finished.FinishSignal.notify
    times: dict[str, list[float]] = {"poke on": [], "poke off": []}
    try:
        for _ in range(rounds):
            for mode in times:
                finished.FinishSignal.notify = real if mode == "poke on" else (  # type: ignore[method-assign]
                    lambda self: None)
                directory = tempfile.mkdtemp(prefix="nobroker-wake-")
                with Queue(directory, fsync=False, auto_compact=None) as q:
                    q.enqueue_many(list(range(acks)))
                    started = time.perf_counter()
                    job = q.lease_one()
                    while job is not None:
                        job = q.ack_and_lease(job, result=None)
                    times[mode].append((time.perf_counter() - started) / acks * 1e6)
                shutil.rmtree(directory, ignore_errors=True)
    finally:
        finished.FinishSignal.notify = real  # type: ignore[method-assign]
    for mode, values in times.items():
        print(f"unsynced ack_and_lease with a result, {mode}: median "
              f"{statistics.median(values):.1f} us, min {min(values):.1f} us")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=int, default=200)
    parser.add_argument("--acks", type=int, default=5000)
    args = parser.parse_args()
    latency(args.results)
    cost(args.acks)


if __name__ == "__main__":
    main()
