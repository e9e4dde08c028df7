"""nobroker's benchmark: every operation next to its physical baseline, same run.

    python -m tools.bench.run                 # default run (< 5 minutes)
    python -m tools.bench.run --quick         # small sizes, 2 rounds (< 1 minute)
    python -m tools.bench.run --big           # 1M-job log for cold open/memory/stats/compaction
    python -m tools.bench.run --only enqueue,cold_open --json out.json
    python -m tools.bench.run --markdown      # one Markdown table for the README

Standard library only; run with ``src`` on PYTHONPATH (make.py does), or the
script puts it there.

Methodology
-----------
This machine is shared and noisy, so a number on its own means little. Each
workload runs nobroker and a *physical baseline* — the least work the machine
must do for the same effect — interleaved in one process (A B A B ..., five
rounds by default, two with ``--quick``), and reports the median round of
each, the absolute figure (ops/s and time per op) and their ratio. The ratio
is written in the direction of the target: "speed" ratios are nobroker's
throughput over the baseline's (higher is better); "time" ratios are
nobroker's time over the baseline's (lower is better). Every row carries the
target from the issue and PASS or MISS; "info" rows have no target.

Scratch files go to ``.bench/`` in the repository (ignored by git), not to
/tmp, which may be a tmpfs where fsync costs nothing; the header names the
filesystem the files are on (from /proc/mounts). ``--dir`` chooses another
place.

The baselines
-------------
* raw write+fsync loop: a file opened with O_APPEND, then per operation one
  ``os.write`` of one record and one ``os.fsync``. The record is as long as
  nobroker's own framed record for the same job: the script enqueues 50 jobs
  into a fresh queue, reads its log back (16-byte file header, then
  ``<I length><B type><I crc32>`` + payload per record) and takes the mean
  framed size of the ENQUEUE records. For lease + ack it is the number of
  log bytes one round trip adds, measured the same way.
* 4 threads: four threads, each running that loop on its own file.
* enqueue_many: ``json.dumps(payloads)`` of the same list, one call.
* cold open: read every log file, split it into records by the framing above
  and ``json.loads`` every record payload (no CRC check, no state built).
  Both sides read from a warm page cache.
* pickup latency: two raw write+fsync calls, measured between the samples.
* 4 processes: the same total number of jobs enqueued by one process.
* workers: the same drain by one Worker process, in the same rounds (N
  rotating 1, 2, 4); the runs are in tools/bench/scaling.py.
* mixed (1 producer + 3 workers) has no physical floor: the saturated row
  shows the producer's own enqueue rate meanwhile (whether the workers kept
  up), the latency rows the rate the producer was paced at.
* stats(): the same call on a queue of 1,000 jobs (O(1) means no growth).
* memory and compaction have absolute targets; the baseline column shows the
  on-disk size of a job and the enqueue latency outside compaction.

What each workload measures is spelled out in its function's docstring.

The modules
-----------
This file holds the registry of workloads, the command line and the tables;
the rows live next to their kind: bench_context.py (Config, Row, Context),
bench_throughput.py (enqueue, threads, processes, enqueue_many, lease_ack),
bench_bigqueue.py (cold_open, memory, stats, compaction), bench_workers.py
(workers, mixed, latency), bench_tasks.py (the task layer's rows),
workflows.py (enqueue_graph, a node's many prerequisites), canvas.py (group,
chord and chain rows); the shared helpers are in bench_common.py and bench_scaling.py.
"""

from __future__ import annotations

import argparse
import gc
import json
import shlex
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from tools.bench.bigqueue import wl_cold_open, wl_compaction, wl_memory, wl_stats
from tools.bench.canvas import wl_chain_run, wl_chord_drain, wl_group_enqueue
from tools.bench.common import (
    REPO,
    facts_line,
    fmt_ratio,
    machine_facts,
    render_markdown_table,
    render_text_table,
)
from tools.bench.context import Config, Context, Missing, Row
from tools.bench.limits import wl_limits, wl_limits_many_keys
from tools.bench.multiqueue import wl_multiqueue
from tools.bench.progress import wl_progress
from tools.bench.tasks import wl_periodic_idle, wl_process_pool, wl_task_delay, wl_task_roundtrip
from tools.bench.throughput import (
    wl_enqueue,
    wl_enqueue_many,
    wl_lease_ack,
    wl_processes,
    wl_threads,
)
from tools.bench.workers import wl_latency, wl_mixed, wl_workers
from tools.bench.workflows import wl_fanin, wl_graph

# The registry: --only names, in the order they run
WORKLOADS = (
    "enqueue",
    "threads",
    "processes",
    "workers",
    "mixed",
    "enqueue_many",
    "lease_ack",
    "limits",
    "limits_many_keys",
    "multiqueue",
    "cold_open",
    "memory",
    "stats",
    "latency",
    "compaction",
    "task_delay",
    "process_pool",
    "periodic_idle",
    "task_roundtrip",
    "graph",
    "fanin",
    "group_enqueue",
    "chord_drain",
    "chain_run",
    "progress",
)
RUNNERS: dict[str, Callable[[Context], list[Row]]] = {
    "enqueue": wl_enqueue,
    "threads": wl_threads,
    "processes": wl_processes,
    "workers": wl_workers,
    "mixed": wl_mixed,
    "enqueue_many": wl_enqueue_many,
    "lease_ack": wl_lease_ack,
    "limits": wl_limits,
    "limits_many_keys": wl_limits_many_keys,
    "multiqueue": wl_multiqueue,
    "cold_open": wl_cold_open,
    "memory": wl_memory,
    "stats": wl_stats,
    "latency": wl_latency,
    "compaction": wl_compaction,
    "task_delay": wl_task_delay,
    "process_pool": wl_process_pool,
    "periodic_idle": wl_periodic_idle,
    "task_roundtrip": wl_task_roundtrip,
    "graph": wl_graph,
    "fanin": wl_fanin,
    "group_enqueue": wl_group_enqueue,
    "chord_drain": wl_chord_drain,
    "chain_run": wl_chain_run,
    "progress": wl_progress,
}
TITLES = {
    "enqueue": "durable single enqueue",
    "threads": "4 threads enqueuing",
    "processes": "4 processes enqueuing",
    "workers": "1, 2, 4 worker processes draining one queue",
    "mixed": "1 producer + 3 worker processes at once",
    "enqueue_many": "enqueue_many",
    "lease_ack": "lease + durable ack",
    "limits": "a limited job's lease (unsaturated)",
    "limits_many_keys": "a lease beside 10,000 full concurrency keys",
    "multiqueue": "a Worker over 3 queues vs over one",
    "cold_open": "cold open to first job",
    "memory": "resident memory per pending job",
    "stats": "stats()",
    "latency": "enqueue -> handler latency",
    "compaction": "compaction blocking",
    "task_delay": "task.delay() vs q.enqueue",
    "process_pool": "process pool vs thread pool",
    "periodic_idle": "idle worker with 100 periodic tasks",
    "task_roundtrip": "delay -> worker -> get round trip",
    "graph": "enqueue_graph vs enqueue_many",
    "fanin": "members of a 10,000-prerequisite node",
    "group_enqueue": "group(...).delay() vs enqueue_many",
    "chord_drain": "draining a chord vs plain task jobs",
    "chain_run": "a chain of 100 steps vs 100 delay().get()",
    "progress": "current_job().progress()",
}

TARGETS = {
    "enqueue": ">= 1.0x (speed)",
    "threads": ">= 0.8x (speed)",
    "processes": ">= 1.5x (speed)",
    "workers": "2 >= 1.2x, 4 >= 1.5x one process (speed)",
    "mixed": "p99 <= 10 ms below saturation",
    "enqueue_many": "<= 1.5x (time)",
    "lease_ack": ">= 1.0x; batch >= 20x",
    "limits": "<= 1.1x (time)",
    "limits_many_keys": "<= 1.1x (time)",
    "multiqueue": ">= 0.9x (speed)",
    "cold_open": "<= 1.0x (time)",
    "memory": "<= 150 B",
    "stats": "<= 20 us, O(1)",
    "latency": "p50 <= 2 ms + 2 fsyncs, p99 <= 10 ms, idle <= 2%",
    "compaction": "<= 200 ms",
    "task_delay": "<= 1.1x (time)",
    "process_pool": ">= 0.5x (speed)",
    "periodic_idle": "<= 2% of a core",
    "task_roundtrip": "p50 <= 3 ms + 2 fsyncs, p99 <= 10 ms",
    "graph": "<= 1.3x (time)",
    "fanin": ">= 0.8x (speed)",
    "group_enqueue": "<= 1.3x (time)",
    "chord_drain": ">= 0.8x (speed)",
    "chain_run": "<= 1.3x (time)",
    "progress": "info",
}


# --------------------------------------------------------------------------
# main


HEADERS = ["workload", "nobroker", "baseline", "ratio", "target", "result"]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench.py", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small sizes, 2 rounds (< 1 minute)")
    p.add_argument("--big", action="store_true",
                   help="1M pending jobs for cold open, memory, stats and compaction")
    p.add_argument("--rounds", type=int, help="interleaved rounds (default 5, --quick 2)")
    p.add_argument("--only", help=f"comma-separated workloads: {','.join(WORKLOADS)}")
    p.add_argument("--dir", type=Path, default=REPO / ".bench",
                   help="scratch parent directory (default: .bench/ in the repo)")
    p.add_argument("--keep", action="store_true", help="keep the scratch directory")
    p.add_argument("--markdown", action="store_true", help="print one Markdown table")
    p.add_argument("--json", type=Path, metavar="FILE", help="write raw results to FILE")
    p.add_argument("--list", action="store_true", help="list workloads and exit")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.list:
        for name in WORKLOADS:
            print(f"{name:13} {TITLES[name]}")
        return 0
    selected = list(WORKLOADS)
    if args.only:
        selected = [w.strip() for w in args.only.split(",") if w.strip()]
        unknown = [w for w in selected if w not in RUNNERS]
        if unknown:
            print(f"bench.py: unknown workload(s): {', '.join(unknown)}; "
                  f"choose from {', '.join(WORKLOADS)}", file=sys.stderr)
            return 2
    cfg = Config.make(args.quick, args.big, args.rounds)
    args.dir.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="run-", dir=args.dir))
    facts = machine_facts(root)
    words = argv or sys.argv[1:]
    command = "python -m tools.bench.run " + " ".join(shlex.quote(a) for a in words)
    out = sys.stdout
    progress = sys.stderr if args.markdown else sys.stdout

    def log(msg: str) -> None:
        print(msg, file=progress, flush=True)

    log(f"nobroker bench — {facts_line(facts)}")
    log(f"scratch: {root}")
    log(f"command: {command.strip()}")
    log(f"rounds: {cfg.rounds} (interleaved, medians reported); "
        f"big log: {cfg.big_n:,} jobs; {'quick' if cfg.quick else 'default'} sizes")
    ctx = Context(cfg, root, log)
    rows: list[Row] = []
    errors = 0
    started = time.perf_counter()
    try:
        for name in selected:
            log(f"\n[{name}] {TITLES[name]}")
            t = time.perf_counter()
            try:
                new = RUNNERS[name](ctx)
            except Missing as exc:
                new = [Row(name, TITLES[name], target=TARGETS[name],
                           result=f"n/a (missing: {exc})")]
            except Exception as exc:
                errors += 1
                traceback.print_exc(file=sys.stderr)
                new = [Row(name, TITLES[name], target=TARGETS[name],
                           result=f"ERROR: {type(exc).__name__}: {exc}")]
            for row in new:
                extra = f"  [{row.note}]" if row.note else ""
                log(f"  {row.workload}: {row.nobroker} | baseline {row.baseline} | "
                    f"ratio {fmt_ratio(row.ratio)} | target {row.target} | {row.result}{extra}")
            log(f"  ({time.perf_counter() - t:.1f} s)")
            rows.extend(new)
            gc.collect()
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    total = time.perf_counter() - started
    table_rows = [r.cells() for r in rows]
    if args.markdown:
        print(f"nobroker {'quick ' if cfg.quick else ''}benchmark, one run of `{command.strip()}` "
              f"on {facts_line(facts)}; medians of {cfg.rounds} interleaved rounds.\n", file=out)
        print(render_markdown_table(HEADERS, table_rows), file=out)
    else:
        print(f"\nSummary ({total:.0f} s; speed ratio = nobroker/baseline throughput, "
              "time ratio = nobroker/baseline time)\n", file=out)
        print(render_text_table(HEADERS, table_rows), file=out)
    if args.json:
        payload = {"facts": facts, "command": command.strip(), "config": asdict(cfg),
                   "seconds": total, "rows": [asdict(r) for r in rows]}
        args.json.write_text(json.dumps(payload, indent=2, default=str) + "\n", encoding="utf-8")
        log(f"raw results written to {args.json}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
