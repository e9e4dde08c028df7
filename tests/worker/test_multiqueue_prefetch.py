"""Worker(prefetch=K) over several queues: rounds of leases (worker/rounds.py).

The picking promises of docs/FLOW.md with prefetch: strict priority at each
round, the weights' shares in the order the slots start jobs, caps counting
prefetched jobs; the acker's acks in its lease's write, a write per queue; a
graceful stop gives prefetched jobs back to their own queues, and a killed
worker's come back after their leases (real processes). On files and memory://
here; MultiQueuePrefetchTest on PostgreSQL in tests/postgres/test_postgres_prefetch.py.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
import unittest
from typing import Any

from harness.support import SRC, wait_until

from nobroker import Job, JobNotFoundError, JobState, Queue
from nobroker.worker import Worker
from nobroker.worker.picking import QueuePicker
from worker.test_multiqueue import WEIGHT_SETS, shares_within_one_pick
from worker.test_worker import WorkerTestCase

NAMES = ("high", "default", "low")


class PlanTest(unittest.TestCase):
    def test_a_plan_is_the_picks_one_at_a_time_would_make_and_records_nothing(
            self) -> None:
        for weights in WEIGHT_SETS:
            names = [f"q{i}" for i in range(len(weights))]
            given = dict(zip(names, weights, strict=True))
            planner, stepper = QueuePicker(names, given), QueuePicker(names, given)
            busy = [0] * len(names)
            picks: list[int] = []
            for _ in range(50):
                plan = planner.plan(7, busy)
                self.assertEqual(planner.plan(7, busy), plan, "plan must record nothing")
                for index in plan:
                    planner.picked(index, [], busy)
                for _ in range(7):
                    index = stepper.order(busy)[0]
                    stepper.picked(index, [], busy)
                    picks.append(index)
                self.assertEqual(plan, picks[-7:], weights)
            self.assertLessEqual(shares_within_one_pick(picks, weights), 1.0)

    def test_a_plan_counts_each_pick_against_its_queues_cap(self) -> None:
        picker = QueuePicker(["a", "b"], {"a": 3, "b": 1}, caps={"a": 2})
        plan = picker.plan(6, [1, 0])
        self.assertEqual(plan.count(0), 1)  # one more fits under a's cap of 2
        self.assertEqual(plan.count(1), 5)
        self.assertEqual(picker.plan(3, [0, 0], skip={0}), [1, 1, 1])


class MultiQueuePrefetchTest(WorkerTestCase):
    def queues(self, *names: str) -> list[Queue]:
        opened = [Queue(self.location(), name) for name in names]
        for queue in opened:
            self.addCleanup(queue.close)
        return opened

    def counting_writes(self, queues: list[Queue]) -> list[tuple[str, str, int]]:
        """Record every lease and ack call the worker makes: (queue, call, jobs)."""
        calls: list[tuple[str, str, int]] = []
        for q in queues:
            lease, ack_many, both = q.lease, q.ack_many, q.ack_many_and_lease

            def counted_lease(count: int = 1, *, _q: Queue = q, _f: Any = lease,
                              **options: Any) -> list[Job]:
                got: list[Job] = _f(count, **options)
                calls.append((_q.name, "lease", len(got)))
                return got

            def counted_ack_many(jobs: list[Job], *, _q: Queue = q,
                                 _f: Any = ack_many) -> None:
                calls.append((_q.name, "ack_many", len(jobs)))
                _f(jobs)

            def counted_both(jobs: list[Job], count: int, *, _q: Queue = q, _f: Any = both,
                             **options: Any) -> list[Job]:
                calls.append((_q.name, "ack_many_and_lease", len(jobs)))
                got: list[Job] = _f(jobs, count, **options)
                return got

            q.lease = counted_lease  # type: ignore[method-assign]
            q.ack_many = counted_ack_many  # type: ignore[method-assign]
            q.ack_many_and_lease = counted_both  # type: ignore[method-assign]
        return calls

    def test_strict_priority_with_prefetch_takes_earlier_queues_first(self) -> None:
        queues = self.queues(*NAMES)
        for queue in reversed(queues):
            queue.enqueue_many([queue.name] * 6)
        seen: list[str] = []
        stats = Worker(queues, lambda job: seen.append(job.payload), max_jobs=18,
                       prefetch=4, handle_signals=False).run()
        self.assertEqual(stats.succeeded, 18)
        self.assertEqual(seen, ["high"] * 6 + ["default"] * 6 + ["low"] * 6)

    def test_weights_with_prefetch_keep_each_share_within_one_pick(self) -> None:
        queues = self.queues(*NAMES)
        for queue in queues:
            queue.enqueue_many([queue.name] * 40)  # more than 60 picks take of any
        seen: list[str] = []
        calls = self.counting_writes(queues)
        stats = Worker(queues, lambda job: seen.append(job.payload), max_jobs=60,
                       prefetch=8, weights={"high": 3, "default": 2, "low": 1},
                       handle_signals=False).run()
        self.assertEqual(stats.succeeded, 60)
        picks = [NAMES.index(name) for name in seen]
        self.assertLessEqual(shares_within_one_pick(picks, (3, 2, 1)), 1.0, seen)
        self.assertEqual([seen.count(name) for name in NAMES], [30, 20, 10])
        # Rounds of 9 (concurrency + K): a write per queue asked, 3 a round, not one
        # lease per job; the acks ride along in those writes.
        leases = [c for c in calls if c[1] != "ack_many"]
        self.assertLessEqual(len(leases), 3 * 8, calls)
        self.assertTrue(any(c[1] == "ack_many_and_lease" for c in calls), calls)
        acked = sum(n for _, call, n in calls if call != "lease")
        self.assertEqual(acked, 60)

    def test_weights_over_a_long_run_of_large_rounds_stay_within_one_pick(self) -> None:
        # Rounds of n x (concurrency + K) jobs (worker/rounds.py `_ahead`), each
        # queue's part leased in one write and queued in the plan's order: the
        # order the slot takes jobs in is the one-at-a-time round-robin's.
        picks_wanted = 240
        for weights in [(3, 2, 1), (5, 1, 1), (10, 1), (1, 7, 4, 7, 1, 9)]:
            with self.subTest(weights=weights):
                names = [f"w{len(weights)}q{i}{''.join(map(str, weights))}"
                         for i in range(len(weights))]
                queues = self.queues(*names)
                total = sum(weights)
                for queue, weight in zip(queues, weights, strict=True):
                    # more than the run takes of it: no queue is ever found empty
                    queue.enqueue_many([queue.name] * (picks_wanted * weight // total + 5))
                seen: list[str] = []
                stats = Worker(queues, lambda job, seen=seen: seen.append(job.payload),
                               max_jobs=picks_wanted, prefetch=8,
                               weights=dict(zip(names, weights, strict=True)),
                               handle_signals=False).run()
                self.assertEqual(stats.succeeded, picks_wanted)
                picks = [names.index(name) for name in seen]
                self.assertLessEqual(shares_within_one_pick(picks, weights), 1.0, seen)

    def test_a_weighted_round_asks_each_queue_for_about_one_queues_round(self) -> None:
        queues = self.queues(*NAMES)
        for queue in queues:
            queue.enqueue_many([queue.name] * 60)
        calls = self.counting_writes(queues)
        stats = Worker(queues, lambda job: None, max_jobs=90, prefetch=8,
                       weights={"high": 3, "default": 2, "low": 1},
                       handle_signals=False).run()
        self.assertEqual(stats.succeeded, 90)
        # A round holds 3 x (1 + 8) jobs, each queue's part in one write: about 90 / 9
        # writes that lease, as one queue's worker makes (rounds of concurrency + K
        # over three queues made about three times as many).
        leasing = [c for c in calls if c[1] == "ack_many_and_lease"
                   or (c[1] == "lease" and c[2])]
        self.assertLessEqual(len(leasing), 18, calls)

    def test_two_rounds_at_once_take_turns_so_the_second_plans_after_the_first(
            self) -> None:
        # The dispatcher and the acker both lease in rounds; two planned from the same
        # credits at once would both take queue a's turn then b's: a, b, a, b.
        queues = self.queues("a", "b", "c")
        for queue in queues:
            queue.enqueue_many([queue.name] * 4)
        worker = Worker(queues, lambda job: None, prefetch=4,
                        weights={"a": 1, "b": 1, "c": 1}, handle_signals=False)
        other_sending = threading.Event()

        def send(index: int, count: int) -> list[Job]:
            other_sending.set()
            time.sleep(0.05)  # long enough for the other round to plan, were it free to
            return queues[index].lease(count)

        def round_of_two() -> None:
            worker._lease_round(2, send, [])

        racer = threading.Thread(target=round_of_two)
        racer.start()
        self.assertTrue(other_sending.wait(5))
        round_of_two()
        racer.join(5)
        picks = [flight.queue_index for flight in worker._inbox]
        self.assertEqual(picks, [0, 1, 2, 0])
        self.assertLessEqual(shares_within_one_pick(picks, (1, 1, 1)), 1.0, picks)

    def test_caps_count_prefetched_jobs(self) -> None:
        emails, reports = self.queues("emails", "reports")
        emails.enqueue_many(["emails"] * 12)
        reports.enqueue_many(["reports"] * 6)
        lock = threading.Lock()
        most_leased = [0]

        def handle(job: Job) -> None:
            with lock:
                most_leased[0] = max(most_leased[0], reports.stats().leased)
            time.sleep(0.01)

        stats = Worker([emails, reports], handle, concurrency=2, prefetch=4, max_jobs=18,
                       weights={"emails": 1, "reports": 1},
                       queue_concurrency={"reports": 1}, handle_signals=False).run()
        self.assertEqual(stats.succeeded, 18)
        self.assertEqual(most_leased[0], 1)  # the cap held, prefetched ones included

    def test_a_round_after_capped_jobs_finish_leases_as_many_again(self) -> None:
        (reports,) = self.queues("reports")
        reports.enqueue_many(["r"] * 12)
        rounds: list[tuple[int, int]] = []  # the acker's writes: (acked, leased)
        both = reports.ack_many_and_lease

        def counted(jobs: list[Job], count: int, **options: Any) -> list[Job]:
            got: list[Job] = both(jobs, count, **options)
            rounds.append((len(jobs), len(got)))
            return got

        reports.ack_many_and_lease = counted  # type: ignore[method-assign]
        stats = Worker([reports], lambda job: None, concurrency=3, prefetch=3, max_jobs=12,
                       queue_concurrency={"reports": 3}, handle_signals=False).run()
        self.assertEqual(stats.succeeded, 12)
        # The jobs acked are not held any more: the write that acks them leases as
        # many again, while the queue has them (12 = the dispatcher's first 3 + 9).
        self.assertEqual(sum(leased for _, leased in rounds), 9, rounds)
        self.assertTrue(all(leased <= acked for acked, leased in rounds), rounds)

    def test_hooks_fire_for_jobs_acked_in_a_round(self) -> None:
        queues = self.queues("a", "b")
        fired: list[str] = []
        for queue in queues:
            queue.enqueue_many([queue.name] * 10)
            queue.on("succeeded", lambda job, _n=queue.name: fired.append(_n))
        Worker(queues, lambda job: None, max_jobs=20, prefetch=4, weights={"a": 1, "b": 1},
               handle_signals=False).run()
        self.assertEqual(sorted(fired), ["a"] * 10 + ["b"] * 10)

    def test_a_graceful_stop_gives_prefetched_jobs_back_to_their_own_queues(self) -> None:
        queues = self.queues(*NAMES)
        jobs = {q.name: q.enqueue_many([{"q": q.name, "i": i} for i in range(6)])
                for q in queues}
        started, release = threading.Event(), threading.Event()

        def handler(job: Job) -> None:
            started.set()
            release.wait(5)

        worker = Worker(queues, handler, prefetch=3, weights={"high": 1, "default": 1,
                                                               "low": 1},
                        handle_signals=False)
        finish = self.start(worker)
        self.assertTrue(started.wait(5))
        # Under weights over 3 queues it holds 3 x (concurrency + K) jobs (rounds.py)
        wait_until(lambda: sum(q.stats().leased for q in queues) == 12, what="the prefetch")
        time.sleep(0.05)
        self.assertEqual(sum(q.stats().leased for q in queues), 12, "no more than that")
        worker.stop()
        wait_until(lambda: sum(q.stats().leased for q in queues) == 1,
                   what="the prefetched jobs given back")
        release.set()
        stats = finish()
        self.assertEqual((stats.succeeded, stats.abandoned), (1, 0))
        back = 0
        for queue in queues:
            for job in jobs[queue.name]:
                try:
                    held = queue.get(job.id)
                except JobNotFoundError:
                    continue  # the one that ran
                self.assertEqual((held.state, held.attempts), (JobState.PENDING, 0))
                back += 1
        self.assertEqual(back, 17)


class MemoryMultiQueuePrefetchTest(MultiQueuePrefetchTest):
    def location(self) -> str:
        return f"memory://{self.id()}"


WORKER_SCRIPT = """\
import os, sys, time
sys.path.insert(0, {src!r})
from nobroker import Queue
from nobroker.worker import Worker

directory = sys.argv[1]

def handler(job):
    open(os.path.join(directory, "started-" + job.id + job.payload), "w").close()
    time.sleep(60)

queues = [Queue(directory, name, visibility_timeout=0.6) for name in ("high", "low")]
Worker(queues, handler, prefetch=3, weights={{"high": 1, "low": 1}}).run()
"""


@unittest.skipIf(sys.platform == "win32", "POSIX signals")
class MultiQueuePrefetchKillTest(WorkerTestCase):
    def test_kill_9_brings_every_queues_prefetched_jobs_back_after_their_leases(
            self) -> None:
        directory = self.tmp / "loc"
        directory.mkdir()
        queues = [Queue(str(directory), name) for name in ("high", "low")]
        for queue in queues:
            self.addCleanup(queue.close)
        ids = {q.name: {j.id for j in q.enqueue_many([q.name] * 2)} for q in queues}
        script = self.tmp / "script.py"
        script.write_text(textwrap.dedent(WORKER_SCRIPT.format(src=str(SRC))))
        proc = subprocess.Popen([sys.executable, str(script), str(directory)])
        self.addCleanup(lambda: proc.poll() is None and proc.kill())
        wait_until(lambda: sum(q.stats().leased for q in queues) == 4, what="the prefetch")
        proc.kill()
        proc.wait(10)
        for queue in queues:
            back: set[str] = set()

            def lease_all(queue: Queue = queue, back: set[str] = back) -> bool:
                back.update(job.id for job in queue.lease(2))
                return len(back) == 2

            wait_until(lease_all, what=f"{queue.name}'s leases to run out")
            self.assertEqual(back, ids[queue.name])


if __name__ == "__main__":
    unittest.main()
