"""The kill -9 soak: producers, workers and a compactor on one queue, shot at random.

Theory. `run_soak` starts real processes on one queue directory (this file
run with `--role`): producers that enqueue (one job, a keyed job, or a
batch of three), workers that lease with the raw Queue API and ack, nack,
extend or ack-and-lease, and a compactor that compacts every second or so.
The parent is the chaos process: at random intervals it `kill -9`s a random
child and starts a fresh one in its place. When the time is up it stops
the chaos, lets producers finish their call (SIGTERM), lets the workers
drain the queue, stops them, and audits.

Every child writes an event log, one line per event, each line one
`os.write` on an O_APPEND descriptor, written *before* the next step, so a
line that is there happened and a line that is missing may or may not have:

    producer: try TAG KEY | ok TAG ID | trymany TAG... | okmany TAG=ID...
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
- the final stats agree with the logs: nothing pending or leased, the dead
  are the listed dead, and `done` equals the number of jobs that existed
  minus the dead and the cancelled.

tests/test_soak.py runs a short one; tools/torture.py runs long ones.
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
SRC = HERE.parent.parent / "src"
if str(SRC) not in sys.path:
    sys.path.insert(0, str(SRC))

import nobroker  # noqa: E402
from nobroker import BackoffPolicy, LockTimeoutError, NotLeasedError, Queue  # noqa: E402

__all__ = ["SoakConfig", "SoakReport", "run_soak"]

EPSILON = 1e-6


@dataclass
class SoakConfig:
    seconds: float = 15.0
    producers: int = 2
    workers: int = 2
    compactor: bool = True
    kill_every: tuple[float, float] = (0.4, 1.2)  # seconds between kills, uniform
    seed: int = 0
    visibility_timeout: float = 1.5
    max_attempts: int = 8
    drain_timeout: float = 60.0


@dataclass
class SoakReport:
    seconds: float = 0.0
    kills: Counter[str] = field(default_factory=Counter)
    tried: int = 0
    enqueued: int = 0  # enqueue calls that returned, in jobs
    recovered: int = 0  # tried, not logged as returned, yet the job exists
    jobs: int = 0  # distinct jobs that existed
    deliveries: int = 0
    duplicates: int = 0  # deliveries after the first, all explained
    acked: int = 0
    dead: int = 0
    compactions: int = 0
    stale: int = 0
    results: int = 0  # acks with a result that returned (each must be kept)
    cancelled: int = 0  # jobs kept as cancelled at the end
    lost: int = 0
    double_acked: int = 0
    resurrected: int = 0
    unexpected: int = 0
    overlaps: int = 0
    unexplained: int = 0
    problems: list[str] = field(default_factory=list)
    stats: Any = None

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        kills = ", ".join(f"{role} {n}" for role, n in sorted(self.kills.items()))
        return (f"soak {self.seconds:.0f}s: {self.enqueued} jobs enqueued ({self.tried} tried, "
                f"{self.recovered} recovered), {self.deliveries} deliveries, {self.acked} acked, "
                f"{self.dead} dead, {self.results} results kept, {self.cancelled} cancelled, "
                f"{self.duplicates} justified duplicates, "
                f"{self.compactions} compactions, kills: {sum(self.kills.values())} ({kills}); "
                f"lost {self.lost}, double-acked {self.double_acked}, resurrected "
                f"{self.resurrected}, unexpected {self.unexpected}, lease overlaps "
                f"{self.overlaps}, unexplained duplicates {self.unexplained}; "
                f"problems: {len(self.problems)}")


# --------------------------------------------------------------------------
# the children


class EventLog:
    """One line per event, one write per line, O_APPEND: what is there happened."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

    def __call__(self, *fields: object) -> None:
        os.write(self.fd, ("\t".join(map(str, fields)) + "\n").encode())


_stop = False


def _on_term(signum: int, frame: object) -> None:
    global _stop
    _stop = True


def _open_queue(args: argparse.Namespace) -> Queue:
    while True:
        try:
            return Queue(args.dir, visibility_timeout=args.vt, max_attempts=args.max_attempts,
                         backoff=BackoffPolicy(base=0.05, max_delay=0.4, jitter=0.5),
                         lock_timeout=30.0)
        except LockTimeoutError:  # pragma: no cover - only on a badly overloaded machine
            continue


def producer(args: argparse.Namespace, log: EventLog, rng: random.Random) -> None:
    q = _open_queue(args)
    me = f"p{args.id}.{os.getpid()}"
    n = 0
    while not _stop:
        n += 1
        roll = rng.random()
        if roll < 0.15:
            tags = [f"{me}.{n}.{k}" for k in range(3)]
            log("trymany", *tags)
            jobs = q.enqueue_many([{"tag": tag} for tag in tags])
            log("okmany", *(f"{tag}={job.id}" for tag, job in zip(tags, jobs, strict=True)))
        else:
            tag = f"{me}.{n}"
            key = tag if roll < 0.4 else None
            log("try", tag, key or "-")
            job = q.enqueue({"tag": tag, "pad": "x" * rng.randrange(0, 300)}, job_id=key)
            log("ok", tag, job.id)
            if rng.random() < 0.05:  # cancel it again: pending, or already held by a worker
                log("cancelling", job.id)
                log("cancelled", job.id, "yes" if q.cancel(job.id) else "no")
        # Producers pace themselves a little: a worker spends two fsyncs on most jobs
        # (lease, ack), so unpaced producers build a backlog the drain must work off.
        time.sleep(rng.uniform(0, 0.004) if rng.random() < 0.95 else rng.uniform(0, 0.02))
    q.close()


def worker(args: argparse.Namespace, log: EventLog, rng: random.Random) -> None:
    q = _open_queue(args)
    vt = args.vt
    job: nobroker.Job | None = None
    while not _stop or job is not None:
        if job is None:
            if _stop:
                break
            job = q.lease_one(visibility_timeout=vt)
            if job is None:
                q.wait(0.05)
                continue
        log("start", job.id, job.token, job.payload["tag"], repr(job.lease_expires_at))
        if rng.random() < 0.2:
            time.sleep(rng.uniform(0, 0.005))  # some work
        roll = rng.random()
        token = job.token
        try:
            if roll < 0.05:
                log("nacking", job.id, token)
                q.nack(job, error="soak says no", delay=0.0)
                log("nacked", job.id, token)
                job = None
                continue
            if roll < 0.1:
                job = q.extend(job, vt)
                log("extended", job.id, token)
            log("acking", job.id, token)
            with_result = rng.random() < 0.3  # the job is then kept with its result
            result = {"tag": job.payload["tag"]}
            if roll < 0.6 and not _stop:
                following = q.ack_and_lease(job, visibility_timeout=vt, result=result) \
                    if with_result else q.ack_and_lease(job, visibility_timeout=vt)
                log("acked", job.id, token, *(("result",) if with_result else ()))
                job = following
            else:
                if with_result:
                    q.ack(job, result=result)
                else:
                    q.ack(job)
                log("acked", job.id, token, *(("result",) if with_result else ()))
                job = None
        except NotLeasedError:
            log("stale", job.id, token)
            job = None
    q.close()


def compactor(args: argparse.Namespace, log: EventLog, rng: random.Random) -> None:
    q = _open_queue(args)
    q.resume()  # a compactor killed while it held the queue paused left it so
    while not _stop:
        if rng.random() < 0.3:  # hold the workers off for a moment, in every process
            log("pausing")
            q.pause()
            log("paused")
            time.sleep(rng.uniform(0.01, 0.1))
            q.resume()
            log("resumed")
        deadline = time.monotonic() + rng.uniform(0.5, 1.5)
        while not _stop and time.monotonic() < deadline:
            time.sleep(0.02)
        if _stop:
            break
        log("compacting")
        result = q.compact()
        log("compacted", result.new_generation, result.live_jobs)
    q.close()


def child_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--role", choices=("producer", "worker", "compactor"), required=True)
    parser.add_argument("--dir", required=True)
    parser.add_argument("--logdir", required=True)
    parser.add_argument("--id", type=int, required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--vt", type=float, required=True)
    parser.add_argument("--max-attempts", type=int, required=True)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _on_term)
    log = EventLog(os.path.join(args.logdir, f"{args.role}{args.id}-{os.getpid()}.log"))
    rng = random.Random(f"{args.seed}:{args.role}:{args.id}:{os.getpid()}")
    log("begin", args.role, os.getpid())
    {"producer": producer, "worker": worker, "compactor": compactor}[args.role](args, log, rng)
    log("end")
    return 0


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
                [sys.executable, str(HERE), "--role", role, "--dir", self.directory,
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


# --------------------------------------------------------------------------
# the audit


@dataclass
class _Delivery:
    job: str
    token: int
    tag: str
    pid: int
    expires: float


def _read_logs(logdir: str) -> tuple[list[tuple[int, list[str]]], int]:
    events: list[tuple[int, list[str]]] = []
    broken = 0
    for name in sorted(os.listdir(logdir)):
        if not name.endswith(".log"):
            continue
        pid = int(name.rsplit("-", 1)[1][:-4])
        with open(os.path.join(logdir, name), "rb") as handle:
            data = handle.read().decode("utf-8", "replace")
        for line in data.split("\n"):
            if line:
                events.append((pid, line.split("\t")))
        if data and not data.endswith("\n"):
            broken += 1
    return events, broken


def audit(directory: str, logdir: str, killed: set[int], cfg: SoakConfig) -> SoakReport:
    report = SoakReport()
    problems = report.problems
    events, broken = _read_logs(logdir)
    if broken:
        problems.append(f"{broken} event logs end in a torn line (single writes should not tear)")
    tried: set[str] = set()
    ok: dict[str, str] = {}  # tag -> job id, for enqueues that returned
    tag_of: dict[str, str] = {}  # job id -> tag
    deliveries: dict[str, list[_Delivery]] = defaultdict(list)
    acked: dict[str, list[int]] = defaultdict(list)
    acking: dict[str, set[int]] = defaultdict(set)
    settled: set[tuple[str, int]] = set()  # (job, token) nacked or found stale
    with_result: set[str] = set()  # jobs whose ack with a result returned
    cancel_tried: set[str] = set()
    cancelled: set[str] = set()  # jobs whose cancel returned True
    stale_tokens: dict[str, set[int]] = defaultdict(set)
    nacking: set[tuple[str, int]] = set()  # a nack was begun (it may have landed)
    for pid, fields in events:
        kind, rest = fields[0], fields[1:]
        if kind == "try":
            tried.add(rest[0])
        elif kind == "trymany":
            tried.update(rest)
        elif kind == "ok":
            ok[rest[0]] = rest[1]
            tag_of[rest[1]] = rest[0]
        elif kind == "okmany":
            for pair in rest:
                tag, job_id = pair.split("=", 1)
                ok[tag] = job_id
                tag_of[job_id] = tag
        elif kind == "start":
            job_id, token, tag, expires = rest[0], int(rest[1]), rest[2], float(rest[3])
            deliveries[job_id].append(_Delivery(job_id, token, tag, pid, expires))
            tag_of.setdefault(job_id, tag)
        elif kind == "acking":
            acking[rest[0]].add(int(rest[1]))
        elif kind == "nacking":
            nacking.add((rest[0], int(rest[1])))
        elif kind == "acked":
            acked[rest[0]].append(int(rest[1]))
            if rest[2:] == ["result"]:
                with_result.add(rest[0])
        elif kind == "cancelling":
            cancel_tried.add(rest[0])
        elif kind == "cancelled" and rest[1] == "yes":
            cancelled.add(rest[0])
        elif kind in ("nacked", "stale"):
            settled.add((rest[0], int(rest[1])))
            if kind == "stale":
                report.stale += 1
                stale_tokens[rest[0]].add(int(rest[1]))
        elif kind == "compacted":
            report.compactions += 1
    with Queue(directory, readonly=True) as q:
        present = {job.id: job for job in q.list_jobs()}
        kept = {job.id: job for state in (nobroker.JobState.DONE, nobroker.JobState.CANCELLED)
                for job in q.list_jobs(state)}
        stats = q.stats()
    report.stats = stats
    for job in present.values():
        tag_of.setdefault(job.id, job.payload.get("tag", "?") if isinstance(job.payload, dict)
                          else "?")
    existed = set(ok.values()) | set(deliveries) | set(present)
    report.tried = len(tried)
    report.enqueued = len(ok)
    report.jobs = len(existed)
    report.recovered = len({tag_of[j] for j in existed} - set(ok))
    report.dead = sum(1 for job in present.values() if job.state is nobroker.JobState.DEAD)
    report.acked = sum(1 for j in acked if acked[j])
    for job_id in existed:
        tag = tag_of.get(job_id, "?")
        if tag not in tried:
            report.unexpected += 1
            problems.append(f"unexpected: job {job_id} ({tag}) was never tried")
    for job_id, tokens in acked.items():
        if len(tokens) > 1:
            report.double_acked += 1
            problems.append(f"double-acked: {job_id} acked with tokens {tokens}")
        if job_id in present:
            report.resurrected += 1
            problems.append(f"resurrected: {job_id} acked, yet {present[job_id].state} at the end")
        later = [d.token for d in deliveries[job_id] if d.token > min(tokens)]
        if later:
            report.resurrected += 1
            problems.append(f"resurrected: {job_id} delivered with tokens {later} after its "
                            f"ack with token {min(tokens)}")
    ended_cancelled = {j for j, job in kept.items()
                       if job.state is nobroker.JobState.CANCELLED}
    report.cancelled = len(ended_cancelled)
    report.results = len(with_result)
    for job_id in sorted(with_result):
        got = kept.get(job_id)
        if got is None or got.state is not nobroker.JobState.DONE \
                or got.result != {"tag": tag_of.get(job_id)}:
            problems.append(f"result lost: {job_id}'s ack with a result returned, yet the "
                            f"queue holds {got}")
    for job_id in sorted(cancelled):
        if job_id not in ended_cancelled:
            problems.append(f"cancel lost: {job_id}'s cancel returned True, yet it is "
                            f"{kept.get(job_id) or present.get(job_id)}")
        if acked.get(job_id):
            problems.append(f"acked after a cancel: {job_id}")
    for job_id in sorted(ended_cancelled - cancel_tried):
        problems.append(f"cancelled, yet nobody cancelled {job_id}")
    returned = set(ok.values())
    for job_id in sorted(existed - set(present) - ended_cancelled):
        if not acking.get(job_id):  # gone, and nobody even tried to ack it
            report.lost += 1
            how = "its enqueue returned" if job_id in returned else "it was delivered"
            problems.append(f"lost: {job_id} ({tag_of.get(job_id)}): {how}, yet it is not "
                            f"in the queue and was never acked")
    for job_id, seen in deliveries.items():
        seen.sort(key=lambda d: d.token)
        report.deliveries += len(seen)
        for first, second in itertools.pairwise(seen):
            report.duplicates += 1
            settled_early = (job_id, first.token) in settled  # nacked, or found stale
            if first.pid not in killed and not settled_early:
                report.unexplained += 1
                problems.append(f"unexplained duplicate: {job_id} token {first.token} "
                                f"(pid {first.pid}, not killed, never nacked) then token "
                                f"{second.token}")
            began = second.expires - cfg.visibility_timeout
            nacked = settled_early and first.token not in stale_tokens.get(job_id, ())
            # Killed between nack's write and its "nacked" line: the nack may have landed,
            # and with delay 0 the job is at once leasable by another worker.
            nacked = nacked or (first.pid in killed and (job_id, first.token) in nacking)
            if not nacked and began < first.expires - 1e-3:
                report.overlaps += 1
                problems.append(f"lease overlap: {job_id} token {second.token} began at "
                                f"{began:.6f}, before token {first.token}'s lease ran out "
                                f"at {first.expires:.6f}")
    if stats.pending or stats.leased:
        problems.append(f"not drained: {stats}")
    if stats.dead != report.dead:
        problems.append(f"stats.dead {stats.dead} != {report.dead} dead jobs listed")
    expected_done = len(existed - set(present) - ended_cancelled)
    if stats.done != expected_done:
        problems.append(f"stats.done {stats.done} != {expected_done} jobs that existed and "
                        f"are gone")
    if stats.total != len(present):
        problems.append(f"stats.total {stats.total} != {len(present)} listed")
    return report


if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1:]))
