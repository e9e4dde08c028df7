"""enqueue_many's batch path writes, applies and returns exactly what the one-job
path would: the same bytes, the same replay state, equal Job values; so do a
lease's and an ack_many's (add_leases, add_acks)."""

from __future__ import annotations

import unittest

import harness.support  # noqa: F401  (puts src/ on sys.path)

from nobroker.codec import dumps
from nobroker.file.state.batch import Batch
from nobroker.models import Job, JobState, new_pending_jobs

IDS = [f"{n:016x}" for n in range(40, 47)]
TEXTS = [dumps(p) for p in ({"i": 1}, [1, 2], "s\u00e9", None, 3.5, {"a": {"b": []}}, 0)]


class BatchOfEnqueuesTest(unittest.TestCase):
    def test_add_enqueues_writes_the_records_add_enqueue_writes_one_by_one(self) -> None:
        for durable in (0, 4096):
            for priority, at, t in ((0, 1700000000.25, 1700000000.25), (-3, 7.0, 2.5)):
                one, many = Batch(12, durable), Batch(12, durable)
                for job_id, text in zip(IDS, TEXTS, strict=True):
                    one.add_enqueue(job_id, priority, at, t, 9, False, text)
                many.add_enqueues(IDS, priority, at, t, 9, TEXTS)
                self.assertEqual(many.encode(100), one.encode(100), (durable, priority))
                self.assertEqual(many.wakes, one.wakes)

    def test_add_enqueues_after_other_records_carries_no_durable_mark(self) -> None:
        one, many = Batch(3, 512), Batch(3, 512)
        for batch in (one, many):
            batch.add_enqueue("k", 0, 1.0, 1.0, 5, True, "1")
        for job_id, text in zip(IDS, TEXTS, strict=True):
            one.add_enqueue(job_id, 0, 1.0, 1.0, 5, False, text)
        many.add_enqueues(IDS, 0, 1.0, 1.0, 5, TEXTS)
        self.assertEqual(many.encode(16), one.encode(16))


class BatchOfSettlesTest(unittest.TestCase):
    """add_acks and add_leases write what add_ack and add_lease write one by one."""

    def test_add_acks_and_add_leases_write_the_records_of_the_one_by_one_path(self) -> None:
        ids = [*IDS[:3], 'quote " and \\ backslash', "caf\u00e9 \u2603"]
        for durable in (0, 4096):
            for t, until in ((1700000000.25, 1700000030.25), (2.0 ** -30, 1e16)):
                for count in (0, 1, 2, len(ids)):
                    one, many = Batch(12, durable), Batch(12, durable)
                    tokens = [7 + n for n in range(count)]
                    for job_id, token in zip(ids, tokens, strict=False):
                        one.add_ack(job_id, token, t)
                    many.add_acks(ids[:count], tokens, t)
                    expected = [one.add_lease(job_id, 100 + n, until, t)
                                for n, job_id in enumerate(ids[:count])]
                    self.assertEqual(many.add_leases(ids[:count], 100, until, t), expected)
                    with self.subTest(durable=durable, t=t, count=count):
                        self.assertEqual(many._items, one._items)
                        if count:  # an empty batch is never encoded
                            self.assertEqual(many.encode(100), one.encode(100))

    def test_add_leases_after_other_records_carries_no_durable_mark(self) -> None:
        one, many = Batch(3, 512), Batch(3, 512)
        for batch in (one, many):
            batch.add_ack("k", 1, 1.0)
        for n, job_id in enumerate(IDS):
            one.add_lease(job_id, 5 + n, 9.0, 1.0)
        many.add_leases(IDS, 5, 9.0, 1.0)
        self.assertEqual(many.encode(16), one.encode(16))


class NewPendingJobsTest(unittest.TestCase):
    def test_new_pending_jobs_equal_the_constructor_s_jobs(self) -> None:
        payloads = [{"i": 1}, None, [2]]
        built = new_pending_jobs(IDS[:3], payloads, 4, 7, 10.5, 9.25)
        expected = [Job(job_id, payload, 4, 0, 7, JobState.PENDING, 10.5, 9.25, None)
                    for job_id, payload in zip(IDS, payloads, strict=False)]
        self.assertEqual(built, expected)
        self.assertEqual([repr(job) for job in built], [repr(job) for job in expected])
        with self.assertRaises(AttributeError):
            built[0].id = "x"  # type: ignore[misc]  # still frozen
        with self.assertRaises(ValueError):
            new_pending_jobs(IDS[:2], payloads, 0, 1, 0.0, 0.0)


if __name__ == "__main__":
    unittest.main()
