"""An unchanged Celery app on a nobroker directory, run by a real `celery worker`:
tasks, routing to two queues, retries, results, failures, chain, group, chord; a task
that rejects its message without requeue, or a message naming a task the worker
lacks, is dead-lettered; a pickle message refused; results that expire; get() that
waits without polling."""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any

from harness.celery_support import CeleryTestCase, needs_celery

from nobroker import Queue
from nobroker.celery import MessageRefusedError, queue_name_for

TIMEOUT = 30.0


@needs_celery
class CeleryAppTest(CeleryTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.mod = self.app()
        self.start_worker("w1", "-P", "threads", "-c", "4")

    def queue(self, celery_queue: str) -> Queue:
        q = Queue(self.directory, queue_name_for(celery_queue))
        self.addCleanup(q.close)
        return q

    def test_a_task_result_comes_back_through_the_worker(self) -> None:
        self.assertEqual(self.mod.add.delay(2, 3).get(timeout=TIMEOUT), 5)

    def test_task_routes_send_a_task_to_its_own_queue(self) -> None:
        self.assertEqual(self.mod.mul.delay(6, 7).get(timeout=TIMEOUT), 42)
        self.assertEqual(self.mod.add.delay(1, 1).get(timeout=TIMEOUT), 2)
        self.assertEqual(self.queue("b").stats().done, 1)  # mul went to b, acked there
        self.assertEqual(self.queue("a").stats().done, 1)  # add to the default queue

    def test_a_task_that_retries_succeeds_on_its_third_run(self) -> None:
        result = self.mod.flaky.delay(2)
        self.assertEqual(result.get(timeout=TIMEOUT), 2)
        self.assertEqual(result.state, "SUCCESS")

    def test_a_failure_comes_back_as_the_exception(self) -> None:
        result = self.mod.boom.delay("no way")
        with self.assertRaises(ValueError) as caught:
            result.get(timeout=TIMEOUT)
        self.assertIn("no way", str(caught.exception))
        self.assertEqual(result.state, "FAILURE")
        self.assertIn("ValueError", result.traceback or "")

    def test_reject_without_requeue_dead_letters_the_message(self) -> None:
        from nobroker.celery.transport import REJECTED

        self.mod.refuse.delay("refused")
        self.wait_for_trace("started", "refused", TIMEOUT)
        q = self.queue("a")
        deadline = time.monotonic() + TIMEOUT
        while not q.dlq() and time.monotonic() < deadline:
            time.sleep(0.05)
        [dead] = q.dlq()
        self.assertEqual((dead.attempts, dead.last_error), (1, REJECTED))
        self.assertEqual(q.stats().pending + q.stats().leased, 0)
        self.assertEqual(self.traces("started"), ["refused"])  # run once, not requeued

    def test_an_unregistered_task_is_dead_lettered_for_a_later_requeue(self) -> None:
        """Celery rejects a message naming a task the worker lacks (a deploy behind):
        on Redis the message is gone; here it waits in the dead-letter queue, and
        the caller's result says NotRegistered, as on Redis."""
        from celery.exceptions import NotRegistered

        from nobroker.celery.transport import REJECTED

        result = self.mod.app.send_task("celery_app.not_deployed_yet", args=(1,), queue="a")
        with self.assertRaises(NotRegistered):
            result.get(timeout=TIMEOUT)
        q = self.queue("a")
        deadline = time.monotonic() + TIMEOUT
        while not q.dlq() and time.monotonic() < deadline:
            time.sleep(0.05)
        [dead] = q.dlq()
        self.assertEqual(dead.last_error, REJECTED)
        self.assertEqual(q.stats().pending + q.stats().leased, 0)

    def test_a_job_that_is_not_a_celery_message_is_nacked_not_run(self) -> None:
        q = self.queue("a")
        stray = q.enqueue({"hello": "world"}, max_attempts=1)
        self.assertEqual(self.mod.add.delay(1, 2).get(timeout=TIMEOUT), 3)
        deadline = time.monotonic() + TIMEOUT
        while q.get(stray.id).state != "dead" and time.monotonic() < deadline:
            time.sleep(0.05)
        dead = q.get(stray.id)
        self.assertEqual(dead.state, "dead")
        self.assertIn("not a Celery message", dead.last_error or "")

    def test_chain_group_and_chord(self) -> None:
        from celery import chain, chord, group

        mod = self.mod
        self.assertEqual(chain(mod.add.s(1, 2), mod.mul.s(10), mod.add.s(5))
                         .apply_async().get(timeout=TIMEOUT), 35)
        self.assertEqual(group(mod.add.s(i, i) for i in range(6))
                         .apply_async().get(timeout=TIMEOUT), [0, 2, 4, 6, 8, 10])
        result = chord(mod.add.s(i, 1) for i in range(5))(mod.tsum.s())
        self.assertEqual(result.get(timeout=TIMEOUT), 15)

    def test_a_chord_whose_callback_replaces_itself_with_a_group(self) -> None:
        from celery import chord

        mod = self.mod
        result = chord([mod.add.s(2, 5), mod.add.s(1, 1)])(mod.spread.s(9))
        self.assertEqual(result.get(timeout=TIMEOUT), [16, 11])

    def test_a_chord_whose_member_fails_fails_its_callback(self) -> None:
        from celery import chord

        mod = self.mod
        result = chord([mod.add.s(1, 1), mod.boom.s("member")])(mod.tsum.s())
        with self.assertRaises(Exception) as caught:
            result.get(timeout=TIMEOUT)
        self.assertIn("member", str(caught.exception))

    def test_get_waits_in_another_process_without_polling(self) -> None:
        # A process that waits 2s for a result must use next to no CPU.
        code = ("import celery_app, resource, sys\n"
                "r = celery_app.record.delay('late', 2.0)\n"
                "assert r.get(timeout=30) == 'late'\n"
                "u = resource.getrusage(resource.RUSAGE_SELF)\n"
                "print(u.ru_utime + u.ru_stime)\n")
        out = subprocess.run([sys.executable, "-c", code], env=self.env, cwd=self.tmp,
                             capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        cpu = float(out.stdout.strip().splitlines()[-1])
        # Importing Celery costs about half a second of CPU; a busy wait would add 2s.
        self.assertLess(cpu, 1.5, f"the waiting process used {cpu:.2f}s of CPU")


@needs_celery
class CeleryWithoutWorkerTest(CeleryTestCase):
    """What needs no worker: refusing pickle, expiring results."""

    def test_a_pickle_message_is_refused_and_nothing_is_stored(self) -> None:
        mod = self.app()
        mod.app.conf.update(task_serializer="pickle", accept_content=["pickle", "json"])
        with self.assertRaises(MessageRefusedError) as caught:
            mod.add.delay(1, 2)
        self.assertIn("pickle", str(caught.exception))
        self.assertIn("task_serializer", str(caught.exception))
        q = Queue(self.directory, "a")
        self.addCleanup(q.close)
        self.assertEqual(q.stats().total, 0)

    def test_a_higher_priority_is_leased_first_and_an_eta_is_a_delay(self) -> None:
        mod = self.app()
        low = mod.add.apply_async((1, 1), priority=1)
        high = mod.add.apply_async((2, 2), priority=9)
        later = mod.add.apply_async((3, 3), countdown=60)
        q = Queue(self.directory, "a")
        self.addCleanup(q.close)
        order = [job.payload["headers"]["id"] for job in q.lease(3)]
        self.assertEqual(order, [high.id, low.id])  # the countdown one is not due yet
        pending = q.get(q.list_jobs("pending")[0].id)
        self.assertEqual(pending.payload["headers"]["id"], later.id)
        self.assertGreater(pending.available_at, time.time() + 50)

    def test_a_pickle_result_serializer_is_refused(self) -> None:
        from celery import Celery
        from celery.exceptions import ImproperlyConfigured

        app = Celery("pickled", backend=f"nobroker://{self.directory}",
                     result_serializer="pickle")
        with self.assertRaises(ImproperlyConfigured):
            _ = app.backend

    def test_results_expire_after_result_expires(self) -> None:
        from celery import Celery

        app = Celery("expiring", backend=f"nobroker://{self.directory}", result_expires=1)
        app.backend.store_result("t-1", {"answer": 42}, "SUCCESS")
        self.assertEqual(app.AsyncResult("t-1").result, {"answer": 42})
        time.sleep(1.5)
        fresh = Celery("reader", backend=f"nobroker://{self.directory}", result_expires=1)
        self.assertEqual(fresh.AsyncResult("t-1").state, "PENDING")

    def test_a_value_past_its_ttl_reads_as_none_while_its_queue_stays_open(self) -> None:
        # Queue.get still hands back a keyed job's result after its result_ttl (until the
        # queue's next write): the result store checks the ttl itself.
        from nobroker.celery.results import ResultStore

        queue = Queue(self.directory, "results")
        self.addCleanup(queue.close)
        store = ResultStore(queue)
        store.put("t-1", {"answer": 42}, ttl=0.3)
        self.assertEqual(store.get("t-1"), {"answer": 42})
        time.sleep(0.5)
        self.assertIsNone(store.get("t-1"))

    def test_incr_counts_atomically_across_backends(self) -> None:
        from celery import Celery

        backends: list[Any] = [Celery(f"c{i}", backend=f"nobroker://{self.directory}").backend
                               for i in range(2)]
        counts = [backends[i % 2].incr("counter") for i in range(5)]
        self.assertEqual(counts, [1, 2, 3, 4, 5])

    def test_states_before_the_result_and_the_first_final_state_wins(self) -> None:
        from celery import Celery

        app: Any = Celery("states", backend=f"nobroker://{self.directory}")
        backend = app.backend
        self.assertEqual(app.AsyncResult("t-2").state, "PENDING")
        backend.store_result("t-2", {"step": 1}, "PROGRESS")
        backend.store_result("t-2", {"step": 2}, "PROGRESS")
        fresh: Any = Celery("reader", backend=f"nobroker://{self.directory}")
        self.assertEqual(fresh.AsyncResult("t-2").info, {"step": 2})
        backend.store_result("t-2", 7, "SUCCESS")
        backend.store_result("t-2", 8, "SUCCESS")  # a late duplicate changes nothing
        reader: Any = Celery("reader2", backend=f"nobroker://{self.directory}")
        self.assertEqual(reader.AsyncResult("t-2").result, 7)
