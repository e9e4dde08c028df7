"""The soak's child processes: producer, worker and compactor, each writing an event log.

Run as a script (`python roles.py --role worker ...`) by harness.soak's chaos
process; the theory is in harness/soak/__init__.py.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
SRC = HERE.parents[3] / "src"  # tests/harness/soak/roles.py
if str(SRC) not in sys.path:
    sys.path.insert(0, str(SRC))

import nobroker  # noqa: E402
from nobroker import BackoffPolicy, LockTimeoutError, NotLeasedError, Queue  # noqa: E402
from nobroker.dependencies import GraphNode  # noqa: E402


class EventLog:
    """One line per event, one write per line, O_APPEND: what is there happened."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

    def __call__(self, *fields: object) -> None:
        os.write(self.fd, ("\t".join(map(str, fields)) + "\n").encode())


_stop = False
# The limits in the mix (the audit checks the rate's window across every kill -9): a
# rated job's tag ends in RATED, a held one's in HELD.
RATE = (5, 0.25)
RATED, HELD = "~r", "~h"


def _noop(tag: str) -> None:
    return None


def _on_term(signum: int, frame: object) -> None:
    global _stop
    _stop = True


def _open_queue(args: argparse.Namespace) -> Queue:
    while True:
        try:
            q = Queue(args.dir, visibility_timeout=args.vt, max_attempts=args.max_attempts,
                      backoff=BackoffPolicy(base=0.05, max_delay=0.4, jitter=0.5),
                      lock_timeout=30.0)
            q.task(name="soak.rated", rate_limit=RATE)(_noop)
            q.task(name="soak.held", concurrency=2)(_noop)
            return q
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
        elif roll < 0.25:
            _graph(q, log, rng, f"{me}.{n}")
        else:
            task = "soak.rated" if roll > 0.9 else "soak.held" if roll > 0.85 else None
            tag = f"{me}.{n}" + ("" if task is None else RATED if roll > 0.9 else HELD)
            key = tag if roll < 0.4 or roll > 0.95 else None
            log("try", tag, key or "-")
            payload = {"tag": tag, "pad": "x" * rng.randrange(0, 300)}
            if task is not None:  # a call of a limited task (the worker does not mind)
                payload.update(task=task, args=[tag], kwargs={})
            job = q.enqueue(payload, job_id=key)
            log("ok", tag, job.id)
            if rng.random() < 0.05:  # cancel it again: pending, or already held by a worker
                log("cancelling", job.id)
                log("cancelled", job.id, "yes" if q.cancel(job.id) else "no")
        # Producers pace themselves a little: a worker spends two fsyncs on most jobs
        # (lease, ack), so unpaced producers build a backlog the drain must work off.
        time.sleep(rng.uniform(0, 0.004) if rng.random() < 0.95 else rng.uniform(0, 0.02))
    q.close()


def _graph(q: Queue, log: EventLog, rng: random.Random, base: str) -> None:
    """One enqueue_graph: a chord (2 to 4 members, then a callback waiting for them
    all) or a chain of three steps; each dependent's prerequisites logged first."""
    if rng.random() < 0.5:
        members = rng.randint(2, 4)
        tags = [f"{base}.m{i}" for i in range(members)] + [f"{base}.cb"]
        after: list[tuple[int, ...]] = [()] * members + [tuple(range(members))]
    else:
        tags, after = [f"{base}.s{i}" for i in range(3)], [(), (0,), (1,)]
    for tag, prerequisites in zip(tags, after, strict=True):
        if prerequisites:
            log("after", tag, *(tags[i] for i in prerequisites))
    log("trygraph", *tags)
    jobs = q.enqueue_graph([GraphNode({"tag": tag}, prerequisites)
                            for tag, prerequisites in zip(tags, after, strict=True)])
    log("okgraph", *(f"{tag}={job.id}" for tag, job in zip(tags, jobs, strict=True)))


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
            if roll < 0.45 and not with_result and not _stop:
                # The prefetch acker's write: the ACK and the next LEASE in one batch.
                leased = q.ack_many_and_lease([job], 1, visibility_timeout=vt)
                log("acked", job.id, token)
                job = leased[0] if leased else None
            elif roll < 0.6 and not _stop:
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


if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1:]))
