"""What only the in-memory backend has to show (the contract runs on it in tests/contract).

Who shares a queue (handles of one process on one set and name), how long
it lives (while a handle is open), that its waits are woken rather than
polled and follow the queue's clock, that a Worker drains it, and that
`nobroker migrate`'s copy goes both ways between it and a directory.
"""

from __future__ import annotations

import threading
import time
import unittest
from typing import Any, cast

from harness.copies import (
    an_hour_on,
    check_limits_kept,
    check_window_kept,
    copy_and_revive,
    dead_chain_in,
    finish_chord,
    half_done_chord_in,
    limited_jobs_in,
    limited_task,
    used_up_window_in,
)
from harness.support import FakeClock, TempDirTestCase

from nobroker import JobState, NobrokerError, Queue, TaskLockedError, Worker
from nobroker.backend import QueueListing
from nobroker.memory import MemoryBackend
from nobroker.opener import open_backend
from nobroker.transfer import transfer


class MemoryCase(unittest.TestCase):
    def location(self, suffix: str = "") -> str:
        return f"memory://{self.id()}{suffix}"

    def open(self, suffix: str = "", name: str = "default", **options: object) -> Queue:
        q = Queue(self.location(suffix), name, **options)
        self.addCleanup(q.close)
        return q


class SharingTest(MemoryCase):
    def test_handles_on_one_set_and_name_share_a_queue_and_nothing_else(self) -> None:
        a, b = self.open(), self.open()
        job = a.enqueue("x")
        self.assertEqual(b.get(job.id).payload, "x")
        (leased,) = b.lease()
        self.assertEqual(a.lease(), [], "leased through the other handle")
        self.assertEqual((self.open(name="other").stats().total,
                          self.open("-elsewhere").stats().total), (0, 0))
        a.ack(leased)
        self.assertEqual(b.stats().done, 1)

    def test_a_queue_lives_while_a_handle_is_open(self) -> None:
        first = Queue(self.location())
        first.enqueue("kept while open")
        with Queue(self.location()) as second:
            first.close()
            self.assertEqual(second.stats().pending, 1)
        with Queue(self.location()) as fresh:
            self.assertEqual(fresh.stats().total, 0, "the last close took the queue")

    def test_the_set_lists_its_open_queues(self) -> None:
        self.open(name="emails")
        q = self.open(name="reports")
        self.assertTrue(q.capabilities.listing)
        self.assertEqual(cast(QueueListing, q.backend).queue_names(), ["emails", "reports"])

    def test_a_read_only_handle_reads_and_never_writes(self) -> None:
        q = self.open()
        job = q.enqueue("x")
        ro = self.open(readonly=True)
        self.assertEqual(ro.get(job.id).payload, "x")
        for call in (lambda: ro.enqueue("y"), ro.lease, ro.purge, ro.pause, ro.compact):
            with self.subTest(call=call), self.assertRaises(NobrokerError) as caught:
                call()
            self.assertIn("read-only", str(caught.exception))

    def test_a_named_lock_dies_with_the_handle_that_holds_it(self) -> None:
        holder, other = Queue(self.location()), self.open()
        release = holder.backend.try_lock("nightly")
        self.assertIsNotNone(release)
        with self.assertRaises(TaskLockedError), other.lock("nightly"):
            pass
        holder.close()
        with other.lock("nightly"):
            pass


class TimeTest(MemoryCase):
    def test_the_queue_s_clock_decides_what_is_due_and_wait_follows_it(self) -> None:
        clock = FakeClock()
        q = self.open(clock=clock)
        q.enqueue("later", delay=60)
        self.assertFalse(q.wait(0))
        clock.advance(60)
        self.assertTrue(q.wait(0))
        self.assertEqual([job.payload for job in q.lease()], ["later"])

    def test_an_idle_wait_is_woken_by_an_enqueue_from_another_thread(self) -> None:
        q = self.open()
        woken: list[bool] = []
        waiter = threading.Thread(target=lambda: woken.append(q.wait(30)))
        started = time.monotonic()
        waiter.start()
        time.sleep(0.05)  # let it block (woken either way: a job is then ready)
        self.open().enqueue("wake up")
        waiter.join(10)
        self.assertEqual(woken, [True])
        self.assertLess(time.monotonic() - started, 5, "woken, not timed out")

    def test_compact_forgets_results_and_keys_whose_retention_is_over(self) -> None:
        clock = FakeClock()
        q = self.open(clock=clock, result_ttl=10, key_retention=10)
        q.enqueue("a", job_id="key")
        q.enqueue("b")
        keyed, plain = q.lease(2)
        q.ack(keyed)  # its key is remembered
        q.ack(plain, result="b")  # its result is kept
        self.assertEqual((q.stats().kept, q.compact().remembered_keys), (1, 1))
        clock.advance(10)
        done = q.compact()
        self.assertEqual((done.live_jobs, done.remembered_keys, done.new_generation), (0, 0, 0))
        self.assertEqual(q.stats().kept, 0)


class WorkerTest(MemoryCase):
    def test_a_worker_drains_a_memory_queue(self) -> None:
        q = self.open()
        q.enqueue_many(range(20))
        seen: list[int] = []
        stats = Worker(q, lambda job: seen.append(job.payload), concurrency=4, max_jobs=20,
                       handle_signals=False).run()
        self.assertEqual((sorted(seen), stats.succeeded), (list(range(20)), 20))
        self.assertEqual((q.stats().total, q.stats().done), (0, 20))


class TransferTest(MemoryCase, TempDirTestCase):
    def test_jobs_go_from_a_directory_into_memory_as_they_were_and_back(self) -> None:
        directory = str(self.tmp / "q")
        with Queue(directory, max_attempts=2) as source:
            source.enqueue({"n": 1}, priority=5, job_id="order-1")
            doomed = source.enqueue({"n": 2})
            source.enqueue({"n": 3})
            for job in source.lease(2):  # order-1, then doomed
                if job.id == doomed.id:
                    source.nack(job, error="boom", delay=0)
            for job in source.lease(5):
                if job.id == doomed.id:
                    source.nack(job, error="boom twice")
            expected = {job.id: job for job in source.list_jobs()}
            waiting = source.enqueue({"n": 4}, depends_on="order-1")  # with what it waits for
        target = self.open()  # the memory queue lives while a handle is open
        first = transfer(directory, self.location(), "default")
        self.assertEqual((first.copied, first.not_copied),
                         ({"pending": 2, "dead": 1, "waiting": 1}, {}))
        self.assertEqual(target.get(waiting.id).waiting_for, ("order-1",))
        self.assertEqual(transfer(directory, self.location(), "default").skipped, 4)
        for job_id, job in expected.items():
            got = target.get(job_id)
            self.assertEqual((got.payload, got.priority, got.attempts, got.last_error),
                             (job.payload, job.priority, job.attempts, job.last_error))
            self.assertIs(got.state, JobState.DEAD if job.state is JobState.DEAD
                          else JobState.PENDING)
        self.assertNotIn(target.enqueue("new").id, expected, "a copied id is not generated")
        backend = target.backend
        assert isinstance(backend, MemoryBackend) and backend.capabilities.exports
        keyed = {job.id: is_key for job, is_key in backend.export_jobs()}
        self.assertEqual((keyed["order-1"], keyed[doomed.id]), (True, False))
        back = str(self.tmp / "back")  # a directory imports nothing: keyed enqueues
        there = transfer(self.location(), back, "default")
        self.assertEqual((there.copied, there.not_copied),
                         ({"pending": 3, "waiting": 1}, {"dead": 1}))

    def test_a_chord_half_done_waits_after_a_round_trip_and_runs_after_the_rest(self
                                                                                 ) -> None:
        directory, back = str(self.tmp / "q"), str(self.tmp / "back")
        jobs = half_done_chord_in(directory, "default")
        target = self.open()
        self.assertEqual(transfer(directory, self.location(), "default").copied,
                         {"pending": 2, "waiting": 2})
        self.assertEqual(transfer(self.location(), back, "default").copied,
                         {"pending": 2, "waiting": 2})
        target.close()
        with Queue(back) as there:
            finish_chord(self, there, jobs)

    def test_a_chain_of_waiting_jobs_is_copied_in_order_once(self) -> None:
        directory = str(self.tmp / "q")
        with Queue(directory) as source:
            first = source.enqueue("first")
            second = source.enqueue("second", depends_on=first)
            third = source.enqueue("third", depends_on=second, allow_failure=True)
        target = self.open()
        self.assertEqual(transfer(directory, self.location(), "default").copied,
                         {"pending": 1, "waiting": 2})
        again = transfer(directory, self.location(), "default")
        self.assertEqual((again.copied, again.skipped), ({}, 3))
        self.assertEqual(target.get(third.id).waiting_for, (second.id,))
        for step in ("first", "second", "third"):
            (job,) = target.lease()
            self.assertEqual(job.payload, step)
            target.ack(job)


    def test_a_chain_cancelled_by_a_death_is_revived_by_a_requeue_after_the_copy(self
                                                                                ) -> None:
        directory = str(self.tmp / "q")
        copy_and_revive(self, directory, self.open(), self.location())

    def test_limited_jobs_keep_their_keys_cap_and_limit_after_a_round_trip(self) -> None:
        directory, back = str(self.tmp / "q"), str(self.tmp / "back")
        ids = limited_jobs_in(directory, "default")
        target = self.open()
        self.assertEqual(transfer(directory, self.location(), "default").copied,
                         {"pending": 4, "dead": 1, "waiting": 1})
        self.assertEqual(transfer(self.location(), back, "default").copied,
                         {"pending": 4, "waiting": 1})
        with Queue(back) as there:  # a directory imports nothing: keyed enqueues
            limited_task(there)
            check_limits_kept(self, there, ids, dead=False)
        limited_task(target)
        check_limits_kept(self, target, ids)

    def test_a_used_up_rate_window_is_still_used_up_after_a_round_trip(self) -> None:
        directory, back = str(self.tmp / "q"), str(self.tmp / "back")
        left = used_up_window_in(directory, "default")
        target = self.open()
        reports = [transfer(source, to, "default") for _ in range(2)  # the second: no change
                   for source, to in ((directory, self.location()), (self.location(), back))]
        with Queue(back) as there, Queue(back, clock=an_hour_on) as later:  # from its log
            check_window_kept(self, there, later, left)
        check_window_kept(self, target, self.open(clock=an_hour_on), left)
        self.assertEqual([r.windows for r in reports], [1, 1, 1, 1])

    def test_waiting_jobs_of_one_key_keep_each_its_own_cap_in_a_directory(self) -> None:
        directory, back = str(self.tmp / "q"), str(self.tmp / "back")
        with Queue(directory) as source:
            first = source.enqueue("first")
        waiting: dict[str, int] = {}
        for cap in (1, 3):  # two enqueuers of one key, each declaring its own cap
            with Queue(directory) as source:
                send = source.task(name="send", concurrency=cap,
                                   concurrency_key=lambda customer: customer)(
                                       lambda customer: None)
                waiting[send.apply_async(("acme",), depends_on=first).id] = cap
        self.assertEqual(transfer(directory, back, "default").copied,
                         {"pending": 1, "waiting": 2}, "the waiting ones in one graph")
        with Queue(back) as there:
            limits = cast(Any, there.backend).export_limits()
        self.assertEqual({job_id: limits[job_id][1] for job_id in waiting}, waiting,
                         "each keeps the cap it was enqueued with, as one by one")

    def test_a_directory_target_takes_no_revivable_dependent(self) -> None:
        directory, back = str(self.tmp / "q"), str(self.tmp / "back")
        dead_chain_in(directory, "default")
        self.open()  # the memory queue lives while a handle is open
        transfer(directory, self.location(), "default")
        self.assertEqual(transfer(self.location(), back, "default").not_copied,
                         {"dead": 1, "cancelled": 2}, "it holds no dead job to requeue")


class OpenerTest(MemoryCase):
    def test_memory_takes_the_queue_s_directory_arguments_and_refuses_others(self) -> None:
        self.open(auto_compact=None, allow_network_fs=True)
        with self.assertRaises(TypeError) as caught:
            open_backend(self.location(), "default", fs=None)
        self.assertIn("memory:// queue takes no option fs", str(caught.exception))


if __name__ == "__main__":
    unittest.main()
