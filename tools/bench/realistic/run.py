"""nobroker and its peers draining real-shaped jobs, each with its own worker command.

    python -m tools.bench.realistic.run --quick          # about a minute and a half
    python -m tools.bench.realistic.run                  # 3 rounds of 2,000 jobs
    python -m tools.bench.realistic.run --only nobroker,huey,io

The table of issue 25. Workloads: W-io (each job sleeps 5 ms: one process x 16
threads, and two processes x 8 threads; the share of the ideal rate, threads /
5 ms), W-cpu (each job burns 2.1 ms of its thread's CPU: one and two
processes; the queue's CPU per job, that is the CPU of every worker process
tree and of the Redis server, read from /proc, less the jobs' own CPU), W-noop
(one and two processes, jobs/s), and one producer's durable enqueue rate (the
timed enqueue loop that fills the queue before each drain). Every workload
runs every system once per round, interleaved, for several rounds; the
figures are medians. Every job appends its id to a file of its process, so
lost and duplicated jobs are counted for every drain.

Systems: nobroker (``nobroker work``), Huey (SqliteHuey, ``huey_consumer``),
Dramatiq + Redis (``dramatiq``), Celery + Redis (``celery worker -P threads``),
Celery + nobroker (the same app and worker, ``broker_url = nobroker:///DIR``),
Dramatiq + nobroker (the same app and worker, ``NobrokerBroker(DIR)``), RQ +
Redis (``rq worker``, SimpleWorker: no threads, so no W-io rows). A "process"
is one worker command; P processes are P commands on one store.
The peers live in ``.dev/bench-venv`` (requirements-bench.txt; the script
creates it and re-executes itself there, as tools/bench/peers/run.py does).
Redis is Debian's ``redis-server`` (apt-get installed if missing), started
on a free port of 127.0.0.1 with ``--appendfsync always`` (``--redis-fsync
everysec`` for the usual setting) and stopped at the end, on error and
Ctrl-C too. The figures are for this machine at this moment: compare the
columns of one run, on a quiet machine.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from tools.bench.common import (
    REPO,
    facts_line,
    machine_facts,
    render_markdown_table,
    render_text_table,
)
from tools.bench.peers.redis_systems import RedisServer, ensure_redis_server
from tools.bench.peers.run import bootstrap, in_bench_venv
from tools.bench.peers.systems import Skip, skip_text
from tools.bench.realistic.celery_system import CeleryNobrokerRealistic, CeleryRealistic
from tools.bench.realistic.drain import drain
from tools.bench.realistic.dramatiq_system import DramatiqNobrokerRealistic, DramatiqRealistic
from tools.bench.realistic.huey_system import HueyRealistic
from tools.bench.realistic.nobroker_system import NobrokerRealistic, NobrokerVariant
from tools.bench.realistic.report import CONFIGS, Config, Results, notes, rows
from tools.bench.realistic.rq_system import RQRealistic
from tools.bench.realistic.systems import RealisticSystem

Log = Callable[[str], None]
SYSTEMS: dict[str, type[RealisticSystem]] = {
    "nobroker": NobrokerRealistic, "huey": HueyRealistic, "dramatiq": DramatiqRealistic,
    "celery": CeleryRealistic, "celery-nobroker": CeleryNobrokerRealistic, "rq": RQRealistic,
    "dramatiq-nobroker": DramatiqNobrokerRealistic,
}
KINDS = ("io", "cpu", "noop")
REDIS_FSYNC = {"always": "always: fsync per write, before the reply",
               "everysec": "everysec: up to 1 s of acknowledged writes lost on power loss"}


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench-realistic", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="100 jobs, 1 round (under 2 minutes)")
    p.add_argument("--jobs", type=int, help="jobs per drain (default 2,000; --quick 100)")
    p.add_argument("--rounds", type=int, help="interleaved rounds (default 3; --quick 1)")
    p.add_argument("--only", help="comma-separated systems and/or workloads: "
                                  f"{','.join(SYSTEMS)} and {','.join(KINDS)}")
    p.add_argument("--redis-fsync", choices=("always", "everysec"), default="always",
                   help="the Redis peers' appendfsync (default: always, durable per write)")
    p.add_argument("--dir", type=Path, default=REPO / ".bench", help="scratch parent")
    p.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    p.add_argument("--variants", help="nobroker with options, each a column, alternating "
                   "with the others: comma-separated, e.g. "
                   "base,prefetch=4,prefetch=16+ack_delay=0.02 (options joined by +); "
                   "replaces the plain nobroker column")
    p.add_argument("--no-venv", action="store_true",
                   help="run in this interpreter; do not create or use .dev/bench-venv")
    return p.parse_args(argv)


def choose(only: str | None) -> tuple[list[str], list[Config]]:
    words = [w.strip() for w in (only or "").split(",") if w.strip()]
    bad = [w for w in words if w not in SYSTEMS and w not in KINDS]
    if bad:
        raise SystemExit(f"bench-realistic: unknown name(s) {bad}; choose from "
                         f"{list(SYSTEMS)} and {list(KINDS)}")
    systems = [s for s in SYSTEMS if s in words] or list(SYSTEMS)
    kinds = [k for k in KINDS if k in words] or list(KINDS)
    return systems, [c for c in CONFIGS if c.kind in kinds]


def start_redis(root: Path, fsync: str, log: Log) -> RedisServer | None:
    binary = ensure_redis_server()
    if binary is None:
        log("!!! no redis-server (apt-get install redis-server failed): Redis peers skipped")
        return None
    server = RedisServer(binary, root / "redis", fsync)
    try:
        server.start()
    except Exception as exc:
        log(f"!!! redis-server did not start ({exc}): Redis peers skipped")
        return None
    log(f"redis-server: {binary} on 127.0.0.1:{server.port}, appendonly yes, "
        f"appendfsync {fsync}")
    return server


def build(keys: list[str], redis: RedisServer | None, variants: str | None,
          log: Log) -> tuple[list[RealisticSystem], dict[str, str]]:
    systems: list[RealisticSystem] = []
    skipped: dict[str, str] = {}
    for key in keys:
        if key == "nobroker" and variants:
            try:
                systems += [NobrokerVariant(spec.strip()) for spec in variants.split(",")]
            except ValueError as exc:
                raise SystemExit(f"bench-realistic: {exc}") from None
            continue
        cls = SYSTEMS[key]
        try:
            systems.append(cls(redis))
        except Skip as exc:
            skipped[cls.name] = skip_text(exc)
            log(f"!!! {cls.name}: {skipped[cls.name]}")
    return systems, skipped


def run_rounds(systems: list[RealisticSystem], configs: list[Config], jobs: int, rounds: int,
               root: Path, redis: RedisServer | None, log: Log) -> Results:
    """Rounds x configs x systems, interleaved; a system that fails a config is dropped
    from that config only (its cell says why)."""
    results = Results()
    redis_pids = [redis.proc.pid] if redis is not None and redis.proc is not None else []
    for r in range(rounds):
        for config in configs:
            for s in systems:
                if (s.name, config) in results.skipped:
                    continue
                if config.kind == "io" and not s.threads:
                    results.skipped[(s.name, config)] = "n/a: no threads"
                    continue
                work = Path(tempfile.mkdtemp(prefix="realistic-", dir=root))
                t = time.perf_counter()
                try:
                    extra = redis_pids if s.uses_redis else []
                    res = drain(s, work, config.kind, jobs, config.processes, config.threads,
                                extra)
                    results.add(s.name, config, res)
                    log(f"    round {r + 1} {config.label:10} {s.name:16} "
                        f"{res.outcome.rate:8,.0f} jobs/s  lost {res.outcome.lost} "
                        f"dup {res.outcome.duplicated}  ({time.perf_counter() - t:.1f} s)")
                except Exception as exc:
                    traceback.print_exc(file=sys.stderr)
                    results.skipped[(s.name, config)] = f"error: {type(exc).__name__}: {exc}"
                finally:
                    shutil.rmtree(work, ignore_errors=True)
    return results


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if not args.no_venv and not in_bench_venv():
        bootstrap(argv, "tools.bench.realistic.run")  # re-executes in the venv if it can
    keys, configs = choose(args.only)
    jobs = args.jobs or (100 if args.quick else 2_000)
    rounds = args.rounds or (1 if args.quick else 3)
    stream = sys.stderr if args.markdown else sys.stdout

    def log(msg: str) -> None:
        print(msg, file=stream, flush=True)

    args.dir.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="realistic-", dir=args.dir))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    redis: RedisServer | None = None
    started = time.perf_counter()
    try:
        log(f"nobroker bench-realistic — {facts_line(machine_facts(root))}")
        log(f"command: python make.py bench-realistic {shlex.join(argv)}".rstrip())
        log(f"interpreter: {sys.executable}; scratch: {root}; {jobs:,} jobs a drain, "
            f"{rounds} interleaved round(s), medians")
        if any(SYSTEMS[k].uses_redis for k in keys):
            redis = start_redis(root, args.redis_fsync, log)
        systems, skipped = build(keys, redis, args.variants, log)
        results = run_rounds(systems, configs, jobs, rounds, root, redis, log)
    finally:  # Ctrl-C and errors too: the workers were stopped by drain()
        if redis is not None:
            redis.stop()
        shutil.rmtree(root, ignore_errors=True)
    names = [s.name for s in systems] + list(skipped)
    for name, why in skipped.items():
        for config in CONFIGS:
            results.skipped[(name, config)] = why
    headers, table = rows(results, names)
    print()
    print(render_markdown_table(headers, table) if args.markdown
          else render_text_table(headers, table))
    for line in notes(results):
        print(f"* {line}")
    print()
    print("What each system guarantees (a returned enqueue / a job taken by a worker "
          "that crashes):")
    for s in systems:
        fsync = f" Redis appendfsync {REDIS_FSYNC[args.redis_fsync]}." if s.uses_redis else ""
        print(f"- {s.name}: {s.durability}.{fsync}")
    print(f"W-io share: steady-state jobs/s over processes x threads / 5 ms. Queue CPU: "
          f"worker trees{' + redis-server' if redis else ''} from /proc, less the jobs' own "
          f"CPU. Lost / duplicated: ids never recorded / recorded twice. "
          f"{time.perf_counter() - started:.0f} s in all.")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
