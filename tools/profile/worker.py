"""Where a Worker process's CPU per job goes: lease, ack, replay, fsync, the loop.

bench-realistic (tools/bench/realistic/) says how much of a worker's CPU the
queue takes per job; this says on what. P worker processes (each a Worker of
T slots, as `nobroker work` runs it) drain N jobs enqueued up front, with
every queue call and the file engine's phases timed by thread CPU
(`time.thread_time`) and wall clock, in each process:

* `ack+lease`, `lease`, `ack`, `ack_many`, `ack_many+lease`: the Queue calls
  the worker makes (their CPU less the phases below, which they contain);
* `replay`: reading forward under the lock (following.refresh: applying
  what the other processes wrote);
* `lock`: taking the queue's lock (wall: waiting for another process);
* `fsync`: the commit's fsync wait after the lock (wall; CPU beside it);
* `worker`: everything else the process spent, less the jobs' own CPU: the
  Worker's Python (slots, dispatcher, heartbeats, handing jobs over).

The wrappers cost about a microsecond a call, so the figures are a little
high; compare rows of one run. `--cprofile` adds a cProfile of the slot
threads and the acker of the first process, in thread CPU time (Python slowed several
times: shares only).

    python -m tools.profile.worker --kind noop --processes 2
    python -m tools.profile.worker --kind cpu --processes 1 --jobs 2000 --prefetch 8
    python -m tools.profile.worker --kind io --threads 16 --prefetch 16
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tools.bench.common import REPO

CPU_SECONDS = 0.0021  # bench-realistic's W-cpu job
IO_SECONDS = 0.005  # its W-io job
PHASES = ("ack+lease", "lease", "ack", "ack_many", "ack_many+lease", "replay", "lock",
          "fsync")
INNER = ("replay", "lock", "fsync")  # phases inside the Queue calls


class Timers:
    """Thread CPU and wall seconds per phase, summed over threads."""

    def __init__(self) -> None:
        self.cpu = dict.fromkeys(PHASES, 0.0)
        self.wall = dict.fromkeys(PHASES, 0.0)
        self.calls = dict.fromkeys(PHASES, 0)
        self.by_thread: dict[str, float] = {}  # the Queue calls' CPU, by thread role
        self._lock = threading.Lock()

    def wrap(self, owner: Any, attribute: str, phase: str) -> None:
        original: Callable[..., Any] = getattr(owner, attribute)
        outer = phase not in INNER  # a Queue call's CPU, counted once per thread

        def timed(*args: Any, **kwargs: Any) -> Any:
            cpu, wall = time.thread_time(), time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
                role = _role(threading.current_thread())
                with self._lock:
                    self.by_thread[role] = self.by_thread.get(role, 0.0) + cpu * outer
                    self.cpu[phase] += cpu
                    self.wall[phase] += wall
                    self.calls[phase] += 1

        setattr(owner, attribute, timed)


def burn(seconds: float) -> None:
    until = time.thread_time() + seconds
    while time.thread_time() < until:
        pass


def _profiled(loop: Callable[..., None], profiles: list[cProfile.Profile]
              ) -> Callable[..., None]:
    """`loop` (a worker thread's), run under a cProfile of its own, kept in `profiles`."""
    def profiled(self: Any, *args: Any) -> None:
        profile = cProfile.Profile(time.thread_time)  # CPU, not GIL waits
        profiles.append(profile)
        profile.enable()
        try:
            loop(self, *args)
        finally:
            profile.disable()
    return profiled


def _role(thread: threading.Thread) -> str:
    """A worker thread's role: its name without a trailing number (nobroker-slot-0 ->
    nobroker-slot); the thread that calls Worker.run() is the dispatcher."""
    if thread is threading.main_thread():
        return "dispatcher"
    return thread.name.rstrip("0123456789").rstrip("-")


def _count_threads(spent: dict[str, float]) -> None:
    """Sum each thread's CPU (time.thread_time at its end) into `spent`, by its role: its
    name without a trailing number (nobroker-slot-0 -> nobroker-slot)."""
    run = threading.Thread.run

    def counted(self: threading.Thread) -> None:
        try:
            run(self)
        finally:
            role = _role(self)
            spent[role] = spent.get(role, 0.0) + time.thread_time()

    threading.Thread.run = counted  # type: ignore[method-assign]


def child(args: argparse.Namespace) -> None:
    """One worker process: drain until idle, write what it measured as JSON."""
    import nobroker
    from nobroker.file import commit, following
    from nobroker.file.disk.lock import SharedLock
    from nobroker.worker import slots

    timers = Timers()
    timers.wrap(nobroker.Queue, "ack_and_lease", "ack+lease")
    timers.wrap(nobroker.Queue, "lease", "lease")
    timers.wrap(nobroker.Queue, "ack", "ack")
    timers.wrap(nobroker.Queue, "ack_many", "ack_many")
    timers.wrap(nobroker.Queue, "ack_many_and_lease", "ack_many+lease")
    timers.wrap(following, "refresh", "replay")
    timers.wrap(SharedLock, "acquire", "lock")
    timers.wrap(commit.syncing, "sync", "fsync")
    job_cpu = [0.0]
    first_job: list[float] = []

    def handler(job: Any) -> None:
        if not first_job:
            first_job.append(time.process_time())
        if args.kind == "io":
            time.sleep(IO_SECONDS)
        elif args.kind == "cpu":
            t = time.thread_time()
            burn(CPU_SECONDS)
            job_cpu[0] += time.thread_time() - t

    profiles: list[cProfile.Profile] = []
    if args.cprofile:  # the slot threads' loop, and the acker's (prefetch)
        for name in ("_slot_loop", "_ack_loop"):
            setattr(slots.Slots, name, _profiled(getattr(slots.Slots, name), profiles))
    threads: dict[str, float] = {}
    _count_threads(threads)
    queue = nobroker.Queue(args.child)
    worker = nobroker.Worker(queue, handler, concurrency=args.threads, idle_timeout=0.3,
                             handle_signals=False, prefetch=args.prefetch,
                             **({"ack_delay": args.ack_delay} if args.ack_delay else {}))
    began = time.process_time()
    wall = time.perf_counter()
    dispatcher = time.thread_time()
    stats = worker.run()
    threads["dispatcher"] = time.thread_time() - dispatcher
    cpu = time.process_time() - (first_job[0] if first_job else began)
    wall = time.perf_counter() - wall
    queue.close()
    out: dict[str, Any] = {"jobs": stats.succeeded, "cpu": cpu, "job_cpu": job_cpu[0],
                           "wall": wall, "phase_cpu": timers.cpu,
                           "phase_wall": timers.wall, "calls": timers.calls, "threads": threads,
                           "calls_by_thread": timers.by_thread}
    if profiles:
        merged = pstats.Stats(profiles[0])
        for profile in profiles[1:]:
            merged.add(profile)
        text = io.StringIO()
        merged.stream = text  # type: ignore[attr-defined]
        merged.sort_stats("tottime").print_stats(int(os.environ.get("PROFILE_LINES", "30")))
        out["cprofile"] = text.getvalue()
    Path(args.out).write_text(json.dumps(out), encoding="utf-8")


def per_job(results: list[dict[str, Any]]) -> dict[str, float]:
    """Microseconds per job, over every process."""
    jobs = sum(r["jobs"] for r in results) or 1
    cpu = {p: sum(r["phase_cpu"][p] for r in results) for p in PHASES}
    wall = {p: sum(r["phase_wall"][p] for r in results) for p in PHASES}
    total = sum(r["cpu"] for r in results) - sum(r["job_cpu"] for r in results)
    inner = cpu["replay"] + cpu["lock"] + cpu["fsync"]
    calls = sum(cpu[p] for p in ("ack+lease", "lease", "ack", "ack_many", "ack_many+lease"))
    us = 1e6 / jobs
    return {
        "queue CPU (all but the job)": total * us,
        "queue calls' own CPU": (calls - inner) * us,
        "  of which ack+lease": cpu["ack+lease"] * us,
        "replay CPU": cpu["replay"] * us,
        "lock CPU": cpu["lock"] * us,
        "lock wait (wall)": wall["lock"] * us,
        "fsync CPU": cpu["fsync"] * us,
        "fsync wait (wall)": wall["fsync"] * us,
        "worker Python (the rest)": (total - calls) * us,
        **{f"{role}, less jobs and calls": us * sum(
            r["threads"].get(role, 0.0) - r["calls_by_thread"].get(role, 0.0)
            - (r["job_cpu"] if role == "nobroker-slot" else 0.0) for r in results)
           for role in sorted({role for r in results for role in r["threads"]})},
        "jobs/s": jobs / max(r["wall"] for r in results),
    }


def _scratch() -> Path:
    scratch = REPO / ".bench"
    scratch.mkdir(exist_ok=True)
    return scratch


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="profile-worker", description=__doc__.split("\n\n")[0])
    p.add_argument("--kind", choices=("noop", "cpu", "io"), default="noop")
    p.add_argument("--processes", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--jobs", type=int, default=3000)
    p.add_argument("--prefetch", type=int, default=0, help="Worker(prefetch=K)")
    p.add_argument("--ack-delay", type=float, default=0.0, metavar="SECONDS",
                   help="Worker(ack_delay=...), with --prefetch")
    p.add_argument("--cprofile", action="store_true")
    p.add_argument("--src", type=Path, default=REPO / "src",
                   help="the nobroker source to profile (A/B: another checkout's src)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        child(args)
        return 0
    import nobroker

    root = Path(tempfile.mkdtemp(prefix="profile-worker-", dir=_scratch()))
    try:
        with nobroker.Queue(root / "q") as q:
            for start in range(0, args.jobs, 500):
                q.enqueue_many([{"i": i} for i in range(start, min(args.jobs, start + 500))])
        outs = [root / f"out-{k}.json" for k in range(args.processes)]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(args.src.resolve()), str(REPO)]))
        procs = [subprocess.Popen(
            [sys.executable, "-m", "tools.profile.worker", "--child", str(root / "q"),
             "--out", str(out), "--kind", args.kind, "--threads", str(args.threads),
             "--prefetch", str(args.prefetch), "--ack-delay", str(args.ack_delay)]
            + (["--cprofile"] if args.cprofile and k == 0 else []), env=env, cwd=REPO)
            for k, out in enumerate(outs)]
        for proc in procs:
            proc.wait()
        results = [json.loads(out.read_text()) for out in outs]
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"{args.kind}, {args.processes} process(es) x {args.threads} thread(s), "
          f"prefetch {args.prefetch}, "
          f"{sum(r['jobs'] for r in results)} jobs; load {os.getloadavg()[0]:.1f}")
    for name, value in per_job(results).items():
        print(f"  {name:32} {value:10,.1f}" + ("" if name == "jobs/s" else " us/job"))
    if results and "cprofile" in results[0]:
        print(results[0]["cprofile"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
