"""nobroker next to other job queues: the same workloads, one run, one machine.

    python -m tools.bench.peers.run            # default sizes, 5 interleaved rounds
    python -m tools.bench.peers.run --quick    # small sizes, 2 rounds
    python -m tools.bench.peers.run --markdown # one combined Markdown table

A development tool, not part of nobroker: the peers are third-party packages,
imported only inside functions. On first use the script creates the ignored
virtual environment ``.dev/bench-venv``, installs the pinned peers from
``requirements-bench.txt`` into it, and re-executes itself there with ``src``
on PYTHONPATH (``--no-venv`` skips that and uses whatever this interpreter
has). It needs Debian's ``redis-server`` for RQ, installs it with apt-get when
missing, starts two private servers on 127.0.0.1 (free ports, scratch dirs,
``--appendonly yes`` with ``--appendfsync always`` / ``everysec``,
``--save ''``) and stops them at exit, on error too. A peer that cannot be
installed, imported or run shows as "skipped: reason"; the run goes on.

Methodology
-----------
Each workload runs every system once per round, in the same order, for
several rounds (A B C ... A B C ...), and reports each system's median round;
this machine is shared and noisy, and interleaving spreads the noise over all
systems alike. Every store lives under ``.bench/`` in the repository (a real
disk, not a tmpfs). Untimed preparation (filling a queue before a take/ack
round, building the cold-open store) uses each system's own API, with fsync
switched off where the system allows it, since only the timed part matters.

Each system is labelled with the durability it actually gave in this run
(SQLite's ``PRAGMA synchronous`` and journal mode read back from the
connection, Redis's ``appendfsync`` read back with CONFIG GET), and with what
happens to a taken job if the consumer crashes.

What is measured for each system:

* nobroker: ``Queue(fsync=True)``; enqueue, enqueue_many, ack_and_lease loop
  (one call and one fsync per job; lease_one + ack shown too), open + lease_one.
* Huey: the storage layer of ``SqliteHuey(fsync=True)``
  (``storage.enqueue(bytes)`` / ``storage.dequeue()``), not task dispatch;
  dequeue deletes the row, so there is no ack.
* persist-queue: ``SQLiteAckQueue(auto_commit=True, multithreading=False)``;
  ``put``, ``get(raw=True)`` + ``ack(id=...)``.
* litequeue: ``LiteQueue`` as shipped (it sets ``synchronous=NORMAL``) and the
  same with ``PRAGMA synchronous=FULL``; ``put``, ``pop`` + ``done``; the batch
  is ``put`` in one ``transaction()``.
* RQ: ``Queue.enqueue(noop, payload)`` against each Redis; the batch is
  ``Queue.enqueue_many`` (one pipeline); take + ack is the real worker path, a
  ``SimpleWorker.work(burst=True)`` over the round's jobs (worker start-up
  included); cold open restarts redis-server on its AOF and times it until
  ``Queue.dequeue_any`` hands over the first job.
* sqlite3: a plain table queue, WAL, ``synchronous=FULL``; insert; take = one
  transaction of SELECT + DELETE (no ack).
* drain (``--only drain``): N = 1, 2, 4 consumer processes emptying one
  prefilled queue of no-op jobs, every system and N rotating within each
  round. nobroker: N spawned processes, each a ``Worker`` (concurrency 1)
  (tools/bench/scaling.py, as ``make.py bench``'s workers row). Huey: its
  own consumer, ``huey_consumer -k process -w N -n`` on a ``SqliteHuey
  (fsync=True)`` (dequeue deletes the row: no ack). persist-queue: N spawned
  processes looping ``get(raw=True)`` + ``ack`` on one ``SQLiteAckQueue``.
  Every handler stamps its start into a per-process file; the figure is the
  steady-state rate (10th to 90th percentile of the starts), and jobs
  delivered more than once are counted.
* baselines: the raw O_APPEND write+fsync loop with nobroker's record size,
  ``json.dumps`` of the batch, and ``json.loads`` of nobroker's log.

Ratios are "nobroker vs it": how many times better nobroker did (its
throughput over the peer's, the peer's time over its, the peer's memory over
its); above 1 means nobroker is ahead.

The modules
-----------
This file holds the venv bootstrap, the command line and main();
bench_peers_systems.py the System seam, bench_peers_nobroker.py nobroker and
the baseline, bench_peers_sqlite.py the SQLite peers (Huey, persist-queue,
litequeue, sqlite3), bench_peers_redis.py RQ and its redis-servers,
bench_peers_runner.py the interleaved workloads, bench_peers_drain.py the
drain, bench_peers_report.py the tables and the peer targets.
"""

from __future__ import annotations

import argparse
import atexit
import gc
import hashlib
import importlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from tools.bench.common import (
    REPO,
    SRC,
    facts_line,
    machine_facts,
    render_markdown_table,
    render_text_table,
)
from tools.bench.peers.drain import DrainTable, drain_checks, drain_rows, drain_title, run_drains
from tools.bench.peers.nobroker_system import NobrokerSystem
from tools.bench.peers.redis_systems import RedisServer, RQSystem, ensure_redis_server
from tools.bench.peers.report import report_markdown, report_text, target_checks
from tools.bench.peers.runner import Runner, Workload, sizes_for
from tools.bench.peers.sqlite_systems import (
    HueySystem,
    LiteQueueSystem,
    PersistQueueSystem,
    SqliteTableSystem,
)
from tools.bench.peers.systems import Skip, System

VENV = REPO / ".dev" / "bench-venv"
REQUIREMENTS = REPO / "requirements-bench.txt"
STAMP = VENV / ".requirements-bench.sha256"


# --------------------------------------------------------------------------
# bootstrap: venv, peers, redis-server


def in_bench_venv() -> bool:
    try:
        return Path(sys.prefix).resolve() == VENV.resolve()
    except OSError:
        return False


def venv_python() -> Path:
    return VENV / "bin" / "python"


def pip_install(python: Path) -> None:
    """Install the pinned peers; one by one if the set fails, so a bad pin skips one peer."""
    reqs = [line.split("#", 1)[0].strip() for line in REQUIREMENTS.read_text().splitlines()]
    reqs = [r for r in reqs if r]
    base = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    print(f"bench_peers: installing {' '.join(reqs)} into {VENV}", file=sys.stderr)
    if subprocess.run([*base, "-r", str(REQUIREMENTS)]).returncode == 0:
        STAMP.write_text(hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest())
        return
    for req in reqs:
        if subprocess.run([*base, req]).returncode != 0:
            print(f"bench_peers: could not install {req}; its rows will be skipped",
                  file=sys.stderr)


def bootstrap(argv: list[str], module: str = "tools.bench.peers.run") -> None:
    """Create/refresh .dev/bench-venv and re-execute `module` inside it (never returns);
    tools/bench/realistic/run.py shares the venv and comes in through here too."""
    python = venv_python()
    if not python.exists():
        print(f"bench_peers: creating {VENV}", file=sys.stderr)
        VENV.parent.mkdir(parents=True, exist_ok=True)
        done = subprocess.run([sys.executable, "-m", "venv", str(VENV)])
        if done.returncode != 0 or not python.exists():
            print("bench_peers: could not create the venv; running here without it "
                  "(peers missing from this interpreter are skipped)", file=sys.stderr)
            return
    want = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()
    have = STAMP.read_text().strip() if STAMP.exists() else ""
    if have != want:
        pip_install(python)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), str(REPO), env.get("PYTHONPATH", ""))
                                         if p)
    env["NOBROKER_BENCH_VENV"] = "1"
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(str(python), [str(python), "-m", module, *argv], env)


# --------------------------------------------------------------------------
# main


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench_peers.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="small sizes, 2 rounds")
    p.add_argument("--rounds", type=int, help="interleaved rounds (default 5, --quick 2)")
    p.add_argument("--only", help="comma-separated workloads: enqueue,batch,take_ack,"
                                  "cold_open,memory,drain")
    p.add_argument("--dir", type=Path, default=REPO / ".bench", help="scratch parent")
    p.add_argument("--markdown", action="store_true", help="print one combined Markdown table")
    p.add_argument("--json", type=Path, metavar="FILE", help="write raw results to FILE")
    p.add_argument("--no-venv", action="store_true",
                   help="run in this interpreter; do not create or use .dev/bench-venv")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if not args.no_venv and not in_bench_venv():
        bootstrap(argv)  # re-executes inside the venv unless it cannot be made
    sizes = sizes_for(args.quick, args.rounds)
    all_wls = ["enqueue", "batch", "take_ack", "cold_open", "memory", "drain"]
    selected = all_wls if not args.only else [w.strip() for w in args.only.split(",")]
    bad = [w for w in selected if w not in all_wls]
    if bad:
        print(f"bench_peers.py: unknown workload(s) {bad}; choose from {all_wls}", file=sys.stderr)
        return 2
    args.dir.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="peers-", dir=args.dir))
    progress = sys.stderr if args.markdown else sys.stdout

    def log(msg: str) -> None:
        print(msg, file=progress, flush=True)

    servers: list[RedisServer] = []

    def cleanup() -> None:
        for srv in servers:
            srv.stop()
        shutil.rmtree(root, ignore_errors=True)

    atexit.register(cleanup)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    facts = machine_facts(root)
    command = "python -m tools.bench.peers.run " + " ".join(shlex.quote(a) for a in argv)
    log(f"nobroker bench-peers — {facts_line(facts)}")
    log(f"interpreter: {sys.executable}; scratch: {root}")
    log(f"rounds: {sizes.rounds} interleaved, medians; enqueue {sizes.enqueue_ops}/round, "
        f"batch {sizes.batch:,}, take+ack {sizes.take_ops}/round, cold open {sizes.cold_n:,}, "
        f"drain {sizes.drain_jobs:,} jobs")
    try:
        importlib.import_module("nobroker")
    except ImportError as exc:
        print(f"bench_peers.py: cannot import nobroker ({exc}); is src on PYTHONPATH?",
              file=sys.stderr)
        return 2

    # redis servers for RQ
    redis_why = ""
    redis_servers: dict[str, RedisServer | None] = {"always": None, "everysec": None}
    drain_only = selected == ["drain"]  # RQ takes no part in the drain
    binary = None if drain_only else ensure_redis_server()
    if drain_only:
        redis_why = "not run: drain only"
    elif binary is None:
        redis_why = "no redis-server (apt-get install redis-server failed)"
        log(f"!!! RQ skipped: {redis_why}")
    else:
        for mode in redis_servers:
            srv = RedisServer(binary, root / f"redis-{mode}", mode)
            try:
                srv.start()
                servers.append(srv)
                redis_servers[mode] = srv
            except Exception as exc:
                redis_why = f"redis-server did not start: {exc}"
                log(f"!!! {redis_why}")
        if servers:
            log(f"redis-server: {binary} on 127.0.0.1 ports "
                f"{', '.join(str(s.port) for s in servers)}")

    systems: list[System] = []
    skipped: dict[str, str] = {}
    factories: list[tuple[str, Callable[[], System]]] = [
        ("nobroker", lambda: NobrokerSystem()),
        ("nobroker (lease_one + ack)", lambda: NobrokerSystem(two_calls=True)),
        ("huey SqliteHuey (storage)", HueySystem),
        ("persist-queue SQLiteAckQueue", PersistQueueSystem),
        ("litequeue (default)", lambda: LiteQueueSystem(full=False)),
        ("litequeue (synchronous=FULL)", lambda: LiteQueueSystem(full=True)),
        ("RQ (appendfsync always)",
         lambda: RQSystem(redis_servers["always"], redis_why or "no redis-server")),
        ("RQ (appendfsync everysec)",
         lambda: RQSystem(redis_servers["everysec"], redis_why or "no redis-server")),
        ("sqlite3 table (WAL, FULL)", SqliteTableSystem),
    ]
    for label, make in [] if drain_only else factories:  # the drain has its own systems
        try:
            systems.append(make())
        except Skip as exc:
            skipped[label] = str(exc)
            log(f"!!! {label}: skipped: {exc}")
        except Exception as exc:
            skipped[label] = f"error: {type(exc).__name__}: {exc}"
            log(f"!!! {label}: skipped: {skipped[label]}")

    wls: list[Workload] = []
    drains: DrainTable | None = None
    started = time.perf_counter()
    try:
        runner = Runner(sizes, root, systems, skipped, log)
        log(f"nobroker's framed ENQUEUE record for the standard job: {runner.baseline.size} B")
        two_calls = [s for s in systems if isinstance(s, NobrokerSystem) and s.two_calls]
        for key in selected:
            log(f"[{key}] ...")
            t = time.perf_counter()
            if key != "take_ack":  # the lease_one + ack variant only matters there
                for s in two_calls:
                    systems.remove(s)
            try:
                if key == "enqueue":
                    wls.append(runner.wl_enqueue())
                elif key == "batch":
                    wls.append(runner.wl_batch())
                elif key == "take_ack":
                    wls.append(runner.wl_take_ack())
                elif key == "cold_open":
                    wls.append(runner.wl_cold_open())
                elif key == "memory":
                    wls.append(runner.wl_memory())
                elif key == "drain":
                    drains = run_drains(sizes.drain_jobs, sizes.rounds, root, log)
            finally:
                for s in two_calls:
                    if s not in systems:
                        systems.insert(1, s)
            log(f"    {time.perf_counter() - t:.1f} s")
            gc.collect()
    finally:
        cleanup()
    durability = {s.name: s.durability for s in systems}
    takes = {s.name: s.takes for s in systems}
    for name, why in skipped.items():
        durability[name] = f"skipped: {why}"
    if args.markdown:
        print(f"nobroker vs peers, one run of `{command.strip()}` on {facts_line(facts)}; "
              f"medians of {sizes.rounds} interleaved rounds; \"nobroker Nx\" = how many times "
              "better nobroker did (above 1: ahead).\n")
        if wls:
            print(report_markdown(wls, durability))
        if drains is not None:
            print(f"\n{drain_title(drains, sizes.rounds)}:\n")
            print(render_markdown_table(*drain_rows(drains)))
        checks = target_checks(wls, durability) + (drain_checks(drains) if drains else [])
        if checks:
            print()
            for line in checks:
                print(f"- {line}")
    else:
        if wls:
            print(report_text(wls, durability, takes))
        if drains is not None:
            print(f"\n== {drain_title(drains, sizes.rounds)} ==")
            print(render_text_table(*drain_rows(drains)))
        total = time.perf_counter() - started
        print(f"\nnobroker vs it: above 1 = nobroker ahead (throughput ratio; for times and "
              f"memory the peer's figure over nobroker's). Total {total:.0f} s.")
        checks = target_checks(wls, durability) + (drain_checks(drains) if drains else [])
        if checks:
            print("\n== peer targets ==")
            for line in checks:
                print(line)
    if args.json:
        data = {"facts": facts, "command": command.strip(), "sizes": sizes.__dict__,
                "durability": durability, "takes": takes,
                "workloads": [{"key": w.key, "title": w.title, "kind": w.kind, "note": w.note,
                               "cells": {n: c.__dict__ for n, c in w.cells.items()},
                               "baselines": {n: c.__dict__ for n, c in w.baselines.items()}}
                              for w in wls]}
        if drains is not None:
            data["drain"] = {"jobs": drains.jobs, "skipped": drains.skipped,
                             "runs": {name: {n: [d.__dict__ for d in ds] for n, ds in by.items()}
                                      for name, by in drains.runs.items()}}
        args.json.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
