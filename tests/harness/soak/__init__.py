"""The kill -9 soak: producers, workers and a compactor on one queue, shot at random.

Theory. `run_soak` starts real processes on one queue directory (this file
run with `--role`): producers that enqueue (one job, a keyed job, a
batch of three, or a graph: a chord of two to four members and a callback, or
a chain of three steps), workers that lease with the raw Queue API and ack, nack,
extend or ack-and-lease, and a compactor that compacts every second or so.
The parent is the chaos process: at random intervals it `kill -9`s a random
child and starts a fresh one in its place. When the time is up it stops
the chaos, lets producers finish their call (SIGTERM), lets the workers
drain the queue, stops them, and audits.

Every child writes an event log, one line per event, each line one
`os.write` on an O_APPEND descriptor, written *before* the next step, so a
line that is there happened and a line that is missing may or may not have:

    producer: try TAG KEY | ok TAG ID | trymany TAG... | okmany TAG=ID...
              | after TAG PREREQUISITE_TAG... | trygraph TAG... | okgraph TAG=ID...
              | cancelling ID | cancelled ID yes/no
    worker:   start ID TOKEN TAG EXPIRES | acking ID TOKEN | acked ID TOKEN [result]
              | nacking/nacked ID TOKEN | stale ID TOKEN | extended ID TOKEN
    compactor: compacting | compacted GEN JOBS | pausing | paused | resumed

The audit (reliability.md §7, Jepsen's total-queue in nobroker's terms):

- lost: an enqueue that returned (`ok`) whose job is neither in the queue
  at the end nor ever acked -- must be 0;
- double-acked: two `acked` lines (two acks that returned) for one job -- 0;
- resurrected: a delivery of a job after an ack of it returned -- 0;
- unexpected: a job in the queue or delivered that no producer tried -- 0;
- lease overlap: a delivery that began before the previous delivery's lease
  ran out, unless that one was nacked -- 0;
- every duplicate delivery explained: the earlier holder was killed, nacked
  it, or found its lease superseded (`stale`, a slow holder) -- 0 otherwise;
- results and cancels: a job whose ack with a result returned is kept DONE
  with that result; one whose cancel returned True is kept CANCELLED and was
  never acked; nothing is CANCELLED that nobody tried to cancel -- 0 otherwise;
- graphs: a graph is all or nothing; a dependent (a chord's callback, a
  chain's later step) is never delivered under a fencing token below that of
  its prerequisite's ack (tokens rise with every lease) -- 0 otherwise; that
  each callback ran to exactly one ack is the rules above;
- the final stats agree with the logs: nothing pending or leased, the dead
  are the listed dead, and `done` equals the number of jobs that existed
  minus the dead and the cancelled.

The modules: roles (the children, run as a script), audit (SoakConfig,
SoakReport and the audit) and this one (the chaos parent, run_soak).
tests/file/test_soak.py runs a short soak; tools/torture/run.py runs long ones.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import harness.support  # noqa: F401  (puts src/ on sys.path)
from nobroker import Queue

from .audit import EPSILON, SoakConfig, SoakReport, audit

__all__ = ["SoakConfig", "SoakReport", "run_soak", "audit", "EPSILON"]

HERE = Path(__file__).resolve()
SRC = HERE.parents[3] / "src"  # tests/harness/soak/__init__.py
ROLES = HERE.parent / "roles.py"  # the children's script


# --------------------------------------------------------------------------
# the parent: chaos, then the audit


@dataclass
class _Child:
    role: str
    ident: int
    proc: subprocess.Popen[bytes]
    err_path: str


class _Chaos:
    def __init__(self, cfg: SoakConfig, directory: str, logdir: str) -> None:
        self.cfg, self.directory, self.logdir = cfg, directory, logdir
        self.children: list[_Child] = []
        self.killed: set[int] = set()
        self.kills: Counter[str] = Counter()
        self.problems: list[str] = []
        self.spawned = 0

    def spawn(self, role: str, ident: int) -> _Child:
        self.spawned += 1
        err_path = os.path.join(self.logdir, f"stderr-{role}{ident}-{self.spawned}.txt")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(SRC), env.get("PYTHONPATH", "")]).rstrip(
            os.pathsep)
        with open(err_path, "wb") as err:
            proc = subprocess.Popen(
                [sys.executable, str(ROLES), "--role", role, "--dir", self.directory,
                 "--logdir", self.logdir, "--id", str(ident), "--seed", str(self.cfg.seed),
                 "--vt", str(self.cfg.visibility_timeout),
                 "--max-attempts", str(self.cfg.max_attempts)],
                stdin=subprocess.DEVNULL, stdout=err, stderr=err, env=env)
        child = _Child(role, ident, proc, err_path)
        self.children.append(child)
        return child

    def check_exits(self) -> None:
        """A child that died without being shot is a finding; restart it."""
        for child in list(self.children):
            code = child.proc.poll()
            if code is None:
                continue
            self.children.remove(child)
            with open(child.err_path, "rb") as err:
                tail = err.read()[-1500:].decode("utf-8", "replace")
            self.problems.append(f"{child.role}{child.ident} pid {child.proc.pid} exited "
                                 f"{code} on its own: {tail}")
            self.spawn(child.role, child.ident)

    def kill_one(self, rng: random.Random) -> None:
        child = rng.choice(self.children)
        try:
            os.kill(child.proc.pid, signal.SIGKILL)
        except ProcessLookupError:  # pragma: no cover - it just exited; check_exits sees it
            return
        child.proc.wait()
        self.children.remove(child)
        self.killed.add(child.proc.pid)
        self.kills[child.role] += 1
        self.spawn(child.role, child.ident)

    def stop(self, roles: tuple[str, ...], timeout: float = 60.0) -> None:
        """SIGTERM children of `roles` and wait; a child that will not stop is a finding."""
        chosen = [c for c in self.children if c.role in roles]
        for child in chosen:
            if child.proc.poll() is None:
                child.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for child in chosen:
            try:
                code = child.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.proc.kill()
                child.proc.wait()
                self.problems.append(f"{child.role}{child.ident} did not stop on SIGTERM")
                continue
            events = os.path.join(self.logdir, f"{child.role}{child.ident}-{child.proc.pid}.log")
            if code == -signal.SIGTERM and not os.path.exists(events):
                # Stopped while still starting up, before it set its SIGTERM handler
                # (which it does before opening its event log): it made no call at all.
                self.children.remove(child)
                continue
            if code != 0:
                with open(child.err_path, "rb") as err:
                    tail = err.read()[-1500:].decode("utf-8", "replace")
                self.problems.append(f"{child.role}{child.ident} pid {child.proc.pid} "
                                     f"exited {code}: {tail}")
            self.children.remove(child)

    def kill_all(self) -> None:
        for child in self.children:
            if child.proc.poll() is None:
                child.proc.kill()
            child.proc.wait()
        self.children.clear()


def _wait_for(predicate: Any, timeout: float, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())


def run_soak(cfg: SoakConfig, root: str | None = None) -> SoakReport:
    """Run one soak in `root` (a fresh temp dir by default) and audit it."""
    root = root or tempfile.mkdtemp(prefix="nobroker-soak-")
    directory = os.path.join(root, "queue")
    logdir = os.path.join(root, "logs")
    os.makedirs(logdir, exist_ok=True)
    Queue(directory).close()  # created before anyone races to create it
    rng = random.Random(cfg.seed)
    chaos = _Chaos(cfg, directory, logdir)
    started = time.monotonic()
    try:
        for i in range(cfg.producers):
            chaos.spawn("producer", i)
        for i in range(cfg.workers):
            chaos.spawn("worker", i)
        if cfg.compactor:
            chaos.spawn("compactor", 0)
        end = started + cfg.seconds
        while time.monotonic() < end:
            pause = min(rng.uniform(*cfg.kill_every), max(0.0, end - time.monotonic()))
            time.sleep(pause)  # chaos: the interval between kills is the experiment
            chaos.check_exits()
            if time.monotonic() < end:
                chaos.kill_one(rng)
        chaos.check_exits()
        chaos.stop(("producer", "compactor"))
        with Queue(directory) as q:
            q.resume()  # in case the last compactor was killed while it paused the queue

        def drained() -> bool:
            chaos.check_exits()
            with Queue(directory, readonly=True) as q:
                stats = q.stats()
            return stats.pending == 0 and stats.leased == 0

        if not _wait_for(drained, cfg.drain_timeout, 0.1):
            chaos.problems.append(f"the queue did not drain within {cfg.drain_timeout}s")
        chaos.stop(("worker",))
    finally:
        chaos.kill_all()
    report = audit(directory, logdir, chaos.killed, cfg)
    report.kills = chaos.kills
    report.problems[:0] = chaos.problems
    report.seconds = time.monotonic() - started
    return report
