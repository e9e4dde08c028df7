"""Several OS processes on one queue: no job handed out twice, none lost, fencing holds.

Each child is a real `python -c` process (spawn_python) that imports nobroker
from src/. Children wait for a "go" line on stdin so that they start their
loops together, and print what they got as one JSON line when they finish.
No lease expires in the first two tests (visibility_timeout is an hour), so
"every job exactly once" is the claim, not "at least once".
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
import unittest
from collections import Counter
from collections.abc import Callable

from harness.support import TempDirTestCase, spawn_python, store_of

from nobroker import BackoffPolicy, JobNotFoundError, LockTimeoutError, NotLeasedError, Queue

CONSUMER = r"""
import json, sys, time
from nobroker import Queue
directory, batch, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
q = Queue(directory, visibility_timeout=3600)
print("ready", flush=True)
sys.stdin.readline()
got = []
if mode == "drain":  # stop at the first empty lease: every job is already there
    while True:
        jobs = q.lease(batch)
        if not jobs:
            break
        for job in jobs:
            got.append(job.id)
        q.ack_many(jobs)
else:  # run until a "stop" job arrives
    job = None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if job is None:
            job = q.lease_one()
            if job is None:
                time.sleep(0.002)
                continue
        if job.payload == "stop":
            q.ack(job)
            break
        got.append(job.id)
        if mode == "ack_and_lease":
            job = q.ack_and_lease(job)
        else:
            q.ack(job)
            job = None
print(json.dumps(got), flush=True)
"""

PRODUCER = r"""
import json, sys
from nobroker import Queue
q = Queue(sys.argv[1])
print("ready", flush=True)
sys.stdin.readline()
ids = []
for i in range(300):
    if i % 50 == 0:
        ids += [j.id for j in q.enqueue_many([{"n": i, "k": k} for k in range(10)])]
    else:
        ids.append(q.enqueue({"n": i}).id)
for _ in range(3):
    q.enqueue("stop", priority=-1)  # leased only when nothing else is ready
print(json.dumps(ids), flush=True)
"""

HOLDER = r"""
import sys, time
from nobroker import BackoffPolicy, Queue
# This process lives 100 s in the future: every lease the parent holds has expired.
q = Queue(sys.argv[1], clock=lambda: time.time() + 100,
          backoff=BackoffPolicy(base=0, jitter=0))
job = None
for _ in range(10):
    job = q.lease_one(visibility_timeout=3600)
    if job is not None:
        break
print(job.id if job else "none", job.token if job else 0, job.attempts if job else 0,
      flush=True)
sys.stdin.readline()
q.ack(job)
print("acked", flush=True)
"""


class ProcessTestCase(TempDirTestCase):
    def start(self, code: str, *args: str) -> subprocess.Popen[bytes]:
        proc = spawn_python(code, *args)
        self.addCleanup(self._reap, proc)
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if line.strip() != b"ready":
            proc.kill()
            raise AssertionError(f"child failed to start: {line!r} "
                                 f"{proc.communicate()[1].decode(errors='replace')}")
        return proc

    @staticmethod
    def _reap(proc: subprocess.Popen[bytes]) -> None:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()

    @staticmethod
    def go(procs: list[subprocess.Popen[bytes]]) -> None:
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write(b"go\n")
            proc.stdin.flush()

    def result(self, proc: subprocess.Popen[bytes], timeout: float = 120) -> list[str]:
        out, err = proc.communicate(timeout=timeout)
        self.assertEqual(proc.returncode, 0, err.decode(errors="replace"))
        return list(json.loads(out.decode().strip().splitlines()[-1]))


class ParallelConsumersTest(ProcessTestCase):
    def test_four_processes_draining_one_queue_get_disjoint_sets_covering_every_job(self
                                                                                   ) -> None:
        directory = str(self.tmp / "q")
        with Queue(directory) as q:
            all_ids = [j.id for j in q.enqueue_many({"n": i} for i in range(400))]
        procs = [self.start(CONSUMER, directory, str(batch), "drain") for batch in (1, 2, 5, 7)]
        self.go(procs)
        got = [self.result(p) for p in procs]
        counts = Counter(job_id for ids in got for job_id in ids)
        self.assertEqual([i for i, n in counts.items() if n > 1], [], "a job went to two holders")
        self.assertEqual(set(counts), set(all_ids), "a job was never handed out")
        with Queue(directory) as q:
            stats = q.stats()
            self.assertEqual((stats.done, stats.total), (400, 0))

    def test_a_producer_and_three_consumers_hand_every_job_over_exactly_once(self) -> None:
        directory = str(self.tmp / "q")
        Queue(directory).close()
        consumers = [self.start(CONSUMER, directory, "1", mode)
                     for mode in ("one", "one", "ack_and_lease")]
        producer = self.start(PRODUCER, directory)
        self.go([*consumers, producer])
        produced = self.result(producer)
        consumed = [self.result(p) for p in consumers]
        counts = Counter(job_id for ids in consumed for job_id in ids)
        self.assertEqual(len(produced), 300 + 6 * 9)
        self.assertEqual([i for i, n in counts.items() if n > 1], [], "consumed twice")
        self.assertEqual(set(counts), set(produced), "a produced job was never consumed")
        with Queue(directory) as q:
            stats = q.stats()
            self.assertEqual((stats.done, stats.total), (len(produced) + 3, 0))


class CrossProcessFencingTest(ProcessTestCase):
    def test_an_expired_lease_is_reclaimed_elsewhere_and_only_the_new_holder_may_ack(self
                                                                                      ) -> None:
        directory = str(self.tmp / "q")
        q = Queue(directory, visibility_timeout=30)
        self.addCleanup(q.close)
        job = q.enqueue("contested")
        (mine,) = q.lease()
        holder = spawn_python(HOLDER, directory)
        self.addCleanup(self._reap, holder)
        assert holder.stdout is not None and holder.stdin is not None
        job_id, token, attempts = holder.stdout.readline().decode().split()
        self.assertEqual(job_id, job.id, "the other process did not reclaim the lease")
        self.assertNotEqual(int(token), mine.token)
        self.assertEqual(int(attempts), 2, "the expired lease counts as an attempt")
        stale_calls: list[Callable[[], object]] = [
            lambda: q.ack(mine), lambda: q.nack(mine, error="late"),
            lambda: q.extend(mine, 60), lambda: q.ack_many([mine]),
            lambda: q.ack_and_lease(mine)]
        for stale in stale_calls:
            with self.assertRaises(NotLeasedError):
                stale()
        holder.stdin.write(b"ack\n")
        holder.stdin.flush()
        out, err = holder.communicate(timeout=60)
        self.assertEqual(out.strip(), b"acked", err.decode(errors="replace"))
        self.assertRaises(JobNotFoundError, q.get, job.id)
        self.assertEqual(q.stats().done, 1)

    def test_a_lease_held_by_a_killed_process_is_reclaimed_after_it_expires(self) -> None:
        directory = str(self.tmp / "q")
        with Queue(directory) as q:
            job = q.enqueue("orphaned")
        code = ("import sys; from nobroker import Queue\n"
                "q = Queue(sys.argv[1], visibility_timeout=30)\n"
                "print(q.lease_one().token, flush=True)\n"
                "sys.stdin.readline()\n")
        child = spawn_python(code, directory)
        self.addCleanup(self._reap, child)
        assert child.stdout is not None
        dead_token = int(child.stdout.readline())
        child.kill()
        child.wait()
        later = time.time() + 100
        with Queue(directory, clock=lambda: later,
                   backoff=BackoffPolicy(base=0, jitter=0)) as q:
            again = q.lease_one() or q.lease_one()  # reclaiming may take a call of its own
            assert again is not None
            self.assertEqual((again.id, again.attempts), (job.id, 2))
            self.assertNotEqual(again.token, dead_token)
            q.ack(again)


class ThreadsAndForksTest(ProcessTestCase):
    def test_threads_handing_the_file_lock_over_still_exclude_another_process(self) -> None:
        # Our threads pass the file lock from one to the next while one waits;
        # a producer in another process must still get turns, and no write may
        # interleave with another (the reopened log replays every job).
        directory = str(self.tmp / "q")
        with Queue(directory, lock_timeout=60) as q:
            other = self.start(PRODUCER, directory)
            mine: list[list[str]] = [[] for _ in range(4)]

            def produce(into: list[str]) -> None:
                for i in range(150):
                    into.append(q.enqueue({"thread": i}).id)

            threads = [threading.Thread(target=produce, args=(ids,)) for ids in mine]
            for thread in threads:
                thread.start()
            self.go([other])
            for thread in threads:
                thread.join(timeout=120)
            theirs = self.result(other)
        ours = [job_id for ids in mine for job_id in ids]
        self.assertEqual(len(ours), 600)
        self.assertEqual(len(theirs), 294 + 6 * 10)
        with Queue(directory) as q:
            every = {job.id for job in q.list_jobs()}
        self.assertEqual(len(every), 600 + 354 + 3)
        self.assertTrue(set(ours) | set(theirs) <= every)

    def test_a_thread_that_gives_up_waiting_leaves_no_file_lock_behind(self) -> None:
        # The holder sees a waiting thread and keeps the file lock for it; if
        # that thread times out at that very moment, nobody else of ours may
        # come along to release it. The race, played out step by step:
        directory = str(self.tmp / "q")
        with Queue(directory, lock_timeout=0.2) as q:
            q.enqueue("first")
            lock = store_of(q).lock
            lock.acquire(5)
            lock._waiting += 1  # a thread waits ...
            lock.release()  # ... so the holder hands the file lock over
            lock._waiting -= 1  # ... and the thread gives up instead of taking it
            lock._drop_unowned_file_lock()
            code = ("import sys; from nobroker import Queue\n"
                    "Queue(sys.argv[1], lock_timeout=3).enqueue('from another process')\n")
            child = spawn_python(code, directory)
            self.addCleanup(self._reap, child)
            _, err = child.communicate(timeout=60)
            self.assertEqual(child.returncode, 0, err.decode(errors="replace"))

    @unittest.skipUnless(hasattr(os, "fork"), "needs fork()")
    def test_a_forked_child_does_not_share_its_parents_file_lock(self) -> None:
        # flock() belongs to an open file description, which fork() shares: a
        # child using its parent's descriptor would "hold" the lock alongside it.
        with Queue(str(self.tmp / "q"), lock_timeout=0.3) as q:
            q.enqueue("before")
            store_of(q).lock.acquire(5)
            try:
                pid = os.fork()
                if pid == 0:  # pragma: no cover - the child reports by exit code
                    code = 3
                    try:
                        q.enqueue("child")
                        code = 1
                    except LockTimeoutError:
                        code = 0
                    finally:
                        os._exit(code)
                _, status = os.waitpid(pid, 0)
            finally:
                store_of(q).lock.release()
            self.assertEqual(os.waitstatus_to_exitcode(status), 0,
                             "the child wrote while its parent held the lock")
            self.assertEqual(q.stats().pending, 1)


if __name__ == "__main__":
    unittest.main()
