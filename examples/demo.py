"""A guided tour of nobroker: `python make.py demo` (or `python examples/demo.py`).

Eight short scenes, each proving one claim and checking it as it goes: if a
claim does not hold, the tour stops with "DEMO FAILED" and exit status 1.
Everything happens in a temporary directory that is removed at the end;
the tour takes a few seconds.

  1. enqueue with priorities and delays
  2. a worker processes the queue, four handlers at a time
  3. a failing handler is retried with backoff, then dead-lettered
  4. the dead-letter queue is requeued once the bug is fixed
  5. a worker process is killed with `kill -9` mid-job, and the job comes back
  6. compaction shrinks the log
  7. `nobroker inspect` shows the raw records
  8. tasks: @q.task and .delay(), a worker process running examples/tasks.py,
     a periodic tick, and a result

examples/video_demo.py runs the same scenes, paced for a screen recording.
"""

from __future__ import annotations

import argparse
import itertools
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"
sys.path.insert(0, str(SRC))  # the tour shows this checkout's nobroker, installed or not

from nobroker import BackoffPolicy, Job, JobNotFoundError, JobState, Queue, Worker  # noqa: E402


class DemoFailed(Exception):
    """A claim the tour makes did not hold."""


class Tour:
    """What the scenes print with, and where they keep their queues."""

    def __init__(self, root: Path, *, pace: float = 0.0, typing: float = 0.0) -> None:
        self.root = root
        self.pace = pace  # seconds to let a result sink in (0 for the plain demo)
        self.typing = typing  # seconds per character when showing a command
        self.workers: list[subprocess.Popen[str]] = []
        self._log = logging.getLogger("nobroker")

    # -- printing -----------------------------------------------------------

    def heading(self, number: int, title: str) -> None:
        print(f"\n== {number}. {title} " + "=" * max(0, 66 - len(title)), flush=True)

    def say(self, text: str) -> None:
        print(text, flush=True)

    def type_out(self, text: str) -> None:
        if not self.typing:
            print(text, flush=True)
            return
        for char in text:
            print(char, end="", flush=True)
            time.sleep(self.typing)
        print(flush=True)

    def beat(self, factor: float = 1.0) -> None:
        if self.pace:
            time.sleep(self.pace * factor)

    def check(self, condition: object, claim: str) -> None:
        if not condition:
            raise DemoFailed(claim)
        print(f"   [ok] {claim}", flush=True)
        self.beat(0.5)

    def logs(self) -> _LogEcho:
        """Echo the library's warnings, as a user's logging setup would."""
        return _LogEcho(self._log)

    # -- running ------------------------------------------------------------

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        paths = [str(SRC), str(HERE), env.get("PYTHONPATH", "")]
        env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
        return env

    def nobroker(self, *args: str, show: bool = True, max_lines: int = 14) -> str:
        """Run the CLI as a user would (from the tour's directory) and print what it says."""
        self.type_out("$ nobroker " + " ".join(args))
        result = subprocess.run([sys.executable, "-m", "nobroker", *args], cwd=self.root,
                                env=self.env(), capture_output=True, text=True, timeout=60,
                                check=False)
        if result.returncode != 0:
            raise DemoFailed(f"`nobroker {' '.join(args)}` exited {result.returncode}: "
                             f"{result.stderr.strip()}")
        lines = result.stdout.rstrip("\n").splitlines()
        if show:
            for line in lines[:max_lines]:
                print("  " + (line if len(line) <= 110 else line[:107] + "..."))
            if len(lines) > max_lines:
                print(f"  ... ({len(lines) - max_lines} more lines)")
        self.beat()
        return result.stdout

    def spawn_worker(self, *args: str) -> subprocess.Popen[str]:
        self.type_out("$ nobroker " + " ".join(args) + " &")
        proc = subprocess.Popen([sys.executable, "-m", "nobroker", *args], cwd=self.root,
                                env=self.env(), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        self.workers.append(proc)
        return proc

    def queue(self, name: str, **options: Any) -> Queue:
        return Queue(self.root / "jobs", name, **options)

    def close(self) -> None:
        for proc in self.workers:
            if proc.poll() is None:
                proc.kill()
            proc.communicate(timeout=10)


class _LogEcho(logging.Handler):
    def __init__(self, logger: logging.Logger) -> None:
        super().__init__(logging.WARNING)
        self.logger = logger

    def emit(self, record: logging.LogRecord) -> None:
        print(f"   log| {record.levelname} {record.getMessage()}", flush=True)

    def __enter__(self) -> _LogEcho:
        self.logger.addHandler(self)
        self.logger.setLevel(logging.INFO)
        return self

    def __exit__(self, *exc: object) -> None:
        self.logger.removeHandler(self)


def wait_for(condition: Callable[[], object], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise DemoFailed(f"{what} within {timeout:g}s")
        time.sleep(0.02)
    return value


# -- the scenes ---------------------------------------------------------------

def scene_priorities(tour: Tour) -> None:
    tour.heading(1, "Enqueue: priorities and delays")
    tour.say("A queue is a directory. Enqueue returns once the job is on disk (fsync).")
    q = tour.queue("emails")
    tour.type_out('>>> q.enqueue({"to": "ada@example.com"})')
    q.enqueue({"to": "ada@example.com"})
    tour.type_out('>>> q.enqueue({"to": "oncall@example.com"}, priority=10)')
    q.enqueue({"to": "oncall@example.com"}, priority=10)
    tour.type_out('>>> q.enqueue({"to": "weekly-digest"}, delay=1.5)')
    later = q.enqueue({"to": "weekly-digest"}, delay=1.5)
    tour.beat()
    tour.nobroker("--dir", "jobs", "--queue", "emails", "list")
    order = [job.payload["to"] for job in q.lease(3)]
    tour.say(f"lease(3) hands out: {order}")
    tour.check(order == ["oncall@example.com", "ada@example.com"],
               "the higher priority goes first; the delayed job stays hidden")
    time.sleep(max(0.0, later.available_at - time.time()) + 0.05)
    ready = q.lease_one()
    tour.check(ready is not None and ready.id == later.id,
               "1.5 seconds later the delayed job is leasable")
    q.close()


def scene_worker(tour: Tour) -> None:
    tour.heading(2, "A worker: return = done, four handlers at a time")
    q = tour.queue("thumbnails")
    q.enqueue_many([{"photo": f"img_{n:03}.jpg"} for n in range(24)])
    tour.say("24 jobs queued. The handler is a plain function:")
    tour.type_out(">>> def make_thumbnail(job): time.sleep(0.05)   # pretend to resize")
    tour.type_out(">>> Worker(q, make_thumbnail, concurrency=4, idle_timeout=0.3).run()")
    stats = Worker(q, lambda job: time.sleep(0.05), concurrency=4, idle_timeout=0.3,
                   handle_signals=False).run()
    tour.say(f"{stats.succeeded} succeeded, {stats.failed} failed, "
             f"{stats.seconds:.2f}s including the 0.3s idle wait (24 x 0.05s in a row = 1.2s)")
    tour.check(stats.succeeded == 24 and q.stats().total == 0,
               "every job was acked exactly once and the queue is empty")
    tour.check(stats.stopped_by == "idle_timeout", "idle_timeout stopped the worker cleanly")
    q.close()


def scene_retries(tour: Tour) -> None:
    tour.heading(3, "A failing handler: retried with backoff, then dead-lettered")
    q = tour.queue("webhooks", max_attempts=3,
                   backoff=BackoffPolicy(base=0.25, factor=2.0, jitter=0.0))
    job = q.enqueue({"url": "https://partner.example.com/hook"})
    tour.say("max_attempts=3; backoff 0.25s, then 0.5s. The partner's server is down:")
    times: list[float] = []

    def deliver(job: Job) -> None:
        times.append(time.monotonic())
        raise ConnectionError("partner.example.com refused the connection")

    with tour.logs():
        Worker(q, deliver, max_jobs=3, handle_signals=False).run()
    gaps = [b - a for a, b in itertools.pairwise(times)]
    tour.say("gaps between attempts: " + ", ".join(f"{g:.2f}s" for g in gaps))
    tour.check(len(times) == 3 and gaps[0] >= 0.24 and gaps[1] >= 0.49,
               "each retry waited out its backoff, and the waits doubled")
    dead = q.get(job.id)
    tour.check(dead.state is JobState.DEAD and
               dead.last_error == "ConnectionError: partner.example.com refused the connection",
               "after 3 attempts it is in the dead-letter queue, with the error recorded")
    q.close()


def scene_requeue(tour: Tour) -> None:
    tour.heading(4, "The dead-letter queue: look, fix, requeue")
    q = tour.queue("webhooks")
    if not q.dlq():  # scene 3 did not run (--scenes 4): make the dead job it would have left
        dying = q.enqueue({"url": "https://partner.example.com/hook"}, max_attempts=1)
        q.nack(q.lease_one() or dying, error="ConnectionError: partner.example.com refused "
               "the connection")
    tour.nobroker("--dir", "jobs", "--queue", "webhooks", "dlq")
    tour.say("The partner is back up. Requeue everything in the DLQ:")
    tour.nobroker("--dir", "jobs", "--queue", "webhooks", "dlq", "--requeue")
    revived = q.list_jobs(JobState.PENDING)
    tour.check(len(revived) == 1 and revived[0].attempts == 0,
               "the job is pending again, with a fresh attempt budget")
    delivered: list[str] = []
    Worker(q, lambda job: delivered.append(job.id), max_jobs=1, handle_signals=False).run()
    tour.check(delivered == [revived[0].id] and q.stats().total == 0,
               "this time the handler succeeds and the job is done")
    q.close()


def scene_kill(tour: Tour) -> None:
    tour.heading(5, "kill -9 a worker mid-job: the job comes back")
    q = tour.queue("reports")
    marker = tour.root / "started.pid"
    job = q.enqueue({"report": "q3", "seconds": 60, "started": str(marker)})
    tour.say("A worker process starts a 60-second job (examples/handlers.py:slow).")
    tour.say("It renews its 1-second lease with heartbeats while the handler runs.")
    proc = tour.spawn_worker("--dir", "jobs", "--queue", "reports", "work", "handlers:slow",
                             "--visibility-timeout", "1", "-q")
    wait_for(marker.exists, 20, "the worker did not start the job")
    wait_for(lambda: marker.read_text().strip(), 5, "the worker did not write its pid")
    tour.check(q.get(job.id).state is JobState.LEASED, "the job is leased to the worker")
    tour.beat()
    tour.type_out(f"$ kill -9 {proc.pid}")
    proc.kill()
    proc.communicate(timeout=10)
    tour.say(f"worker gone (exit status {proc.returncode}); nothing acked, nothing nacked.")
    tour.say("Nobody told the queue. The lease simply runs out, within a second:")
    again: list[Job] = []
    Worker(q, again.append, max_jobs=1, handle_signals=False).run()
    redelivered = again[0] if again else None
    tour.check(redelivered is not None and redelivered.id == job.id and
               redelivered.payload == job.payload,
               "a new worker got the same job with the same payload")
    assert redelivered is not None
    tour.check(redelivered.attempts == 2 and "lease expired" in (redelivered.last_error or ""),
               f"it is attempt 2, and the record says why: {redelivered.last_error!r}")
    q.close()


def scene_compaction(tour: Tour) -> None:
    tour.heading(6, "Compaction: the log only grows, until it is rewritten")
    q = tour.queue("events", auto_compact=None)
    q.enqueue_many([{"event": n, "data": "x" * 80} for n in range(2000)])
    for _ in range(4):  # lease and ack 500 at a time: one write and one fsync per batch
        q.ack_many(q.lease(500))
    q.enqueue_many([{"event": "late"}, {"event": "later"}])
    before = q.stats()
    tour.say(f"2,000 jobs enqueued, leased and acked, 2 still pending: "
             f"the log holds {before.log_bytes:,} bytes of history.")
    tour.type_out(">>> q.compact()")
    result = q.compact()
    tour.say(f"generation {result.old_generation} -> {result.new_generation}: "
             f"{result.bytes_before:,} -> {result.bytes_after:,} bytes in "
             f"{result.seconds * 1000:.0f} ms")
    tour.check(result.bytes_after * 20 < result.bytes_before,
               "the new generation is a tiny fraction of the old one")
    tour.check(q.stats().pending == 2 and [j.payload["event"] for j in q.list_jobs()] ==
               ["late", "later"], "and it still holds exactly the two pending jobs")
    q.close()


def scene_inspect(tour: Tour) -> None:
    tour.heading(7, "nobroker inspect: the raw log, record by record")
    q = tour.queue("peek")
    job = q.enqueue({"hello": "log"})
    leased = q.lease_one()
    assert leased is not None
    q.ack(leased)
    tour.say("One job, enqueued, leased and acked. The log is JSON behind a small frame")
    tour.say("(length, type, CRC32), so you can read what the queue wrote:")
    text = tour.nobroker("--dir", "jobs", "--queue", "peek", "inspect")
    rows = [line.split(maxsplit=3) for line in text.splitlines()[2:]]
    types = [row[1] for row in rows if len(row) == 4 and row[2] == "ok"]
    tour.check(types == ["ENQUEUE", "LEASE", "ACK"],
               "three records: ENQUEUE, LEASE, ACK, each with a good CRC")
    try:
        q.get(job.id)
        gone = False
    except JobNotFoundError:
        gone = True
    tour.check(gone, "an acked job is gone from the queue; only the log remembers it")
    q.close()


def scene_tasks(tour: Tour) -> None:
    tour.heading(8, "Tasks: @q.task, .delay(), a periodic tick and a result")
    directory = tour.root / "jobs"
    saved = os.environ.get("NOBROKER_DIR")
    os.environ["NOBROKER_DIR"] = str(directory)  # where examples/tasks.py opens its queue
    try:
        sys.modules.pop("tasks", None)
        import tasks  # examples/tasks.py, the module the worker will run
    finally:
        if saved is None:
            os.environ.pop("NOBROKER_DIR", None)
        else:
            os.environ["NOBROKER_DIR"] = saved
    tour.say("examples/tasks.py registers its tasks on a queue:")
    tour.type_out('>>> @q.task(name="tasks.send_email", max_attempts=3)')
    tour.type_out('... def send_email(to, subject=""): return {"sent": True, ...}')
    tour.type_out('>>> r = tasks.send_email.delay("ada@example.com", subject="hi")')
    r = tasks.send_email.delay("ada@example.com", subject="hi")
    payload = tasks.q.get(r.id).payload
    tour.say(f"the job's payload: {payload}")
    tour.check(payload == {"task": "tasks.send_email", "args": ["ada@example.com"],
                           "kwargs": {"subject": "hi"}},
               "a task job is plain JSON that any program could have written")
    proc = tour.spawn_worker("--dir", "jobs", "--queue", "tasks", "work", "tasks",
                             "--concurrency", "2", "-q")
    tour.type_out(">>> r.get(timeout=20)")
    value = r.get(timeout=20)
    tour.say(f"{value}")
    tour.check(value == {"sent": True, "to": "ada@example.com", "subject": "hi"},
               "the worker process ran the task and r.get() returned its result")
    beats = directory / "heartbeats.log"
    wait_for(lambda: beats.exists() and beats.read_text().strip(), 20,
             "the periodic heartbeat did not run")
    tick = beats.read_text().split()[0]
    tour.say(f"the periodic task tasks.heartbeat (every=60) ran as job {tick}")
    tour.check(tick.startswith("periodic:tasks.heartbeat:"),
               "the tick missed before the worker started ran once, under an idempotent id")
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=30)
    tour.check(proc.returncode == 0, "SIGTERM stopped the worker cleanly")
    tasks.q.close()


SCENES: list[Callable[[Tour], None]] = [scene_priorities, scene_worker, scene_retries,
                                        scene_requeue, scene_kill, scene_compaction,
                                        scene_inspect, scene_tasks]


def run_tour(numbers: Sequence[int], *, pace: float = 0.0, typing: float = 0.0,
             between: Callable[[int], None] | None = None) -> int:
    """Run the chosen scenes (1-based) in a fresh temporary directory; returns an exit code."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="nobroker-demo-") as tmp:
        tour = Tour(Path(tmp), pace=pace, typing=typing)
        print(f"nobroker tour: working in {tmp} (removed afterwards)")
        try:
            for position, number in enumerate(numbers):
                if position and between is not None:
                    between(number)
                SCENES[number - 1](tour)
        except DemoFailed as exc:
            print(f"\nDEMO FAILED: {exc}", file=sys.stderr)
            return 1
        finally:
            tour.close()
    print(f"\nAll claims held: {len(numbers)} scene(s) in {time.monotonic() - started:.1f}s. "
          f"The temporary directory is gone.")
    return 0


def parse_scenes(text: str | None) -> list[int]:
    if not text:
        return list(range(1, len(SCENES) + 1))
    numbers = [int(part) for part in text.replace(" ", "").split(",") if part]
    bad = [n for n in numbers if not 1 <= n <= len(SCENES)]
    if bad:
        raise argparse.ArgumentTypeError(f"no scene {bad[0]}; scenes are 1-{len(SCENES)}")
    return numbers


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="A guided tour of nobroker.")
    parser.add_argument("--scenes", type=parse_scenes, default=parse_scenes(None),
                        metavar="N[,N...]", help="run only these scenes (1-8)")
    args = parser.parse_args(argv)
    return run_tour(args.scenes)


if __name__ == "__main__":
    sys.exit(main())
