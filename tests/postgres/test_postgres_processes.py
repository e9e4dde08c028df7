"""Several worker processes, standing in for hosts, on one PostgreSQL queue.

Real processes, real `kill -9`, a real server restart (`pg_ctl restart -m
immediate`). Each child writes one line per job *after* the call that
settled it returned, so what the files hold is what the queue promised.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import unittest
from pathlib import Path
from typing import Any

from harness.postgres import (
    PG_CTL_ENV,
    drop_schema,
    fresh_schema_url,
    needs_postgres,
    open_queue,
    restart_server,
    schema_sql,
)
from harness.support import TempDirTestCase, child_env, slow, spawn_python, wait_until

TESTS = str(Path(__file__).resolve().parent.parent)  # tests/: harness.postgres, harness.support

# A consumer: lease, ack, and write the acked id (after ack returned) to its file.
# It starts when its stdin closes (`go`), so that consumers spawned one after the
# other start together.
CONSUMER = """
import json, sys, time
sys.path[:0] = [sys.argv[1]]
from harness.postgres import open_queue
from nobroker import NotLeasedError
url, out, vt, hold = sys.argv[2], sys.argv[3], float(sys.argv[4]), float(sys.argv[5])
q = open_queue(url, "work", visibility_timeout=vt)
with open(out, "a") as f:
    print("ready", flush=True)
    sys.stdin.read()
    while True:
        job = q.lease_one()
        if job is None:
            if q.stats().total == 0:
                break
            q.wait(0.5)
            continue
        time.sleep(hold)
        try:
            q.ack(job)
        except NotLeasedError:
            continue
        f.write(job.id + "\\n"); f.flush()
"""

# A Worker process: the real Worker loop, writing each handled payload's id after it ran.
WORKER = """
import json, logging, sys
sys.path[:0] = [sys.argv[1]]
logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
from harness.postgres import open_queue
from nobroker import Worker
url, out = sys.argv[2], sys.argv[3]
q = open_queue(url, "work", visibility_timeout=2.0)
f = open(out, "a")
def handle(job):
    f.write(json.dumps(job.payload) + "\\n"); f.flush()
print("ready", flush=True)
Worker(q, handle, concurrency=2, poll_interval=0.05).run()
"""

# A consumer of limited tasks (issue 24's measure): declares them as a worker would,
# leases one job at a time until its time is up, and writes for each
# [lease start by the server's clock, wall time after the lease returned, wall time
# before its ack, concurrency key].
LIMITED = """
import json, sys, time
sys.path[:0] = [sys.argv[1]]
from harness.postgres import open_queue
url, out, seconds = sys.argv[2], sys.argv[3], float(sys.argv[4])
chain = "chain" in sys.argv[5:]  # each ack leases the next job: q.ack_and_lease
count = 40 if "wide" in sys.argv[5:] else 5  # COUNT or WIDE
q = open_queue(url, "work", visibility_timeout=30.0)
q.task(name="limited", rate_limit=(count, 0.5))(lambda n: n)
q.task(name="held", concurrency=2, concurrency_key=lambda n: "k" + str(n % 2))(lambda n: n)
with open(out, "a") as f:
    print("ready", flush=True)
    sys.stdin.read()
    deadline = time.time() + seconds
    job = None
    while time.time() < deadline:
        job = job or q.lease_one()
        if job is None:
            q.wait(min(0.5, max(0.0, deadline - time.time())))
            continue
        leased = time.time()
        if job.payload["task"] == "held":
            time.sleep(0.1)
        acking = time.time()
        done, job = job, q.ack_and_lease(job) if chain else q.ack(job)
        f.write(json.dumps([done.lease_expires_at - 30.0, leased, acking,
                            "k" + str(done.payload["args"][0] % 2)]) + "\\n")
        f.flush()
"""
COUNT, PERIOD, PERIODS = 5, 0.5, 20
WIDE = 40  # a window wide enough for starts granted ahead (migrations/0016)


def _lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


class _Processes(TempDirTestCase):
    """A fresh schema's queue `work`, and consumer processes spawned on it."""

    def setUp(self) -> None:
        super().setUp()
        self.url = fresh_schema_url()
        self.addCleanup(drop_schema, self.url)
        self.queue = open_queue(self.url, "work")
        self.addCleanup(self.queue.close)

    def spawn(self, code: str, *args: str) -> subprocess.Popen[bytes]:
        with open(self.tmp / f"stderr-{time.monotonic()}", "wb") as errors:
            proc = spawn_python(code, TESTS, self.url, *args, stderr=errors)
        self.addCleanup(self._reap, proc)
        assert proc.stdout is not None
        self.assertEqual(proc.stdout.readline().strip(), b"ready")
        return proc

    @staticmethod
    def go(procs: list[subprocess.Popen[bytes]]) -> None:
        """Start consumers that are ready: close their stdin."""
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.close()

    @staticmethod
    def _reap(proc: subprocess.Popen[bytes]) -> None:
        if proc.stdin and not proc.stdin.closed:
            proc.stdin.close()
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        if proc.stdout:
            proc.stdout.close()


@needs_postgres
class PostgresProcessesTest(_Processes):
    def test_three_consumer_processes_ack_every_job_once_between_them(self) -> None:
        jobs = self.queue.enqueue_many(list(range(600)))
        outs = [self.tmp / f"acked-{n}" for n in range(3)]
        procs = [self.spawn(CONSUMER, str(out), "30", "0") for out in outs]
        self.go(procs)
        for proc in procs:
            self.assertEqual(proc.wait(120), 0)
        acked = [_lines(out) for out in outs]
        every = [job_id for part in acked for job_id in part]
        self.assertEqual(len(every), len(set(every)), "a job was acked by two processes")
        self.assertEqual(set(every), {j.id for j in jobs}, "a job was never acked")
        self.assertTrue(all(acked), f"a process got no job: {[len(a) for a in acked]}")
        self.assertEqual(self.queue.stats().done, 600)

    def test_a_consumer_killed_with_sigkill_loses_no_job(self) -> None:
        jobs = self.queue.enqueue_many(list(range(200)))
        outs = [self.tmp / f"acked-{n}" for n in range(3)]
        procs = [self.spawn(CONSUMER, str(out), "1.0", "0.01") for out in outs]
        self.go(procs)
        wait_until(lambda: len(_lines(outs[0])) >= 5, 60, "the first consumer to ack jobs")
        os.kill(procs[0].pid, signal.SIGKILL)
        procs[0].wait()
        for proc in procs[1:]:
            self.assertEqual(proc.wait(180), 0)
        # The killed process may have acked a job and died before writing it down:
        # the queue's own count says whether every job was acked.
        stats = self.queue.stats()
        self.assertEqual((stats.total, stats.done), (0, 200))
        recorded = [job_id for out in outs for job_id in _lines(out)]
        self.assertLessEqual(set(recorded), {j.id for j in jobs})
        self.assertEqual(len(recorded), len(set(recorded)), "a job was acked twice")
        self.assertGreaterEqual(len(recorded), 199)

    def test_a_stale_ack_from_another_process_after_the_lease_was_reclaimed_is_refused(self
                                                                                     ) -> None:
        job = self.queue.enqueue("contested")
        holder = spawn_python("""
import sys
sys.path[:0] = [sys.argv[1]]
from harness.postgres import open_queue
from nobroker import NotLeasedError
q = open_queue(sys.argv[2], "work", visibility_timeout=0.3)
job = q.lease_one()
print(job.id, job.token, flush=True)
sys.stdin.readline()
try:
    q.ack(job)
    print("acked", flush=True)
except NotLeasedError as exc:
    print("refused", exc.reason, flush=True)
""", TESTS, self.url)
        self.addCleanup(self._reap, holder)
        self.addCleanup(holder.stdin.close)  # type: ignore[union-attr]
        self.addCleanup(holder.stderr.close)  # type: ignore[union-attr]
        assert holder.stdout is not None and holder.stdin is not None
        held_id, held_token = holder.stdout.readline().split()
        self.assertEqual(held_id.decode(), job.id)
        taken: list[Any] = []
        wait_until(lambda: bool(taken.extend(self.queue.lease()) or taken), 30,
                 "the expired lease to be reclaimed and leased again")
        self.assertNotEqual(str(taken[0].token), held_token.decode())
        holder.stdin.write(b"go\n")
        holder.stdin.flush()
        answer = holder.stdout.readline().decode()
        self.assertTrue(answer.startswith("refused"), answer)
        self.queue.ack(taken[0])
        self.assertEqual(self.queue.stats().done, 1)

    @slow
    @unittest.skipUnless(os.environ.get(PG_CTL_ENV), "needs the test cluster's pg_ctl")
    def test_workers_carry_on_across_an_immediate_server_restart_and_lose_nothing(self
                                                                                 ) -> None:
        outs = [self.tmp / f"handled-{n}" for n in range(2)]
        for out in outs:
            self.spawn(WORKER, str(out))
        promised: list[int] = []

        def produce(count: int) -> None:
            for _ in range(count):
                n = len(promised)
                try:
                    self.queue.enqueue(n)
                except Exception:
                    continue
                promised.append(n)

        def handled() -> set[int]:
            return {int(x) for out in outs for x in _lines(out)}

        produce(100)
        wait_until(lambda: len(handled()) >= 50, 60, "the workers to handle jobs")
        restart_server()
        wait_until(lambda: _try(lambda: self.queue.stats()), 60, "the server to come back")
        produce(100)
        wait_until(lambda: set(promised) <= handled(), 120,
                 "every job enqueued before and after the restart to be handled")
        self.assertGreaterEqual(len(promised), 190)


# A handler module for `nobroker work`: each payload, written after the handler ran.
HANDLER = """
import json, os
def handle(job):
    with open(os.environ["HANDLED"], "a") as f:
        f.write(json.dumps(job.payload["n"]) + "\\n")
"""


@needs_postgres
class PostgresCliTest(TempDirTestCase):
    """The CLI, unchanged, on a URL: --url, --dir URL and $NOBROKER_URL; `work` processes."""

    def setUp(self) -> None:
        super().setUp()
        self.url = fresh_schema_url()
        self.addCleanup(drop_schema, self.url)
        (self.tmp / "handlers.py").write_text(HANDLER)

    def env(self, **extra: str) -> dict[str, str]:
        env = child_env()
        env.pop("NOBROKER_DIR", None)
        env.pop("NOBROKER_URL", None)
        return {**env, **extra}

    def nb(self, *args: str, env: dict[str, str] | None = None) -> str:
        done = subprocess.run([sys.executable, "-m", "nobroker", *args], cwd=self.tmp,
                              env=env or self.env(), capture_output=True, text=True,
                              timeout=120, check=False)
        self.assertEqual(done.returncode, 0, f"{args}: {done.stderr}")
        return done.stdout

    def test_two_cli_worker_processes_run_every_job_of_a_url_queue_once(self) -> None:
        from harness.postgres import URL

        from nobroker.postgres.url import parse

        secret = parse(URL).secrets[0]
        ids = [self.nb("enqueue", "--url", self.url, "--queue", "work", '{"n": 0}'),
               self.nb("enqueue", "--dir", self.url, "--queue", "work", '{"n": 1}'),
               self.nb("enqueue", "--queue", "work", '{"n": 2}',
                       env=self.env(NOBROKER_URL=self.url))]
        self.assertEqual(len({i.strip() for i in ids}), 3)
        with open_queue(self.url, "work") as q:
            q.enqueue_many([{"n": n} for n in range(3, 60)])
        outs = [self.tmp / f"handled-{n}" for n in range(2)]
        workers = [subprocess.Popen(
            [sys.executable, "-m", "nobroker", "work", "handlers:handle", "--queue", "work",
             "--concurrency", "2", "--idle-timeout", "3", "-q"], cwd=self.tmp,
            env=self.env(NOBROKER_URL=self.url, HANDLED=str(out)),
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for out in outs]
        for proc in workers:
            self.addCleanup(proc.kill)
            _, errors = proc.communicate(timeout=180)
            self.assertEqual(proc.returncode, 0, errors)
            self.assertNotIn(secret, errors)
        handled = [int(line) for out in outs for line in _lines(out)]
        self.assertEqual(sorted(handled), list(range(60)), "each job handled exactly once")
        stats = json.loads(self.nb("stats", "--json", "--url", self.url, "--queue", "work"))
        self.assertEqual((stats["pending"], stats["leased"], stats["done"]), (0, 0, 60))
        self.assertNotIn(secret, json.dumps(stats))


@needs_postgres
@unittest.skipIf(sys.platform == "win32", "POSIX processes")
class PostgresLimitsAcrossProcessesTest(_Processes):
    """Issue 24's measure on PostgreSQL: four processes, one limited backlog."""

    def run_limited(self, items: list[dict[str, Any]], seconds: float,
                    *mode: str) -> list[list[Any]]:
        declared = open_queue(self.url, "work")
        count = WIDE if "wide" in mode else COUNT
        declared.task(name="limited", rate_limit=(count, PERIOD))(lambda n: n)
        declared.task(name="held", concurrency=2,
                      concurrency_key=lambda n: "k" + str(n % 2))(lambda n: n)
        declared.enqueue_many(items)  # the keys are computed by the enqueuing process
        declared.close()
        outs = [self.tmp / f"limited-{n}" for n in range(4)]
        procs = [self.spawn(LIMITED, str(out), str(seconds), *mode) for out in outs]
        self.go(procs)
        for proc in procs:
            self.assertEqual(proc.wait(seconds + 60), 0)
        return [json.loads(line) for out in outs if out.exists()
                for line in out.read_text().splitlines()]

    @slow
    def test_four_processes_never_exceed_the_window_and_use_95_percent_of_it(self) -> None:
        self.check_window()

    @slow
    def test_the_window_holds_when_each_ack_leases_the_next_job(self) -> None:
        self.check_window("chain")  # limited_ack_and_lease.sql, one statement a job

    @slow
    def test_a_wide_window_holds_and_is_used_95_percent_with_starts_granted(self) -> None:
        self.check_window("chain", "wide")  # 40 a half second: a quarter grantable

    def check_window(self, *mode: str) -> None:
        count = WIDE if "wide" in mode else COUNT
        rows = self.run_limited([{"task": "limited", "args": [n], "kwargs": {}}
                                 for n in range(count * PERIODS * 4)], PERIOD * PERIODS + 2.0,
                                *mode)
        times = sorted(row[0] for row in rows)
        self.assertGreater(len(times), count * PERIODS)
        # Sliding: any count + 1 consecutive starts span at least a period (the
        # server's times, less the visibility timeout added and taken off again).
        for first, last in zip(times, times[count:], strict=False):
            self.assertGreaterEqual(last - first, PERIOD - 1e-6, (first, last))
        within = [at for at in times if at < times[0] + PERIOD * PERIODS]
        self.assertGreaterEqual(len(within), 0.95 * count * PERIODS, len(within))

    @slow
    def test_the_window_holds_while_starts_are_granted_ahead(self) -> None:
        # Waves of jobs, each once the window is empty again: a wave's first
        # ack_and_lease finds it at most half used and takes starts ahead for its
        # process (recorded at the latest time they may be used), which leases
        # with them, no lock taken, while the three others lease under the lock.
        declared = open_queue(self.url, "work")
        self.addCleanup(declared.close)
        declared.task(name="limited", rate_limit=(WIDE, PERIOD))(lambda n: n)
        outs = [self.tmp / f"limited-{n}" for n in range(4)]
        procs = [self.spawn(LIMITED, str(out), "300", "chain", "wide") for out in outs]
        self.go(procs)
        waves = [60] * 5 + [15]  # the last one too small to wrap the ring of 40
        for wave, size in enumerate(waves):
            declared.enqueue_many([{"task": "limited", "args": [wave * 100 + n], "kwargs": {}}
                                   for n in range(size)])
            done = sum(waves[:wave + 1])
            wait_until(lambda done=done: sum(len(out.read_text().splitlines()) for out in outs
                                             if out.exists()) >= done, timeout=60)
            time.sleep(PERIOD + 0.1)  # every start of the wave out of the window
        rows = [json.loads(line) for out in outs for line in out.read_text().splitlines()]
        times = sorted(row[0] for row in rows)
        self.assertEqual(len(times), sum(waves))
        for first, last in zip(times, times[WIDE:], strict=False):
            self.assertGreaterEqual(last - first, PERIOD - 1e-6, (first, last))
        # Starts were granted: the ring holds times no lease started at (a grant's,
        # or a start recorded after one's, in order).
        ring = [at for (at,) in schema_sql(
            self.url, "SELECT at FROM {s}.limit_starts WHERE key = 'limited'")]
        ahead = [at for at in ring if all(abs(at - t) > 1e-6 for t in times)]
        self.assertTrue(ahead, ring)

    @slow
    def test_a_concurrency_key_never_has_more_holders_than_its_limit(self) -> None:
        self.check_holders()

    @slow
    def test_the_holders_stay_within_the_limit_when_each_ack_leases_the_next_job(self
                                                                                 ) -> None:
        self.check_holders("chain")

    def check_holders(self, *mode: str) -> None:
        # Four in five of key k0, so that four processes unlimited would hold more.
        rows = self.run_limited([{"task": "held", "args": [2 * n + (n % 5 == 4)], "kwargs": {}}
                                 for n in range(200)], 3.0, *mode)
        self.assertGreater(len(rows), 20)
        # Each [after the lease returned, before its ack] lies inside the holding,
        # so more than two of one key overlapping would be more than two holders.
        for key in ("k0", "k1"):
            events = sorted([(row[1], 1) for row in rows if row[3] == key]
                            + [(row[2], -1) for row in rows if row[3] == key],
                            key=lambda event: (event[0], event[1]))
            holders = 0
            for _, change in events:
                holders += change
                self.assertLessEqual(holders, 2, key)


def _try(call: Any) -> bool:
    try:
        call()
        return True
    except Exception:
        return False


if __name__ == "__main__":
    unittest.main()
