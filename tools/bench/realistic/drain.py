"""One drain of tools/bench/realistic/: queue N jobs with the system's own enqueue
call (timed: the producer's durable enqueue rate), start its worker command P
times, watch the jobs' records, read the CPU of every worker process tree (and
of the Redis server) from /proc, stop the workers, and count what ran.

The CPU is read twice while the workers run: once a twentieth of the jobs are
recorded (start-up and imports are behind) and once all are. The queue's CPU
per job is that difference, less the job bodies' own CPU for the jobs recorded
in between, over those jobs. Worker processes that exit in between still count
(a parent's cutime/cstime hold its waited-for children).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tools.bench.common import REPO, proc_stat_fields
from tools.bench.peers.systems import die_with_parent
from tools.bench.realistic.jobs import (
    KIND_ENV,
    RECORDS_ENV,
    Outcome,
    outcome,
    read_records,
    record_count,
)
from tools.bench.realistic.systems import RealisticSystem
from tools.bench.scaling import fresh

POLL = 0.005
STALL = 20.0  # seconds without a new record before the drain is given up (jobs lost)
TICK = os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds(roots: list[int]) -> float:
    """utime + stime + cutime + cstime of every process under `roots` (roots included)."""
    parents: dict[int, int] = {}
    stats: dict[int, list[str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = proc_stat_fields(entry)
        except OSError:  # gone meanwhile
            continue
        parents[int(entry)] = int(fields[1])
        stats[int(entry)] = fields
    wanted = set(roots)
    grew = True
    while grew:
        more = {pid for pid, ppid in parents.items() if ppid in wanted and pid not in wanted}
        wanted |= more
        grew = bool(more)
    ticks = sum(sum(int(f) for f in stats[pid][11:15]) for pid in wanted if pid in stats)
    return ticks / TICK


@dataclass
class DrainResult:
    """One drain: the records' outcome, the producer's rate and the queue's CPU."""

    outcome: Outcome
    enqueue_rate: float  # jobs/s of the timed, durable enqueue loop
    queue_cpu_per_job: float | None  # seconds; None if too few jobs to tell


def enqueue(system: RealisticSystem, app: Path, jobs: int, env: dict[str, str]) -> float:
    """Run the system's own enqueue loop in a fresh interpreter; its jobs/s."""
    done = subprocess.run([sys.executable, "-c", f"import {system.app_module} as app; "
                           f"print(app.enqueue({jobs}))"],
                          env=env, cwd=app, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:]
        raise RuntimeError(f"enqueue failed: {' '.join(tail)}")
    return jobs / float(done.stdout.strip().splitlines()[-1])


def stop(procs: list[subprocess.Popen[bytes]], signum: int) -> None:
    """The worker commands' graceful stop, then SIGKILL of their groups if they hang."""
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signum)
    deadline = time.monotonic() + 20
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def drain(system: RealisticSystem, work: Path, kind: str, jobs: int, processes: int,
          threads: int, extra_pids: list[int]) -> DrainResult:
    """One drain of `jobs` jobs of `kind` by `processes` x `threads`."""
    app, records = fresh(work / "app"), fresh(work / "records")
    system.write_app(app)
    env = dict(os.environ, **{KIND_ENV: kind, RECORDS_ENV: str(records)})
    # the app imports tools.bench.realistic.jobs: the repo too, outside the bench venv
    env["PYTHONPATH"] = os.pathsep.join([str(app), str(REPO), env.get("PYTHONPATH", "")])
    system.reset()
    rate = enqueue(system, app, jobs, env)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for k in range(processes):
            with open(app / f"worker-{k}.log", "wb") as sink:
                procs.append(subprocess.Popen(
                    system.worker_command(app, k, threads), env=env, cwd=app,
                    stdin=subprocess.DEVNULL, stdout=sink, stderr=sink,
                    start_new_session=True, preexec_fn=die_with_parent))
        roots = [p.pid for p in procs]
        first = max(1, jobs // 20)
        cpu_first: float | None = None
        seen_first = 0
        count, last_count, last_change = 0, -1, time.monotonic()
        while count < jobs:
            count = record_count(records)
            if cpu_first is None and count >= first:
                cpu_first = tree_cpu_seconds(roots + extra_pids)
                seen_first = count
            if count != last_count:
                last_count, last_change = count, time.monotonic()
            elif time.monotonic() - last_change > STALL:
                break  # the rest are lost (or stuck): counted below
            if any(p.poll() is not None for p in procs) and count < jobs and \
                    time.monotonic() - last_change > 2:
                log = (app / "worker-0.log").read_text(errors="replace").strip().splitlines()
                raise RuntimeError(f"a worker exited early: {' '.join(log[-1:])}")
            time.sleep(POLL)
        cpu_last = tree_cpu_seconds(roots + extra_pids)
    finally:
        stop(procs, system.stop_signal)
    per_job = None
    if cpu_first is not None and count > seen_first:
        later = read_records(records)[seen_first:count]
        job_cpu = sum(cpu for _, _, cpu in later)
        per_job = (cpu_last - cpu_first - job_cpu) / (count - seen_first)
    return DrainResult(outcome(records, jobs), rate, per_job)
