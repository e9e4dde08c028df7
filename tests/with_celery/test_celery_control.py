"""Broadcasts on a nobroker directory, with real `celery worker` processes: ping and
inspect reach every worker and each replies, a destination narrows them, revoke of a
task still waiting in the queue keeps it from running, an unserved command is refused
before anything is sent, a prefork worker whose processes are all busy still answers
(the transport runs Celery's event loop); and, in this process through kombu, a reply
not read within its queue's message TTL is dropped, and reply stores are reused by later
connections rather than left one per connection."""

from __future__ import annotations

import socket
import time
import uuid
from typing import Any

from harness.celery_support import CeleryTestCase, needs_celery

from nobroker import Queue
from nobroker.celery import queue_name_for

TIMEOUT = 30.0
HOST = socket.gethostname()


@needs_celery
class CeleryControlTest(CeleryTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.mod = self.app()
        self.control = self.mod.app.control
        self.addCleanup(self.mod.app.close)

    def start(self, *names: str, options: tuple[str, ...] = ()) -> None:
        for name in names:
            self.start_worker(name, "-P", "threads", "-c", "1", *options)
        self.wait_until_answering(*names)

    def wait_until_answering(self, *names: str) -> None:
        wanted = {f"{name}@{HOST}" for name in names}
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            if wanted <= self.pinged():
                return
        self.fail(f"workers {sorted(wanted)} never answered a ping")

    def pinged(self, **options: Any) -> set[str]:
        return {name for reply in self.control.ping(timeout=1.0, **options)
                for name in reply}

    def pidbox(self, name: str) -> Queue:
        q = Queue(self.directory, queue_name_for(f"{name}@{HOST}.celery.pidbox"))
        self.addCleanup(q.close)
        return q

    def test_ping_reaches_every_worker_and_each_replies(self) -> None:
        self.start("w1", "w2")
        self.assertEqual(self.pinged(), {f"w1@{HOST}", f"w2@{HOST}"})
        self.assertEqual(self.pinged(destination=[f"w2@{HOST}"]), {f"w2@{HOST}"})
        # each call's reply queue (a new one per call, in kombu) is held by one nobroker
        # queue of this process's connection, not one each
        stores = {path.name.split(".")[0] for path in self.directory.iterdir()}
        self.assertEqual(len([name for name in stores if name.startswith("celery_replies-")]),
                         1, sorted(stores))
        self.assertEqual([name for name in stores if "reply" in name and
                          not name.startswith("celery_replies-")], [])

    def test_inspect_sees_the_running_task_and_the_registered_ones(self) -> None:
        self.start("w1")
        self.mod.slow.delay("long", 4)
        self.wait_for_trace("started", "long", TIMEOUT)
        inspect = self.control.inspect(timeout=2.0)
        active = inspect.active() or {}
        self.assertEqual([task["name"] for task in active[f"w1@{HOST}"]], ["celery_app.slow"])
        self.assertIn("celery_app.add", (inspect.registered() or {})[f"w1@{HOST}"])
        self.assertIn("pool", (inspect.stats() or {})[f"w1@{HOST}"])

    def test_revoke_of_a_task_waiting_in_the_queue_keeps_it_from_running(self) -> None:
        from celery.exceptions import TaskRevokedError

        # one thread, one message held: while `busy` runs (acks_late), the next message
        # stays in the nobroker queue
        self.start("w1", options=("--prefetch-multiplier", "1"))
        self.mod.slow.delay("busy", 3)
        self.wait_for_trace("started", "busy", TIMEOUT)
        victim = self.mod.record.delay("victim", 0)
        replies = self.control.revoke(victim.id, reply=True, timeout=5.0)
        self.assertEqual([name for reply in replies for name in reply], [f"w1@{HOST}"])
        with self.assertRaises(TaskRevokedError):
            victim.get(timeout=TIMEOUT)
        self.assertEqual(victim.state, "REVOKED")
        after = self.mod.record.delay("after", 0)  # the worker runs on
        self.assertEqual(after.get(timeout=TIMEOUT), "after")
        self.assertNotIn("victim", self.traces("done"))
        # the revoked message was acked, not left in the queue (the ack of `after`, an
        # acks_late task, may land just after its result: wait for it)
        queue = Queue(self.directory, queue_name_for("a"))
        self.addCleanup(queue.close)
        deadline = time.monotonic() + TIMEOUT
        while queue.stats().pending + queue.stats().leased and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertEqual(queue.stats().pending + queue.stats().leased, 0)

    def test_control_commands_change_the_running_worker(self) -> None:
        self.start("w1")
        name = f"w1@{HOST}"
        replies = self.control.add_consumer("c", reply=True, timeout=5.0)
        self.assertEqual([next(iter(reply)) for reply in replies], [name])
        result = self.mod.add.apply_async((4, 4), queue="c")  # a queue w1 was not started on
        self.assertEqual(result.get(timeout=TIMEOUT), 8)
        replies = self.control.rate_limit("celery_app.add", "100/m", reply=True, timeout=5.0)
        self.assertIn("ok", replies[0][name])
        self.control.shutdown(destination=[name])
        self.assertEqual(self.procs[0].wait(TIMEOUT), 0)

    def test_a_full_prefetch_is_refilled_at_once_beside_the_pidbox(self) -> None:
        # One thread, one message held: each next task waits for the previous one's ack,
        # which wakes no queue. The consumer also waits on its pidbox queue, and must
        # re-check its full channel soon rather than sleep a whole idle slice (1 s) on
        # the pidbox each time: 20 tasks took over 20 s that way.
        from celery import group

        self.start("w1", options=("--prefetch-multiplier", "1"))
        started = time.monotonic()
        results = group(self.mod.add.s(i, i) for i in range(20)).apply_async()
        self.assertEqual(results.get(timeout=TIMEOUT), [2 * i for i in range(20)])
        self.assertLess(time.monotonic() - started, 10.0)

    def test_an_unserved_command_is_refused_and_nothing_is_sent(self) -> None:
        from nobroker.celery.messages import CommandNotServedError

        self.start("w1")
        before = self.pidbox("w1").stats()
        with self.assertRaisesRegex(CommandNotServedError, "enable_events"):
            self.control.enable_events()
        after = self.pidbox("w1").stats()
        self.assertEqual((after.pending, after.done), (before.pending, before.done))


@needs_celery
class PreforkControlTest(CeleryControlTest):
    """`-P prefork`: a worker whose one process is busy still reads its control
    messages. Without an event loop (kombu's `asynchronous`) Celery's consumer blocks
    handing the next task to the full pool, and reads nothing until a process is free."""

    def start(self, *names: str, options: tuple[str, ...] = ()) -> None:
        for name in names:
            self.start_worker(name, "-P", "prefork", "-c", "1", *options)
        self.wait_until_answering(*names)

    def test_a_busy_prefork_worker_answers_and_revokes_what_it_holds(self) -> None:
        from celery.exceptions import TaskRevokedError

        self.start("w1")
        self.mod.slow.delay("busy", 8)
        self.wait_for_trace("started", "busy", TIMEOUT)
        waiting = self.mod.record.delay("waiting", 0)  # received while the pool is full
        time.sleep(1.0)
        started = time.monotonic()
        self.assertEqual(self.pinged(), {f"w1@{HOST}"})
        active = self.control.inspect(timeout=2.0).active() or {}
        self.assertEqual([task["name"] for task in active[f"w1@{HOST}"]], ["celery_app.slow"])
        replies = self.control.revoke(waiting.id, reply=True, timeout=2.0)
        self.assertEqual([name for reply in replies for name in reply], [f"w1@{HOST}"])
        self.assertLess(time.monotonic() - started, 6.0)  # answered while `busy` ran
        self.assertNotIn("busy", self.traces("done"))
        with self.assertRaises(TaskRevokedError):
            waiting.get(timeout=TIMEOUT)
        after = self.mod.record.delay("after", 0)  # the worker runs on
        self.assertEqual(after.get(timeout=TIMEOUT), "after")
        self.assertNotIn("waiting", self.traces("done"))


@needs_celery
class ReplyExpiryTest(CeleryTestCase):
    """kombu's mailbox declares its reply queue with a message TTL (Celery's
    control_queue_ttl): a reply nobody read in time is dropped, not delivered late."""

    def test_a_message_older_than_its_queue_ttl_is_dropped_when_read(self) -> None:
        from kombu import Connection, Exchange
        from kombu import Queue as KombuQueue

        exchange = Exchange("reply.test.pidbox", type="direct", durable=False)
        reply_queue = KombuQueue("oid.reply.test.pidbox", exchange=exchange, routing_key="oid",
                                 durable=False, auto_delete=True, message_ttl=0.5)
        with Connection(f"nobroker://{self.directory}") as caller, \
                Connection(f"nobroker://{self.directory}") as worker:
            bound = reply_queue(caller.channel())
            bound.declare()
            producer = worker.Producer()
            producer.publish({"late": True}, exchange=exchange, routing_key="oid",
                             declare=[exchange])
            time.sleep(0.8)
            producer.publish({"late": False}, exchange=exchange, routing_key="oid")
            message = bound.get(no_ack=True)
            self.assertIsNotNone(message)
            self.assertEqual(message.payload, {"late": False})
            self.assertIsNone(bound.get(no_ack=True))
        queue = Queue(self.directory, queue_name_for("oid.reply.test.pidbox"))
        self.addCleanup(queue.close)
        self.assertEqual(queue.stats().pending, 0)


@needs_celery
class ReplyStoreTest(CeleryTestCase):
    """A connection claims the first free reply store (replies.py) and lets it go when it
    closes: the directory holds as many as were in use at once."""

    def declare_reply_queue(self, connection: Any) -> None:
        from kombu import Exchange
        from kombu import Queue as KombuQueue

        exchange = Exchange("reply.test.pidbox", type="direct", durable=False)
        oid = str(uuid.uuid4())  # kombu's mailbox names each call's reply queue so
        KombuQueue(f"{oid}.reply.test.pidbox", exchange=exchange, routing_key=oid,
                   durable=False, auto_delete=True)(connection.channel()).declare()

    def stores(self) -> list[str]:
        return sorted({path.name.split(".")[0] for path in self.directory.iterdir()
                       if path.name.startswith("celery_replies-")})

    def test_reply_stores_are_reused_not_left_one_per_connection(self) -> None:
        from kombu import Connection

        url = f"nobroker://{self.directory}"
        with Connection(url) as first, Connection(url) as second:
            self.declare_reply_queue(first)
            self.declare_reply_queue(second)  # both open: two stores
        self.assertEqual(self.stores(), ["celery_replies-0", "celery_replies-1"])
        left = Queue(self.directory, "celery_replies-0")
        self.addCleanup(left.close)
        left.enqueue({"a reply": "for a connection that is gone"})
        for _ in range(3):
            with Connection(url) as later:
                self.declare_reply_queue(later)
                self.assertEqual(left.stats().pending, 0)  # purged when claimed
        self.assertEqual(self.stores(), ["celery_replies-0", "celery_replies-1"])
