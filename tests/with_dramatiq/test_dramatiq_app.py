"""An unchanged Dramatiq app on nobroker: results, retries, delays, priorities and dead
letters through real `dramatiq` worker processes, and the broker's own rules (JSON only,
queue names, the consumer's prefetch and leases) in this process."""

from __future__ import annotations

import json
import time
from typing import Any

from harness.dramatiq_support import DramatiqTestCase, needs_dramatiq

from nobroker import JobState, Queue

TIMEOUT_MS = 60_000


@needs_dramatiq
class WorkerProcessTest(DramatiqTestCase):
    def test_results_retries_and_dead_letters_through_a_dramatiq_worker(self) -> None:
        mod = self.app()
        self.start_worker("w", "--processes", "1", "--threads", "2")
        self.assertEqual(mod.add.send(2, 3).get_result(block=True, timeout=TIMEOUT_MS), 5)
        # Dramatiq's Retries re-enqueues the message (with its backoff as a nobroker delay)
        self.assertEqual(mod.flaky.send(2).get_result(block=True, timeout=TIMEOUT_MS), 2)
        mod.boom.send("for good")
        mod.broker.join("default", timeout=TIMEOUT_MS)
        dead = mod.broker.queue("default").dlq()
        self.assertEqual([job.payload["actor_name"] for job in dead], ["boom"])
        self.assertIn("ValueError('for good')", dead[0].last_error or "")
        self.assertEqual(mod.broker.queue("default").stats().pending, 0)

    def test_a_delayed_message_is_a_nobroker_delay_and_runs_when_due(self) -> None:
        mod = self.app()
        sent_at = time.time()
        message = mod.stamp.send_with_options(args=("late",), delay=2000)
        self.assertEqual(message.queue_name, "default")  # no delay queue
        job = mod.broker.queue("default").list_jobs(JobState.PENDING)[0]
        self.assertGreaterEqual(job.available_at, sent_at + 1.9)
        self.start_worker("w", "--processes", "1", "--threads", "1")
        ran_at = message.get_result(block=True, timeout=TIMEOUT_MS)
        self.assertGreaterEqual(ran_at, sent_at + 1.9)
        self.assertFalse((self.directory / "default-2eDQ.log").exists())
        self.assertEqual(sorted(mod.broker.get_declared_delay_queues()), [])

    def test_lower_priority_numbers_run_first_across_the_queue(self) -> None:
        mod = self.app()
        for i in range(4):
            mod.later.send(f"later{i}")
        for i in range(4):
            mod.urgent.send(f"urgent{i}")
        self.start_worker("w", "--processes", "1", "--threads", "1",
                          dramatiq_queue_prefetch="1")
        deadline = time.monotonic() + 60
        while len(self.traces("order")) < 8 and time.monotonic() < deadline:
            time.sleep(0.05)
        order = self.traces("order")
        self.assertEqual(sorted(order[:4]), [f"urgent{i}" for i in range(4)], order)
        self.assertEqual(sorted(order[4:]), [f"later{i}" for i in range(4)], order)


@needs_dramatiq
class BrokerTest(DramatiqTestCase):
    def test_a_pickle_encoder_is_refused_before_anything_is_written(self) -> None:
        import dramatiq
        from dramatiq.encoder import JSONEncoder, PickleEncoder

        from nobroker.dramatiq import EncoderRefusedError, NobrokerBroker

        mod = self.app()
        dramatiq.set_encoder(PickleEncoder())
        self.addCleanup(dramatiq.set_encoder, JSONEncoder())
        with self.assertRaisesRegex(EncoderRefusedError, "JSON only"):
            mod.add.send(1, 2)
        self.assertEqual(mod.broker.queue("default").stats().enqueued, 0)
        with self.assertRaises(EncoderRefusedError):
            NobrokerBroker(self.tmp / "other")

    def test_a_message_is_stored_as_dramatiq_s_json(self) -> None:
        mod = self.app()
        message = mod.add.send(1, 2)
        job = mod.broker.queue("default").list_jobs()[0]
        self.assertEqual(job.payload, json.loads(message.encode()))
        from nobroker.dramatiq import DEFAULT_MAX_DELIVERIES
        self.assertEqual((job.max_attempts, DEFAULT_MAX_DELIVERIES), (20, 20))

    def test_queue_names_map_one_to_one_and_readably(self) -> None:
        from nobroker.dramatiq import queue_name_for
        from nobroker.errors import NobrokerError

        names = ["default", "high_priority", "a-b", "a.b", "a-2eb", "_low", "x-y.z",
                 "dramatiq-results", "0a-2eb"[1:]]
        mapped = [queue_name_for(name) for name in names[:-1]]
        self.assertEqual(mapped[:3], ["default", "high_priority", "a-b"])
        self.assertEqual(mapped[3], "0a-2eb")
        self.assertEqual(len(set(mapped)), len(mapped))
        self.assertNotEqual(queue_name_for("dramatiq-results"), "dramatiq-results")
        for bad in ("", "1abc", "a b", "a/b"):
            with self.assertRaises(NobrokerError):
                queue_name_for(bad)
        mod = self.app()
        mod.slow.send("k", 0.0)  # queue "b.slow"
        self.assertTrue((self.directory / "0b-2eslow.log").exists()
                        or any(p.name.startswith("0b-2eslow") for p in self.directory.iterdir()))

    def test_the_consumer_leases_up_to_its_prefetch_and_settles(self) -> None:
        mod = self.app()
        for i in range(5):
            mod.add.send(i, i)
        consumer = mod.broker.consume("default", prefetch=2, timeout=200)
        first, second = next(consumer), next(consumer)
        self.assertIsNotNone(first)
        self.assertIsNone(next(consumer))  # the prefetch is full: nothing more is leased
        stats = mod.broker.queue("default").stats()
        self.assertEqual((stats.leased, stats.pending), (2, 3))
        consumer.ack(first)
        consumer.requeue([second])  # given back untried
        stats = mod.broker.queue("default").stats()
        self.assertEqual((stats.leased, stats.pending, stats.done), (0, 4, 1))
        third = next(consumer)
        assert third is not None
        consumer.nack(third)  # dead now, with 19 deliveries left
        queue = mod.broker.queue("default")
        (dead,) = queue.dlq()
        self.assertEqual((dead.id, dead.attempts, dead.max_attempts), (third.job_id, 1, 20))
        self.assertEqual(queue.stats().dead, 1)
        consumer.close()

    def test_an_idle_consumer_blocks_in_wait_and_a_producer_wakes_it(self) -> None:
        import threading

        mod = self.app()
        consumer = mod.broker.consume("default", prefetch=1, timeout=20_000)
        threading.Timer(0.5, mod.add.send, (1, 1)).start()
        started = time.monotonic()
        message = next(consumer)
        self.assertIsNotNone(message)
        self.assertLess(time.monotonic() - started, 10.0)
        consumer.ack(message)

    def test_a_lease_that_runs_out_is_delivered_again_not_dead_lettered(self) -> None:
        mod = self.app()
        message = mod.add.send(1, 1)
        # leased and never renewed nor settled: what a killed worker leaves behind
        (abandoned,) = mod.broker.queue("default").lease(1, visibility_timeout=0.3)
        time.sleep(0.5)
        consumer = mod.broker.consume("default", prefetch=1, timeout=3000)
        again = next(consumer)
        assert again is not None
        self.assertEqual(again.message_id, message.message_id)
        self.assertEqual(again.job_id, abandoned.id)
        consumer.ack(again)
        stats = mod.broker.queue("default").stats()
        self.assertEqual((stats.dead, stats.done, stats.retried), (0, 1, 1))

    def test_a_message_whose_leases_keep_running_out_ends_dead_at_its_delivery_limit(
            self) -> None:
        import dramatiq

        from nobroker.backoff import BackoffPolicy
        from nobroker.dramatiq import NobrokerBroker

        broker = NobrokerBroker(self.tmp / "limit", max_deliveries=2,
                                backoff=BackoffPolicy(base=0, jitter=0))
        self.addCleanup(broker.close)
        broker.declare_queue("default")
        queue = broker.queue("default")
        broker.enqueue(dramatiq.Message(queue_name="default", actor_name="add", args=(1, 1),
                                        kwargs={}, options={}))
        for _ in range(2):  # two workers killed mid-message: their leases run out
            # (reclaiming an expired lease may take a lease call of its own)
            leased = queue.lease(1, visibility_timeout=0.2) or queue.lease(
                1, visibility_timeout=0.2)
            self.assertEqual(len(leased), 1)
            time.sleep(0.3)
        self.assertEqual(queue.lease(1) + queue.lease(1), [])  # dead at its 2nd expiry
        (dead,) = queue.dlq()
        self.assertEqual(dead.attempts, 2)
        self.assertIn("lease expired", dead.last_error or "")
        with self.assertRaises(ValueError):
            NobrokerBroker(self.tmp / "bad", max_deliveries=0)

    def test_leases_are_renewed_while_a_message_is_held_without_the_consumer(self) -> None:
        from nobroker.dramatiq import NobrokerBroker

        mod = self.app()
        broker = NobrokerBroker(self.directory, visibility_timeout=0.6)
        self.addCleanup(broker.close)
        broker.declare_queue("default")
        mod.add.send(1, 1)
        consumer = broker.consume("default", prefetch=1, timeout=100)
        held = next(consumer)
        assert held is not None
        time.sleep(1.5)  # no __next__ meanwhile (a paused worker): the book's thread renews
        self.assertIsNone(mod.broker.consume("default", prefetch=1, timeout=100).__next__())
        consumer.ack(held)
        self.assertEqual(broker.queue("default").stats().done, 1)

    def test_results_on_a_memory_queue_and_the_in_process_worker(self) -> None:
        import dramatiq
        from dramatiq import Worker
        from dramatiq.results import Results

        from nobroker.dramatiq import NobrokerBroker, NobrokerResultBackend

        broker = NobrokerBroker("memory://dramatiq-test")
        broker.add_middleware(Results(backend=NobrokerResultBackend("memory://dramatiq-test")))
        self.addCleanup(broker.close)
        previous = dramatiq.get_broker()
        dramatiq.set_broker(broker)
        self.addCleanup(dramatiq.set_broker, previous)

        @dramatiq.actor(store_results=True, broker=broker)
        def double(x: int) -> int:
            return 2 * x

        worker = Worker(broker, worker_timeout=100, worker_threads=2)
        worker.start()
        self.addCleanup(worker.stop)
        messages = [double.send(i) for i in range(10)]
        results: list[Any] = [m.get_result(block=True, timeout=TIMEOUT_MS) for m in messages]
        self.assertEqual(results, [2 * i for i in range(10)])
        self.assertIsInstance(broker.queue("default"), Queue)

    def test_a_result_past_its_ttl_is_missing_to_a_reader_that_keeps_its_queue_open(
            self) -> None:
        # Queue.get still hands back a keyed job's result after its result_ttl (until the
        # queue's next write), on files and memory://: the backend checks the ttl itself.
        from dramatiq.results.backend import Missing

        from nobroker.dramatiq import NobrokerResultBackend

        for location in (str(self.tmp / "results"), "memory://dramatiq-ttl"):
            backend = NobrokerResultBackend(location)
            self.addCleanup(backend.close)
            backend._store("key", {"answer": 42}, 300)  # ms
            self.assertEqual(backend._get("key"), {"answer": 42})
            time.sleep(0.5)
            self.assertIs(backend._get("key"), Missing, location)

    def test_join_raises_what_was_dead_lettered_only_when_asked_to_keep_it(self) -> None:
        import dramatiq
        from dramatiq import Worker

        from nobroker.dramatiq import NobrokerBroker

        for fail_fast in (True, False):
            broker = NobrokerBroker(self.tmp / f"jobs-{fail_fast}", fail_fast_default=fail_fast)
            self.addCleanup(broker.close)

            @dramatiq.actor(max_retries=0, broker=broker)
            def explode() -> None:
                raise KeyError("kept")

            worker = Worker(broker, worker_timeout=100, worker_threads=1)
            worker.start()
            self.addCleanup(worker.stop)
            explode.send()
            if fail_fast:
                with self.assertRaises(KeyError):
                    broker.join("default", timeout=TIMEOUT_MS)
                self.assertEqual(len(broker.dead_letters), 1)
                broker.flush_all()
                self.assertEqual(broker.dead_letters, [])
            else:
                broker.join("default", timeout=TIMEOUT_MS)
                worker.join()
                self.assertEqual(broker.dead_letters, [])
            self.assertEqual(broker.queue("default").stats().dead, 1)
