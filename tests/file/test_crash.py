"""Crashes: real processes killed with SIGKILL, and a log cut at every byte.

A child process does real work on a queue and reports, through a pipe, each
call that *returned* (the report is written after the call returns, so the
parent may miss the last one, never see one that did not return). The
parent kills it at a random moment, reopens the queue and checks:
- durability: every reported effect is there;
- atomicity: a batch (enqueue_many) is there whole or not at all;
- prefix consistency: at most the one call in flight is there unreported.

The truncation sweep cuts a real log at every byte offset and checks that
each cut opens, repaired, to exactly the replay of the batches before it.
"""

from __future__ import annotations

import logging
import os
import random
import shutil
import tempfile
import threading
import time
import unittest
from collections import Counter
from pathlib import Path
from typing import Any

from harness.support import (
    FakeClock,
    TempDirTestCase,
    file_queue,
    scratch_root,
    slow,
    spawn_python,
    store_of,
)

from nobroker import BackoffPolicy, Job, JobState, Queue
from nobroker.dependencies import GraphNode
from nobroker.file.inspection import read_records
from nobroker.file.log.records import RecordType
from nobroker.file.state.state import Applied, replay

SEED = int(os.environ.get("NOBROKER_CRASH_SEED", "20261129"))

ENQUEUE_LOOP = r"""
import os, sys
from nobroker import Queue
q = Queue(sys.argv[1])
os.write(1, b"ready\n")
i = 0
while True:
    job = q.enqueue({"i": i, "pad": "x" * 64})
    os.write(1, job.id.encode() + b"\n")
    i += 1
"""

THREADED_ENQUEUE_LOOP = r"""
import os, sys, threading
from nobroker import Queue
q = Queue(sys.argv[1])
def produce(t):
    i = 0
    while True:
        job = q.enqueue({"t": t, "i": i})
        os.write(1, job.id.encode() + b"\n")  # one write per line: whole lines only
        i += 1
for t in range(4):
    threading.Thread(target=produce, args=(t,), daemon=True).start()
os.write(1, b"ready\n")
threading.Event().wait()
"""

ENQUEUE_MANY_LOOP = r"""
import os, sys
from nobroker import Queue
q = Queue(sys.argv[1])
tag, size = int(sys.argv[2]), int(sys.argv[3])
os.write(1, b"ready\n")
k = 0
while True:
    q.enqueue_many([{"batch": f"{tag}-{k}", "i": i, "pad": "y" * 200} for i in range(size)])
    os.write(1, f"{tag}-{k}\n".encode())
    k += 1
"""

COMPACT_LOOP = r"""
import os, sys
from nobroker import Queue
q = Queue(sys.argv[1])
os.write(1, b"ready\n")
while True:
    q.compact()
    os.write(1, b"compacted\n")
"""


class Child:
    """A child process whose stdout lines are collected by a thread as they come."""

    def __init__(self, code: str, *args: str) -> None:
        self.proc = spawn_python(code, *args, stdin=None)
        self.lines: list[str] = []
        self.times: list[float] = []
        self._ready = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.decode().rstrip("\n")
            if line == "ready":
                self._ready.set()
            else:
                self.lines.append(line)
                self.times.append(time.monotonic())
        self._ready.set()

    def wait_ready(self, timeout: float = 60.0) -> None:
        if not self._ready.wait(timeout) or self.proc.poll() is not None:
            self.proc.kill()
            raise AssertionError(f"child did not start: {self.stderr()}")

    def wait_lines(self, count: int, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while len(self.lines) < count:
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.kill()
                raise AssertionError(f"child stalled: {self.stderr()}")
            time.sleep(0.001)

    def kill(self) -> list[str]:
        """SIGKILL, then every line the child managed to write before it died."""
        self.proc.kill()
        self.proc.wait()
        self._reader.join(timeout=30)
        return list(self.lines)

    def stderr(self) -> str:
        if self.proc.poll() is None:
            return "(still running)"
        assert self.proc.stderr is not None
        return self.proc.stderr.read().decode(errors="replace")[-2000:]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.kill()
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


class KillTestCase(TempDirTestCase):
    def child(self, code: str, *args: str) -> Child:
        child = Child(code, *args)
        self.addCleanup(child.close)
        return child


class KilledEnqueueTest(KillTestCase):
    def kill_enqueuers(self, code: str, *, seed: int, rounds: int, lines: tuple[int, int],
                       pause: float, in_flight: int) -> None:
        """Run `code` (it prints the id of every enqueue that returned) and kill -9 it,
        `rounds` times: every reported id must be there, and at most `in_flight`
        ids nobody reported (calls that were writing when the kill came)."""
        rng = random.Random(seed)
        directory = str(self.tmp / "q")
        reported: set[str] = set()
        for round_ in range(rounds):
            child = self.child(code, directory)
            child.wait_ready()
            child.wait_lines(rng.randrange(*lines))
            time.sleep(rng.uniform(0, pause))
            got = child.kill()
            with Queue(directory, lock_timeout=5) as q:  # and the dead holder's lock is free
                present = {j.id for j in q.list_jobs()}
            new = set(got)
            self.assertEqual(len(new), len(got), "an id was reported twice")
            missing = (reported | new) - present
            self.assertEqual(missing, set(), f"round {round_}: returned enqueues were lost")
            unreported = present - reported - new
            self.assertLessEqual(len(unreported), in_flight,
                                 f"round {round_}: more than {in_flight} call(s) in flight "
                                 f"appeared")
            reported |= new | unreported

    def test_every_enqueue_that_returned_survives_kill_9(self) -> None:
        self.kill_enqueuers(ENQUEUE_LOOP, seed=SEED, rounds=6, lines=(1, 40), pause=0.05,
                            in_flight=1)

    def test_four_threads_sharing_fsyncs_and_the_lock_lose_nothing_to_kill_9(self) -> None:
        # Group commit (one fsync for several threads' calls) and the file-lock
        # handover between threads must not let any call return before its
        # record is durable, nor leave the lock held by a dead process.
        self.kill_enqueuers(THREADED_ENQUEUE_LOOP, seed=SEED + 3, rounds=5, lines=(4, 120),
                            pause=0.03, in_flight=4)


class KilledEnqueueManyTest(KillTestCase):
    def test_an_enqueue_many_batch_is_all_or_nothing_after_kill_9(self) -> None:
        rng = random.Random(SEED + 1)
        directory = str(self.tmp / "q")
        size = 400
        reported: set[str] = set()
        partial_rounds = 0
        for round_ in range(6):
            child = self.child(ENQUEUE_MANY_LOOP, directory, str(round_), str(size))
            child.wait_ready()
            child.wait_lines(rng.randrange(0, 4))
            time.sleep(rng.uniform(0, 0.03))
            got = child.kill()
            reported |= set(got)
            with Queue(directory) as q:
                counts = Counter(j.payload["batch"] for j in q.list_jobs())
                partial_rounds += q.recovery.torn_offset is not None
            self.assertEqual({b for b, n in counts.items() if n != size}, set(),
                             f"round {round_}: a batch survived in part")
            self.assertLessEqual(reported, set(counts), f"round {round_}: a batch was lost")
            self.assertLessEqual(len(set(counts) - reported), 1)
            reported |= set(counts)
        # Not asserted (timing decides), but a kill inside the write shows up here:
        del partial_rounds


class KilledCompactionTest(KillTestCase):
    JOBS = 20_000

    def test_a_kill_9_anywhere_in_compaction_loses_nothing(self) -> None:
        rng = random.Random(SEED + 2)
        directory = str(self.tmp / "q")
        clock = FakeClock()
        with Queue(directory, clock=clock, fsync=False, visibility_timeout=3600) as q:
            q.enqueue_many([{"n": i, "pad": "z" * 40} for i in range(self.JOBS)])
            leased = q.lease(3000)
            q.ack_many(leased[:2000])
            for job in leased[2000:2100]:
                q.nack(job, error="retry later")
            expected = store_of(q).state.fingerprint()
            ids = {e.id for e in store_of(q).state.entries()}
        self.assertEqual(len(ids), self.JOBS - 2000)
        interrupted = 0
        for round_ in range(6):
            child = self.child(COMPACT_LOOP, directory)
            child.wait_ready()
            child.wait_lines(1, timeout=120)
            start = child.times[0]
            child.wait_lines(2, timeout=120)
            period = child.times[1] - start
            # Aim somewhere inside the next compaction, measured from the last one's end.
            target = child.times[-1] + rng.uniform(0.0, 1.0) * period
            time.sleep(max(0.0, target - time.monotonic()))
            child.kill()
            names = os.listdir(directory)
            logs = [n for n in names if n.endswith(".log")]
            # A compaction in progress leaves NAME.<g+1>.log.tmp-* or a second log.
            interrupted += len(logs) > 1 or any(".tmp" in n for n in names)
            with Queue(directory) as q:
                self.assertEqual(store_of(q).state.fingerprint(), expected, f"round {round_}")
                self.assertEqual({e.id for e in store_of(q).state.entries()}, ids)
                sample = rng.sample(sorted(ids), 20)
                for job_id in sample:
                    self.assertEqual(q.get(job_id).payload["pad"], "z" * 40)
        self.assertGreater(interrupted, 0, "no kill landed inside a compaction")


class KilledWorkerTest(KillTestCase):
    LEASE_LOOP = r"""
import os, sys
from nobroker import Queue
q = Queue(sys.argv[1], visibility_timeout=3600)
os.write(1, b"ready\n")
while True:
    for job in q.lease(5):
        q.ack(job)
        os.write(1, f"acked {job.id}\n".encode())
"""

    def test_an_ack_that_returned_survives_kill_9_and_is_never_leased_again(self) -> None:
        rng = random.Random(SEED + 3)
        directory = str(self.tmp / "q")
        with Queue(directory) as q:
            all_ids = {j.id for j in q.enqueue_many(range(3000))}
        acked: set[str] = set()
        for _ in range(4):
            child = self.child(self.LEASE_LOOP, directory)
            child.wait_ready()
            child.wait_lines(rng.randrange(1, 100))
            got = {line.split()[1] for line in child.kill()}
            acked |= got
            with Queue(directory) as q:
                present = {e.id for e in store_of(q).state.entries()}
                self.assertEqual(acked & present, set(), "an acked job came back")
                self.assertLessEqual(present, all_ids)

    SNOOZE_LOOP = r"""
import os, sys
from nobroker import Queue
q = Queue(sys.argv[1], visibility_timeout=3600)
os.write(1, b"ready\n")
while True:
    for job in q.lease(5):
        q.snooze(job, 3600, error="later")
        os.write(1, f"snoozed {job.id}\n".encode())
"""

    def test_a_snooze_that_returned_survives_kill_9_and_costs_no_attempt(self) -> None:
        rng = random.Random(SEED + 4)
        directory = str(self.tmp / "q")
        with Queue(directory) as q:  # one attempt each: a snooze counted as one kills them
            all_ids = {j.id for j in q.enqueue_many(range(2000), max_attempts=1)}
        snoozed: set[str] = set()
        for _ in range(4):
            child = self.child(self.SNOOZE_LOOP, directory)
            child.wait_ready()
            child.wait_lines(rng.randrange(1, 100))
            snoozed |= {line.split()[1] for line in child.kill()}
            with Queue(directory) as q:
                jobs = {j.id: j for j in q.list_jobs()}
                self.assertEqual(set(jobs), all_ids, "a job was lost")
                self.assertEqual(q.stats().dead, 0, "a snooze was counted as an attempt")
                for job_id in snoozed:
                    self.assertEqual((jobs[job_id].state, jobs[job_id].attempts,
                                      jobs[job_id].last_error),
                                     (JobState.PENDING, 0, "later"), job_id)


class KilledDependencyTest(KillTestCase):
    """A process acking prerequisites is killed repeatedly: each dependent is released
    exactly once, in the batch of its last prerequisite's ack, never before."""

    ACK_LOOP = r"""
import os, sys
from nobroker import Queue
q = Queue(sys.argv[1], visibility_timeout=3600, auto_compact=None)
os.write(1, b"ready\n")
while True:
    for job in q.lease(3):
        q.ack(job)
        os.write(1, f"acked {job.id}\n".encode())
"""

    def test_a_dependent_is_released_once_with_its_last_prerequisites_ack(self) -> None:
        rng = random.Random(SEED + 5)
        directory = str(self.tmp / "q")
        with Queue(directory, auto_compact=None) as q:
            prerequisites = [j.id for j in q.enqueue_many(range(600), priority=1)]
            needs = {q.enqueue({"after": i}, depends_on=prerequisites[2 * i:2 * i + 2]).id:
                     set(prerequisites[2 * i:2 * i + 2]) for i in range(300)}
        acked: set[str] = set()
        for _ in range(5):
            child = self.child(self.ACK_LOOP, directory)
            child.wait_ready()
            child.wait_lines(rng.randrange(1, 150))
            acked |= {line.split()[1] for line in child.kill()}
            with Queue(directory, auto_compact=None) as q:
                jobs = {j.id: j for j in q.list_jobs()}
            self.assertEqual(acked & set(jobs), set(), "an ack that returned was lost")
            for job_id, prerequisites_of in needs.items():
                job = jobs.get(job_id)
                live = prerequisites_of & set(jobs)
                if job is not None and job.state is JobState.WAITING:
                    self.assertEqual(set(job.waiting_for), live, job_id)
                    self.assertTrue(live, f"{job_id} waits with its prerequisites done")
                else:
                    self.assertEqual(live, set(), f"{job_id} released before both acks")
        # In the log: one RELEASE per released dependent, in a batch holding the ACK of
        # one of its prerequisites, after the ACK of the other.
        acks_so_far: set[str] = set()
        batch: list[Any] = []
        released: Counter[str] = Counter()
        for raw in read_records(os.path.join(directory, "default.000000.log")):
            batch.append(raw)
            if raw.more:
                continue
            batch_acks = {r.payload["id"] for r in batch if r.type == "ACK"}
            acks_so_far |= batch_acks
            for record in batch:
                if record.type == "RELEASE":
                    job_id = record.payload["id"]
                    released[job_id] += 1
                    self.assertLessEqual(needs[job_id], acks_so_far, job_id)
                    self.assertTrue(needs[job_id] & batch_acks, f"{job_id}: not in an ack's batch")
            batch = []
        self.assertEqual(max(released.values(), default=1), 1, "a dependent released twice")
        self.assertGreater(len(released), 0, "the children released nothing")

class TruncationSweepTest(TempDirTestCase):
    """Cut a real log at every byte: each cut opens to the replay of what precedes it.

    Run twice: on the log alone (full replay), and with the checkpoint saved
    midway (used for cuts at or past its offset, refused below it).
    """

    checkpoint_end = 0

    def build_log(self, directory: str) -> dict[int, tuple[object, ...]]:
        """A mixed workload; returns {log size after a call: fingerprint after it}."""
        clock = FakeClock()
        sizes: dict[int, tuple[object, ...]] = {}
        # close() below saves a checkpoint whatever was logged (the sweep runs with it).
        q = file_queue(directory, clock=clock, fsync=False, visibility_timeout=10,
                       max_attempts=2, backoff=BackoffPolicy(base=1.0, factor=2.0, jitter=0.0),
                       auto_compact=None, checkpoint_after_bytes=0)
        sizes[q.stats().log_bytes] = store_of(q).state.fingerprint()
        held: dict[str, Job] = {}

        def step(call: Any) -> Any:
            clock.advance(0.5)
            result = call()
            sizes[q.stats().log_bytes] = store_of(q).state.fingerprint()
            return result

        step(lambda: q.enqueue({"a": 1}))
        b_job = step(lambda: q.enqueue("b", priority=5))
        step(lambda: q.enqueue_many([{"c": i} for i in range(3)]))
        step(lambda: q.enqueue("keyed", job_id="key-1", max_attempts=1))
        later = step(lambda: q.enqueue("later", delay=100))
        # Dependencies: one released by b's ack, one cancelled (err) with its
        # prerequisite, one waiting across the checkpoint below.
        step(lambda: q.enqueue("after b", depends_on=[b_job]))
        doomed = step(lambda: q.enqueue("doomed", delay=1000))
        step(lambda: q.enqueue("after doomed", depends_on=[doomed]))
        step(lambda: q.cancel(doomed.id))
        step(lambda: q.enqueue("after later", depends_on=[later], allow_failure=True))
        # A graph (one batch): a chain whose first step waits out the checkpoint below
        # and its on_error handler (`of`, a four-item checkpoint entry), cancelled by
        # the purge after it.
        step(lambda: q.enqueue_graph([GraphNode("chain 1", delay=1000),
                                      GraphNode("chain 2", (0,)),
                                      GraphNode("chain on_error", (0, 1), "failure")]))
        b, first = step(lambda: q.lease(2))
        step(lambda: q.ack(b))
        step(lambda: q.nack(first, error="try again"))
        leased = step(lambda: q.lease(3))
        held.update({str(j.payload): j for j in leased})
        step(lambda: q.extend(leased[0], 50))
        step(lambda: q.snooze(leased[2], 5, error="not yet"))  # untried: no attempt
        second = step(lambda: q.lease(1, visibility_timeout=1000))
        # An on_error handler of that job: released (RELEASE) in the NACK's batch.
        step(lambda: q.enqueue_graph([GraphNode("on_error", (second[0].id,), "failure")]))
        step(lambda: q.nack(second[0], error="fatal"))  # its last attempt: dead
        clock.advance(20)  # leased[1:] expire; leased[0] was extended
        step(lambda: q.enqueue("reclaim trigger"))
        step(lambda: q.requeue_dead())
        pair = step(lambda: q.lease(2))
        step(lambda: q.ack_many(pair))
        step(lambda: q.ack(leased[0]))
        q.close()  # with a checkpoint here (the sweep also runs with it), then go on
        self.checkpoint_end = max(sizes)
        q = Queue(directory, clock=clock, fsync=False, visibility_timeout=10, max_attempts=2,
                  backoff=BackoffPolicy(base=1.0, factor=2.0, jitter=0.0), auto_compact=None)
        one = step(lambda: q.lease(1))
        step(lambda: q.ack_and_lease(one[0]))
        step(lambda: q.enqueue_many([{"d": i, "text": "naïve ☃"} for i in range(4)]))
        step(lambda: q.purge())
        step(lambda: q.enqueue({"after": "purge"}))
        clock.advance(200)
        step(lambda: q.lease(5))
        step(lambda: q.enqueue("the end"))
        q.close()
        return sizes

    @staticmethod
    def replayed_boundaries(path: str) -> dict[int, tuple[object, ...]]:
        """{end offset of each batch: fingerprint of replaying batches up to it}."""
        batches: list[list[Applied]] = []
        current: list[Applied] = []
        ends = {16: replay([]).fingerprint()}
        for raw in read_records(path):
            if raw.error is not None or not raw.crc_ok:
                raise AssertionError(f"the reference log is damaged at {raw.offset}")
            current.append((int(RecordType[raw.type]), raw.payload, raw.offset,
                            9 + raw.length))
            if not raw.more:
                batches.append(current)
                current = []
                ends[raw.offset + 9 + raw.length] = replay(batches).fingerprint()
        return ends

    @slow
    def test_every_truncation_opens_to_the_replay_of_the_batches_before_it(self) -> None:
        source = str(self.tmp / "source")
        sizes = self.build_log(source)
        log = os.path.join(source, "default.000000.log")
        checkpoint = Path(source, "default.000000.ckpt").read_bytes()
        boundaries = self.replayed_boundaries(log)
        # The two oracles agree: replaying the records is what memory held after each
        # call. (A call that found expired leases also ends a batch of expiries first.)
        for size, fingerprint in sizes.items():
            self.assertEqual(boundaries.get(size), fingerprint, f"after the call ending at {size}")
        self.assertGreater(len(boundaries), len(sizes), "the workload reclaims no lease")
        end = max(boundaries)
        data = Path(log).read_bytes()[:end]
        self.assertGreater(len(boundaries), 20)
        self.assertIn(self.checkpoint_end, boundaries)
        kinds = {raw.type for raw in read_records(log)}
        self.assertEqual(kinds, {"ENQUEUE", "LEASE", "ACK", "NACK", "EXTEND", "EXPIRE",
                                 "REQUEUE", "PURGE", "SNOOZE", "CANCEL", "RELEASE"},
                         "the workload is not mixed enough")

        scratch = tempfile.mkdtemp(prefix="nobroker-sweep-", dir=scratch_root())
        self.addCleanup(shutil.rmtree, scratch, ignore_errors=True)
        quiet = logging.getLogger("nobroker")
        level = quiet.level
        quiet.setLevel(logging.CRITICAL)  # thousands of "cut a torn tail" warnings
        self.addCleanup(quiet.setLevel, level)
        started = time.monotonic()
        for with_checkpoint in (False, True):
            self.sweep(scratch, data, boundaries, checkpoint if with_checkpoint else None)
        self.assertLess(time.monotonic() - started, 120, "the sweep became too slow")

    def sweep(self, scratch: str, data: bytes, boundaries: dict[int, tuple[object, ...]],
              checkpoint: bytes | None) -> None:
        order = sorted(boundaries)
        boundary_index = 0
        for cut in range(16, len(data) + 1):
            while boundary_index + 1 < len(order) and order[boundary_index + 1] <= cut:
                boundary_index += 1
            good = order[boundary_index]
            directory = os.path.join(scratch, str(cut))
            os.mkdir(directory, 0o700)
            with open(os.path.join(directory, "default.000000.log"), "wb") as handle:
                handle.write(data[:cut])
            if checkpoint is not None:
                with open(os.path.join(directory, "default.000000.ckpt"), "wb") as handle:
                    handle.write(checkpoint)
            where = f"cut at {cut}" + (" with a checkpoint" if checkpoint else "")
            try:
                with Queue(directory, auto_compact=None) as q:
                    self.assertEqual(store_of(q).state.fingerprint(), boundaries[good], where)
                    torn = any(data[good:cut])
                    self.assertEqual(q.recovery.torn_offset, good if torn else None, where)
                    used = checkpoint is not None and cut >= self.checkpoint_end
                    self.assertEqual(q.recovery.checkpoint_offset,
                                     self.checkpoint_end if used else None, where)
                    if cut % 97 == 0:  # the repaired log takes new writes and replays them
                        q.enqueue("after the crash")
                        after = store_of(q).state.fingerprint()
                if cut % 97 == 0:
                    with Queue(directory, readonly=True) as again:
                        self.assertTrue(again.recovery.clean, where)
                        self.assertEqual(store_of(again).state.fingerprint(), after, where)
            finally:
                shutil.rmtree(directory)


if __name__ == "__main__":
    unittest.main()
