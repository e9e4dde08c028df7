"""A Worker over three queues against a Worker over one: drain rate, as a ratio.

    python make.py bench-multiqueue [--jobs N] [--rounds R] [--url URL] [--prefetch K|auto]

Each run prefills a fresh location with --jobs no-op jobs (untimed): all in
one queue for the single-queue worker; a third in each of three queues for
the multi-queue worker, once by strict priority and once with weights
3:2:1 (each the worst case of its kind: the priority worker asks the earlier
queues first for every job of a later one, the weighted one switches queue
at most picks). A Worker with concurrency 1 and a no-op handler then drains
it (`max_jobs`), with `prefetch=K` if given (each contender the same K;
else each its Worker's default: "auto" under weights, 0 otherwise);
the time of `run()` is the figure. The contenders take
turns, round after round (bench_common.interleave), and the ratio is of the
medians. The issue's target is >= 0.9x. On a loaded machine, say so next to
any number it prints. `make.py bench --only multiqueue` runs the strict-priority
shape as one row of the benchmark table (`wl_multiqueue`).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from nobroker import Queue, Worker
from nobroker.cli.arguments import prefetch_arg
from tools.bench.common import interleave, median
from tools.bench.context import Context, Row, verdict

TARGET = 0.9
SHAPES = {"one queue": (["default"], None),
          "3 queues, priority": (["high", "default", "low"], None),
          "3 queues, weights 3:2:1": (["high", "default", "low"],
                                      {"high": 3, "default": 2, "low": 1})}


def drain(location: str, names: list[str], weights: dict[str, int] | None,
          jobs: int, prefetch: int | str | None = None) -> float:
    """Seconds for one Worker to run `jobs` no-op jobs spread evenly over `names`."""
    queues = [Queue(location, name) for name in names]
    try:
        for index, queue in enumerate(queues):
            share = jobs // len(queues) + (index < jobs % len(queues))
            queue.enqueue_many([{"n": n} for n in range(share)])
        worker = Worker(queues, lambda job: None, max_jobs=jobs, weights=weights,
                        handle_signals=False, prefetch=prefetch)
        began = time.perf_counter()
        stats = worker.run()
        seconds = time.perf_counter() - began
        if stats.succeeded != jobs:
            raise SystemExit(f"drained {stats.succeeded} of {jobs} jobs")
        return seconds
    finally:
        for queue in queues:
            queue.close()


def wl_multiqueue(ctx: Context) -> list[Row]:
    """`make.py bench`'s row: a Worker over 3 queues by strict priority vs over one."""
    jobs = ctx.cfg.drain_jobs
    times = interleave(ctx.cfg.rounds, [
        (label, lambda names=names, weights=weights: drain(
            str(ctx.new_dir("multiqueue")), names, weights, jobs))
        for label, (names, weights) in SHAPES.items() if label != "3 queues, weights 3:2:1"])
    single, multi = median(times["one queue"]), median(times["3 queues, priority"])
    ratio = single / multi
    return [Row("multiqueue", f"drain of {jobs:,} no-op jobs by a Worker over 3 queues "
                "(strict priority)", f"{jobs / multi:,.0f} jobs/s",
                f"one queue: {jobs / single:,.0f} jobs/s", ratio, f">= {TARGET}x (speed)",
                verdict(ratio >= TARGET), note="Worker concurrency 1; weights: "
                "make.py bench-multiqueue", data=times)]


def fresh_location(url: str | None, scratch: Path) -> str:
    if url is None:
        return tempfile.mkdtemp(dir=scratch)
    joiner = "&" if "?" in url else "?"
    return f"{url}{joiner}schema=bench_{uuid.uuid4().hex[:10]}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=3000, help="jobs per drain (default 3000)")
    parser.add_argument("--rounds", type=int, default=5, help="turns per contender (default 5)")
    parser.add_argument("--url", help="a PostgreSQL URL instead of a directory (a fresh "
                        "schema per drain, left behind)")
    parser.add_argument("--prefetch", type=prefetch_arg, metavar="K",
                        help="Worker(prefetch=K or auto) for every contender (default: "
                        "each Worker's own, auto under weights and 0 otherwise)")
    args = parser.parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="nobroker-bench-multiqueue-"))
    try:
        def contender(names: list[str], weights: dict[str, int] | None
                      ) -> Callable[[], float]:
            return lambda: drain(fresh_location(args.url, scratch), names, weights, args.jobs,
                                 args.prefetch)

        times = interleave(args.rounds, [(label, contender(*shape))
                                         for label, shape in SHAPES.items()])
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    single = median(times["one queue"])
    where = "PostgreSQL" if args.url else "files"
    prefetch = "the Worker's default" if args.prefetch is None else args.prefetch
    print(f"drain of {args.jobs} no-op jobs, concurrency 1, prefetch {prefetch}, "
          f"{where}, median of "
          f"{args.rounds} interleaved rounds")
    for label, samples in times.items():
        rate = args.jobs / median(samples)
        ratio = single / median(samples)
        verdict = "" if label == "one queue" else \
            f"  {'OK' if ratio >= TARGET else 'MISS'} (target >= {TARGET}x)"
        print(f"  {label:<24} {rate:>9,.0f} jobs/s  {ratio:.2f}x{verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
