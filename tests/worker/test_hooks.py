"""Hooks (`Queue.on`): each event, where it fires, and a hook that raises.

Each test registers a recording hook, makes the event happen (through the
Queue, or a Worker working it) and checks the job the hook was given. A
raising hook is logged and changes nothing: the job is acked all the same.
"""

from __future__ import annotations

import tempfile
import threading
import unittest
from typing import Any

from harness.support import FakeClock, TempDirTestCase

from nobroker import BackoffPolicy, Job, JobState, Queue, Worker
from nobroker.hooks import EVENTS


class HookTest(TempDirTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.q = Queue(self.tmp / "q", backoff=BackoffPolicy(base=0.0, jitter=0.0))
        self.addCleanup(self.q.close)
        self.calls: list[tuple[str, str, JobState, threading.Thread]] = []
        for event in EVENTS:
            self.q.on(event, self.recorder(event))

    def recorder(self, event: str) -> Any:
        def record(job: Job) -> None:
            self.calls.append((event, job.id, job.state, threading.current_thread()))
        return record

    def events(self) -> list[tuple[str, str, JobState]]:
        return [(event, job_id, state) for event, job_id, state, _ in self.calls]

    def work(self, handler: Any, jobs: int) -> None:
        Worker(self.q, handler, max_jobs=jobs, handle_signals=False).run()

    def test_enqueued_fires_for_each_job_with_the_job_as_enqueued(self) -> None:
        one = self.q.enqueue("a")
        many = self.q.enqueue_many(["b", "c"])
        self.assertEqual(self.events(), [("enqueued", job.id, JobState.PENDING)
                                         for job in [one, *many]])

    def test_a_job_that_succeeds_fires_started_then_succeeded_in_the_slot(self) -> None:
        job = self.q.enqueue("a")
        self.calls.clear()
        self.work(lambda job: None, 1)
        self.assertEqual(self.events(), [("started", job.id, JobState.LEASED),
                                         ("succeeded", job.id, JobState.LEASED)])
        slots = {thread.name for _, _, _, thread in self.calls}
        self.assertEqual(slots, {"nobroker-slot-0"})

    def test_a_failure_fires_retried_and_the_last_failure_fires_dead(self) -> None:
        job = self.q.enqueue("a", max_attempts=2)
        self.calls.clear()

        def fail(job: Job) -> None:
            raise RuntimeError("no")

        self.work(fail, 2)
        self.assertEqual(self.events(), [("started", job.id, JobState.LEASED),
                                         ("retried", job.id, JobState.PENDING),
                                         ("started", job.id, JobState.LEASED),
                                         ("dead", job.id, JobState.DEAD)])

    def test_a_nack_outside_a_worker_fires_too(self) -> None:
        self.q.enqueue("a", max_attempts=1)
        self.calls.clear()
        job = self.q.lease_one()
        assert job is not None
        self.q.nack(job, error="by hand")
        self.assertEqual(self.events(), [("dead", job.id, JobState.DEAD)])

    def test_cancel_fires_cancelled_with_the_cancelled_job_and_only_when_it_cancelled(
            self) -> None:
        job = self.q.enqueue("a")
        self.calls.clear()
        self.assertTrue(self.q.cancel(job.id))
        self.assertFalse(self.q.cancel(job.id))  # already cancelled: no second event
        self.assertEqual(self.events(), [("cancelled", job.id, JobState.CANCELLED)])

    def test_a_chained_ack_and_lease_fires_succeeded_for_each_job(self) -> None:
        jobs = self.q.enqueue_many(["a", "b", "c"])
        self.calls.clear()
        self.work(lambda job: None, 3)
        succeeded = [job_id for event, job_id, _ in self.events() if event == "succeeded"]
        self.assertEqual(succeeded, [job.id for job in jobs])

    def test_a_raising_hook_is_logged_and_the_job_and_later_hooks_go_on(self) -> None:
        def broken(job: Job) -> None:
            raise ValueError("hook bug")

        later: list[str] = []
        for event in ("started", "succeeded"):
            self.q.on(event, broken)
            self.q.on(event, lambda job, event=event: later.append(event))
        self.q.enqueue("a", job_id="k")
        with self.assertLogs("nobroker", "ERROR") as logs:
            self.work(lambda job: "result", 1)
        self.assertEqual(later, ["started", "succeeded"])
        self.assertEqual(self.q.get("k").state, JobState.DONE)
        self.assertEqual(len(logs.records), 2)
        self.assertIn("started hook", logs.output[0])
        self.assertIn("hook bug", logs.output[0])

    def test_hooks_belong_to_the_queue_object_they_were_registered_on(self) -> None:
        other = Queue(self.tmp / "q")
        self.addCleanup(other.close)
        other.enqueue("a")
        self.assertEqual(self.calls, [])

    def test_an_unknown_event_or_a_non_callable_is_refused(self) -> None:
        with self.assertRaisesRegex(ValueError, "unknown hook event 'finished'"):
            self.q.on("finished", print)
        with self.assertRaisesRegex(TypeError, "callable"):
            self.q.on("started", "print")  # type: ignore[arg-type]



class ReclaimedDeadHookTest(unittest.TestCase):
    """`dead` for a job whose lease ran out on its last attempt: in the process whose
    write reclaimed it (issue 24), on every backend that reports its reclaims."""

    def check(self, location: str) -> None:
        clock = FakeClock()
        q = Queue(location, clock=clock, visibility_timeout=1.0, max_attempts=1)
        seen: list[tuple[str, JobState, str | None]] = []
        q.on("dead", lambda job: seen.append((job.id, job.state, job.last_error)))
        job = q.enqueue({"n": 1})
        q.lease_one()  # its holder dies: no ack
        clock.advance(1.5)
        q.enqueue({"n": 2})  # any write reclaims it
        self.assertEqual(seen, [(job.id, JobState.DEAD, "lease expired (attempt 1)")])
        clock.advance(1.5)
        q.enqueue({"n": 3})
        self.assertEqual(len(seen), 1)  # once
        q.close()

    def test_on_files(self) -> None:
        with tempfile.TemporaryDirectory() as directory:
            self.check(directory)

    def test_in_memory(self) -> None:
        self.check(f"memory://{self.id()}")


if __name__ == "__main__":
    unittest.main()
