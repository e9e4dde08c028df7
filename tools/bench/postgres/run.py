"""Benchmark nobroker on PostgreSQL against procrastinate and PgQueuer, on one server.

    python make.py bench-postgres [--jobs N] [--stats-jobs N] [--only NAME,...]

make.py starts a throwaway server (tools/postgres/cluster.py, which sets
NOBROKER_TEST_POSTGRES_URL) and runs this in .dev/pg-bench-venv, where
requirements-bench-postgres.txt pins the peers. Every contender runs every
workload on the same server in the same run, through its public API:

- durable enqueue: one job per call, each committed before the next;
- enqueue_many of 10,000 jobs (procrastinate: batch_defer; PgQueuer: enqueue
  with lists), the best of three;
- lease + ack with 1 and 4 worker processes: N jobs drained by the peer's own
  worker loop (nobroker: ack_and_lease; procrastinate: run_worker(wait=False);
  PgQueuer: QueueManager in drain mode), from the start signal until every
  process is done; each with its default batching. Not the same promise:
  nobroker's and procrastinate's loops commit each job's ack before they take
  the next job, while PgQueuer's puts each finished job in a buffer that a
  background task commits every 10 jobs or 0.1 s (pgqueuer/core/qm.py
  `_dispatch` -> `JobStatusLogBuffer.add`, core/buffers.py), so its worker
  runs on before its acks are committed; the column says so;
- lease + ack in batches of 10, 1 worker process (nobroker only): `lease(10)`,
  then `ack_many` of the 10, each call committed before it returns: what
  leasing ahead buys with nobroker's public API, durability unchanged;
- enqueue -> handler latency: one idle worker woken by LISTEN/NOTIFY
  (nobroker: a Worker; the peers: their workers with NOTIFY on), the time
  from just before the producer's enqueue to the handler's first line;
- stats() with --stats-jobs jobs in the queue (procrastinate:
  list_queues; PgQueuer: queue_size), the median of 20 calls.

Figures are this machine's, from one run; the machine is shared, so compare
rows of one run with each other, not with another machine.

The harness is this module (the command line, the rows, the tables, the --ab rounds);
each contender is a class of its own module with one method per row:
bench_postgres_nobroker.py, bench_postgres_procrastinate.py and
bench_postgres_pgqueuer.py, and bench_postgres_measure.py holds the drain in worker
processes and its CPU, read from /proc.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tools.bench.common import SRC
from tools.bench.postgres.measure import BATCH, URL, Drain
from tools.bench.postgres.nobroker_system import Nobroker
from tools.bench.postgres.pgqueuer_system import PgQueuer
from tools.bench.postgres.procrastinate_system import Procrastinate


def _cpu_table(drains: dict[tuple[str, int], Drain]) -> list[str]:
    """Where each drain's time went: wall and CPU per job, workers and server apart."""
    lines = ["", f"CPU per job in the lease + ack rows (user + system; workers and server "
             f"share {os.cpu_count()} cores):", "",
             "| contender | workers | wall per job | worker CPU per job | server CPU per job "
             "| cores busy |", "| --- | --- | --- | --- | --- | --- |"]
    for (name, workers), d in drains.items():
        lines.append(f"| {name} | {workers} | {d.seconds / d.jobs * 1e6:.0f} us | "
                     f"{d.worker_cpu / d.jobs * 1e6:.0f} us | "
                     f"{d.server_cpu / d.jobs * 1e6:.0f} us | {d.cores_busy:.2f} |")
    for name in dict.fromkeys(name for name, _ in drains):
        one, four = drains.get((name, 1)), drains.get((name, 4))
        if one is not None and four is not None:
            lines.append(f"{name}: 4 workers / 1 = {four.rate / one.rate:.2f}x; the ceiling "
                         f"{os.cpu_count()} cores allow, cores / (CPU per job x rate at 1 "
                         f"worker) = {_ceiling(one):.2f}x ({_ceiling(one, four):.2f}x with "
                         f"the CPU per job of 4 workers)")
    return lines


def _ceiling(one: Drain, at: Drain | None = None) -> float:
    """The most N workers can gain over 1 with every core busy, if a job costs the CPU
    it cost in drain `at` (default: `one`, the drain with 1 worker)."""
    per_job = (at or one).cpu_per_job
    return (os.cpu_count() or 1) / (per_job * one.rate)


def _ab(old_src: str, rounds: int, n: int) -> int:
    """The lease + ack rows only, on another checkout's code (A) and this one's (B),
    interleaved: A1 B1 A4 B4, B1 A1 B4 A4, ... (the order flips every round)."""
    here = str(SRC)
    sides = {"A": Nobroker(str(Path(old_src).resolve())), "B": Nobroker(here)}
    drains: dict[tuple[str, int], list[Drain]] = {}
    for number in range(rounds):
        order = ["A", "B"] if number % 2 == 0 else ["B", "A"]
        for workers in (1, 4):
            for side in order:
                d = sides[side].consume(workers, n)
                drains.setdefault((side, workers), []).append(d)
                print(f"round {number + 1} {side} {workers} worker(s): {d.rate:,.0f} jobs/s, "
                      f"cpu/job {d.cpu_per_job * 1e6:.0f} us (workers "
                      f"{d.worker_cpu / n * 1e6:.0f}, server {d.server_cpu / n * 1e6:.0f}), "
                      f"cores busy {d.cores_busy:.2f}", file=sys.stderr, flush=True)
    print(f"\nA = {old_src}, B = {here}; {rounds} rounds of {n:,} jobs; medians:\n")
    print("| side | rate, 1 worker | rate, 4 workers | 4/1 | CPU per job at 1 (workers + "
          "server) | CPU per job at 4 | cores busy at 1 | ceiling 4/1 (CPU at 1; at 4) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for side in ("A", "B"):
        ones, fours = drains[(side, 1)], drains[(side, 4)]
        med = statistics.median
        ratio = med(f.rate / o.rate for o, f in zip(ones, fours, strict=True))
        print(f"| {side} | {med(d.rate for d in ones):,.0f} jobs/s | "
              f"{med(d.rate for d in fours):,.0f} jobs/s | {ratio:.2f}x | "
              f"{med(d.cpu_per_job for d in ones) * 1e6:.0f} us "
              f"({med(d.worker_cpu / d.jobs for d in ones) * 1e6:.0f} + "
              f"{med(d.server_cpu / d.jobs for d in ones) * 1e6:.0f}) | "
              f"{med(d.cpu_per_job for d in fours) * 1e6:.0f} us | "
              f"{med(d.cores_busy for d in ones):.2f} | "
              f"{med(_ceiling(d) for d in ones):.2f}x; "
              f"{med(_ceiling(o, f) for o, f in zip(ones, fours, strict=True)):.2f}x |")
    return 0


def main() -> int:
    # procrastinate's warnings (such as where the App lives) are not this report's.
    logging.getLogger("procrastinate").setLevel(logging.ERROR)
    parser = argparse.ArgumentParser(prog="bench_postgres.py")
    parser.add_argument("--jobs", type=int, default=3_000, help="jobs per throughput row")
    parser.add_argument("--stats-jobs", type=int, default=1_000_000)
    parser.add_argument("--samples", type=int, default=200, help="pickup latency samples")
    parser.add_argument("--only", default="", help="contenders, comma-separated")
    parser.add_argument("--ab", metavar="OLD_SRC", default="",
                        help="only the lease + ack rows, this checkout against OLD_SRC "
                             "(another checkout's src/), in interleaved rounds")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of --ab")
    args = parser.parse_args()
    if not URL:
        print("bench_postgres: no server; run it as `python make.py bench-postgres`")
        return 2
    if args.ab:
        return _ab(args.ab, args.rounds, 2 * args.jobs)
    contenders: list[Any] = [Nobroker(), Procrastinate(), PgQueuer()]
    if args.only:
        wanted = {name.strip().lower() for name in args.only.split(",")}
        contenders = [c for c in contenders if c.name.lower() in wanted]
    n = args.jobs
    drains: dict[tuple[str, int], Drain] = {}

    def drained(c: Any, workers: int) -> str:
        drain = drains[(c.name, workers)] = c.consume(workers, 2 * n)
        return f"{drain.rate:,.0f} jobs/s"

    rows: list[tuple[str, Callable[[Any], str]]] = [
        (f"durable enqueue, one at a time ({n:,} jobs)",
         lambda c: f"{c.enqueue(n):,.0f} jobs/s"),
        (f"enqueue_many of {BATCH:,}", lambda c: f"{c.enqueue_many(BATCH):,.0f} jobs/s"),
        (f"lease + ack, 1 worker process ({2 * n:,} jobs)", lambda c: drained(c, 1)),
        (f"lease + ack, 4 worker processes ({2 * n:,} jobs)", lambda c: drained(c, 4)),
        (f"lease + ack in batches of 10, 1 worker process ({2 * n:,} jobs)",
         lambda c: c.consume_batched(2 * n) if hasattr(c, "consume_batched") else "-"),
        ("enqueue -> handler, LISTEN/NOTIFY (p50 / p99)",
         lambda c: "{:.2f} / {:.2f} ms".format(*c.pickup(args.samples))),
        (f"stats() at {args.stats_jobs:,} jobs", lambda c: f"{c.stats(args.stats_jobs):.2f} ms"),
    ]
    table = [[name] for name, _ in rows]
    for row, (name, measure) in zip(table, rows, strict=True):
        for contender in contenders:
            print(f"bench_postgres: {contender.name}: {name}", file=sys.stderr, flush=True)
            row.append(measure(contender))
    labels = [getattr(c, "label", c.name) for c in contenders]
    print("\n| workload | " + " | ".join(labels) + " |")
    print("| --- |" + " --- |" * len(contenders))
    for row in table:
        print("| " + " | ".join(row) + " |")
    print("\n".join(_cpu_table(drains)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
