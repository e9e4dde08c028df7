"""Stdlib-only parts of nobroker.celery, run by `make.py test` too: the .pth hook
registers `nobroker://` with kombu when kombu is imported (and not before); the
core and nobroker.celery's top import neither kombu nor Celery; Celery queue
names map one-to-one to nobroker queue names; messages round-trip and pickle is
refused; bindings shared through the directory live while they are written again; the
event loop's pipe turns readable when a watched queue gets a job, once, until the loop
has served it."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import textwrap
import unittest
from queue import Empty

from harness.support import SRC, TempDirTestCase

from nobroker import Queue
from nobroker.celery import MessageRefusedError, directory_from_url, queue_name_for
from nobroker.celery.bindings import BINDINGS_QUEUE, LIFETIME, PERIOD, Binding, SharedBindings
from nobroker.celery.eventloop import LoopWaker
from nobroker.celery.messages import (
    CommandNotServedError,
    expires_at,
    has_expired,
    job_id_of,
    message_from,
    payload_for,
    refuse_unserved,
)
from nobroker.errors import NobrokerError


class HookTest(TempDirTestCase):
    """With a stand-in kombu on the path, so the test needs no kombu."""

    def run_python(self, code: str) -> str:
        fake = self.tmp / "kombu" / "transport"
        fake.mkdir(parents=True)
        (self.tmp / "kombu" / "__init__.py").write_text("")
        (fake / "__init__.py").write_text("TRANSPORT_ALIASES = {'memory': 'x'}\n")
        out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)],
                             env={"PYTHONPATH": f"{SRC}:{self.tmp}", "PATH": "/usr/bin"},
                             capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        return out.stdout

    def test_the_alias_appears_when_kombu_transport_is_imported(self) -> None:
        out = self.run_python("""
            import sys, _nobroker_celery
            print('kombu' in sys.modules)
            import kombu.transport
            print(kombu.transport.TRANSPORT_ALIASES['nobroker'])
            print(sum(type(f).__name__ == '_Finder' for f in sys.meta_path))
            """)
        self.assertEqual(out.split(), ["False", "nobroker.celery.transport:Transport", "0"])

    def test_an_alias_set_by_someone_else_is_kept(self) -> None:
        out = self.run_python("""
            import kombu.transport
            kombu.transport.TRANSPORT_ALIASES['nobroker'] = 'mine:T'
            import _nobroker_celery
            print(kombu.transport.TRANSPORT_ALIASES['nobroker'])
            """)
        self.assertEqual(out.split(), ["mine:T"])

    def test_the_core_and_nobroker_celery_import_neither_kombu_nor_celery(self) -> None:
        out = self.run_python("""
            import sys, nobroker, nobroker.celery, nobroker.celery.results
            import nobroker.celery.leases, nobroker.celery.waiting
            print(sorted(m for m in sys.modules if m.split('.')[0] in ('kombu', 'celery')))
            """)
        self.assertEqual(out.strip(), "[]")


class NamesTest(unittest.TestCase):
    def test_queue_names_map_one_to_one(self) -> None:
        names = ["celery", "a", "my_queue", "my__queue", "a.b", "a_2eb", "w1@host.celery.pidbox",
                 "x-y", "é", "a😀"]
        names = [n for n in names if n[0].isascii()]
        mapped = [queue_name_for(n) for n in names]
        self.assertEqual(len(set(mapped)), len(names))
        self.assertEqual(queue_name_for("celery"), "celery")
        self.assertEqual(queue_name_for("my_queue"), "my__queue")
        self.assertEqual(queue_name_for("a.b"), "a_2eb")
        self.assertEqual(queue_name_for("a😀"), "a_u01f600")
        self.assertNotEqual(queue_name_for("celery_results"), "celery_results")

    def test_a_name_that_cannot_be_a_queue_is_refused(self) -> None:
        for bad in ("", ".hidden", "_x", "a" * 101):
            with self.subTest(bad=bad), self.assertRaises(NobrokerError):
                queue_name_for(bad)

    def test_urls(self) -> None:
        self.assertEqual(directory_from_url("nobroker:///var/lib/jobs"), "/var/lib/jobs")
        self.assertEqual(directory_from_url("nobroker://jobs"), "jobs")
        for bad in ("redis://x", "nobroker://", "nobroker:///"):
            with self.subTest(bad=bad), self.assertRaises(NobrokerError):
                directory_from_url(bad)


class MessagesTest(unittest.TestCase):
    def message(self, **fields: object) -> dict[str, object]:
        message: dict[str, object] = {
            "body": json.dumps([[1, 2], {}, {}]), "content-type": "application/json",
            "content-encoding": "utf-8", "headers": {"id": "t1", "task": "add"},
            "properties": {"priority": 3, "delivery_tag": "old",
                           "delivery_info": {"exchange": "", "routing_key": "a"}}}
        message.update(fields)
        return message

    def test_a_message_round_trips_through_json(self) -> None:
        payload = payload_for(self.message(), "a")
        stored = json.loads(json.dumps(payload))  # what nobroker keeps
        back = message_from(stored, "new-tag", redelivered=False)
        self.assertEqual(json.loads(back["body"]), [[1, 2], {}, {}])
        self.assertEqual(back["headers"], {"id": "t1", "task": "add"})
        self.assertEqual(back["properties"]["delivery_tag"], "new-tag")
        self.assertEqual(back["properties"]["priority"], 3)
        self.assertIsNone(job_id_of(self.message()))

    def test_pickle_and_other_content_types_are_refused(self) -> None:
        for content_type in ("application/x-python-serialize", "application/x-msgpack"):
            with self.subTest(content_type=content_type), \
                    self.assertRaises(MessageRefusedError):
                payload_for(self.message(**{"content-type": content_type}), "a")
        with self.assertRaises(MessageRefusedError):
            payload_for(self.message(body=b"\x1f\x8b\x08"), "a")  # gzip

    def test_a_message_stamped_with_its_queue_ttl_expires_after_it(self) -> None:
        payload = payload_for(self.message(), "a")
        self.assertIs(expires_at(payload, None, 100.0), payload)
        stamped = expires_at(payload, 300.0, 100.0)
        self.assertFalse(has_expired(stamped, 399.0))
        self.assertTrue(has_expired(stamped, 400.0))
        self.assertFalse(has_expired(payload, 10**12))

    def test_a_broadcast_of_an_unserved_command_is_refused(self) -> None:
        refuse_unserved(self.message(body=json.dumps({"method": "ping", "arguments": {}})))
        refuse_unserved(self.message(body="not json"))
        with self.assertRaisesRegex(CommandNotServedError, "enable_events.*events"):
            refuse_unserved(self.message(body=json.dumps({"method": "enable_events"})))


class SharedBindingsTest(TempDirTestCase):
    """Two processes' views of the bindings (two Queue objects), on a fake clock."""

    def setUp(self) -> None:
        super().setUp()
        self.now = 1_000_000.0

    def bindings(self) -> SharedBindings:
        queue = Queue(self.tmp, BINDINGS_QUEUE, clock=lambda: self.now)
        shared = SharedBindings(queue)
        self.addCleanup(queue.close)
        self.addCleanup(shared.close)
        return shared

    def test_a_binding_declared_in_one_process_is_seen_in_another(self) -> None:
        worker, caller = self.bindings(), self.bindings()
        pidbox = Binding("celery.pidbox", "", "", "w1@h.celery.pidbox", 300.0)
        worker.declare(pidbox)
        worker.declare(Binding("reply.celery.pidbox", "oid", "", "oid.reply.celery.pidbox"))
        self.assertEqual(caller.table("celery.pidbox"), [pidbox])
        self.assertEqual(caller.table("other"), [])

    def test_a_binding_not_written_again_dies_after_its_lifetime(self) -> None:
        worker, caller = self.bindings(), self.bindings()
        alive = Binding("celery.pidbox", "", "", "w1@h.celery.pidbox")
        dead = Binding("celery.pidbox", "", "", "w2@h.celery.pidbox")
        worker.declare(alive)
        caller.declare(dead)
        caller.close()  # the process that declared `dead` stops writing it
        for _ in range(int(LIFETIME / PERIOD) + 1):
            self.now += PERIOD
            worker.refresh()
        self.assertEqual(self.bindings().table("celery.pidbox"), [alive])
        # the dead rows, its own old ones included, were leased and acked away
        self.assertLessEqual(worker.queue.stats().pending, int(LIFETIME / PERIOD) + 1)


class LoopWakerTest(TempDirTestCase):
    """The pipe kombu's event loop watches (eventloop.py), with a real queue."""

    def test_a_job_pokes_the_pipe_once_and_the_loop_serves_it(self) -> None:
        queue = Queue(self.tmp, "a")
        self.addCleanup(queue.close)
        waker = LoopWaker(lambda: ([queue], False))
        self.addCleanup(waker.close)

        def readable(seconds: float) -> bool:
            return bool(select.select([waker.fileno()], [], [], seconds)[0])

        def deliver_one() -> None:
            job = queue.lease_one()
            if job is None:
                raise Empty()
            delivered.append(job.payload)

        delivered: list[int] = []
        self.assertFalse(readable(0.3))
        queue.enqueue(1)
        self.assertTrue(readable(5.0))
        # disarmed until the loop serves: one poke, although the job is still ready
        self.assertTrue(readable(0.3))
        self.assertEqual(os.read(waker.fileno(), 512), b"!")
        waker.serve(deliver_one)
        self.assertEqual(delivered, [1])
        self.assertFalse(readable(0.3))  # watching again; nothing new
        queue.enqueue(2)
        self.assertTrue(readable(5.0))
        waker.serve(deliver_one)
        self.assertEqual(delivered, [1, 2])

    def test_a_full_prefetch_is_not_watched_until_an_ack_pokes(self) -> None:
        queue = Queue(self.tmp, "a")
        self.addCleanup(queue.close)
        waker = LoopWaker(lambda: ([], True))  # its one channel's prefetch is full
        self.addCleanup(waker.close)
        queue.enqueue(1)
        self.assertFalse(select.select([waker.fileno()], [], [], 0.3)[0])
        waker.poke()  # what Channel.made_room does
        self.assertTrue(select.select([waker.fileno()], [], [], 0.3)[0])


if __name__ == "__main__":
    unittest.main()
