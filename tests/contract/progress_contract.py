"""Progress and metadata from a running job (current_job().progress / set_meta) as a
contract every backend passes: durable, visible through `Queue.get` from another
handle, fenced by the lease, coalesced, and kept exactly as long as the job is.
Mixed into QueueContract (test_queue_contract.py), so it runs wherever that does;
the reopen-and-compare after each test checks that storage holds what `get` showed.

The running job's context is built here as the Worker builds it
(`RunningJob(job, q.backend)`), with the test's fake clock deciding the coalescing.
"""

from __future__ import annotations

import time
import unittest
from typing import Any

from harness.support import FakeClock

from nobroker import (
    BackoffPolicy,
    JobNotFoundError,
    JobState,
    NotLeasedError,
    Queue,
    SerializationError,
)
from nobroker.tasks import RunningJob


class ProgressContract:
    """Needs the QueueContract plumbing: clocked(), make_queue()."""

    def clocked(self, **kwargs: Any) -> tuple[Queue, FakeClock]:
        raise NotImplementedError

    def make_queue(self, **kwargs: Any) -> Queue:
        raise NotImplementedError

    def running(self, **kwargs: Any) -> tuple[Queue, FakeClock, RunningJob]:
        """A queue, its clock, and the running context of its one leased job."""
        job_id = kwargs.pop("job_id", None)
        q, clock = self.clocked(**kwargs)
        q.enqueue({"n": 1}, job_id=job_id)
        leased = q.lease_one()
        assert leased is not None
        return q, clock, RunningJob(leased, q.backend, clock=clock)

    def test_progress_and_meta_are_visible_from_another_handle(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, _, job = self.running()
        t.assertIsNone(q.get(job.id).progress)
        t.assertEqual(q.get(job.id).meta, {})
        job.progress(0.4, "resized 40 of 100")
        job.set_meta({"pages": 100})
        job.flush()
        with self.make_queue(readonly=True) as other:
            seen = other.get(job.id)
        t.assertEqual((seen.progress, seen.meta), ((0.4, "resized 40 of 100"), {"pages": 100}))
        t.assertEqual(q.list_jobs()[0].meta, {"pages": 100})
        seen.meta["pages"] = 0  # a copy: changing it changes nothing stored
        t.assertEqual(q.get(job.id).meta, {"pages": 100})

    def test_set_meta_merges_keys_and_the_context_reads_through_to_the_job(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, clock, job = self.running()
        job.set_meta({"a": 1, "b": {"c": [1, 2]}})
        clock.advance(2)
        job.set_meta({"b": None, "d": "x"})
        t.assertEqual(job.meta, {"a": 1, "b": None, "d": "x"})
        t.assertEqual(q.get(job.id).meta, {"a": 1, "b": None, "d": "x"})
        t.assertEqual((job.attempts, job.payload, job.job.id), (1, {"n": 1}, job.id))

    def test_writes_are_coalesced_and_the_last_is_written_by_flush(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, clock, job = self.running()
        job.progress(0.1)
        for step in range(2, 10):  # within the second after the first write: held
            job.progress(step / 10)
        t.assertEqual(q.get(job.id).progress, (0.1, None))
        job.flush()  # the worker's, as the call returns
        t.assertEqual(q.get(job.id).progress, (0.9, None))
        clock.advance(1.0)
        job.progress(1.0, "done")  # a second later: written at once
        t.assertEqual(q.get(job.id).progress, (1.0, "done"))

    def test_a_held_report_is_written_when_the_interval_ends(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, _, coalesced = self.running()
        job = RunningJob(coalesced.job, q.backend, interval=0.05)  # real time: the timer's
        job.progress(0.5)
        job.progress(0.75, "held")
        deadline = time.monotonic() + 10
        while q.get(job.id).progress != (0.75, "held") and time.monotonic() < deadline:
            time.sleep(0.01)
        t.assertEqual(q.get(job.id).progress, (0.75, "held"))

    def test_a_stale_holders_progress_is_refused(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        backoff = BackoffPolicy(base=1.0, factor=1.0, max_delay=1.0, jitter=0.0)
        q, clock, job = self.running(visibility_timeout=10, backoff=backoff)
        job.progress(0.5, "mine")
        clock.advance(11)  # the lease expired: reclaimed, then another worker takes the job
        t.assertIsNone(q.lease_one())
        clock.advance(1)
        again = q.lease_one()
        assert again is not None and again.id == job.id
        clock.advance(2)
        with t.assertRaises(NotLeasedError):
            job.progress(0.9, "stale")
        current = RunningJob(again, q.backend, clock=clock)
        t.assertEqual(current.reported, (0.5, "mine"), "the new attempt starts from the note")
        current.progress(0.1, "retrying")
        t.assertEqual(q.get(job.id).progress, (0.1, "retrying"))

    def test_bad_reports_are_refused_before_anything_is_written(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, _, job = self.running()
        for fraction in (1.5, -0.1, float("nan"), "half", True):
            with t.subTest(fraction=fraction), t.assertRaises(ValueError):
                job.progress(fraction)  # type: ignore[arg-type]
        with t.assertRaises(ValueError):
            job.progress(0.5, 7)  # type: ignore[arg-type]
        with t.assertRaises(TypeError):
            job.set_meta({1: "x"})  # type: ignore[dict-item]
        with t.assertRaises(SerializationError):
            job.set_meta({"x": object()})
        with t.assertRaises(ValueError):
            job.set_meta({"x": "y" * 20000})
        t.assertEqual((q.get(job.id).progress, q.get(job.id).meta), (None, {}))

    def test_kept_with_the_result_the_key_and_the_dead_letter_queue(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, _, job = self.running()
        job.progress(1.0, "all done")
        q.ack(job.job, result=7)
        t.assertEqual(q.get(job.id).progress, (1.0, "all done"))
        q, _, job = self.running(job_id="the-key")
        job.set_meta({"kept": "with its key"})
        q.ack(job.job)
        t.assertEqual(q.get("the-key").meta, {"kept": "with its key"})
        q, _, job = self.running(max_attempts=1)
        job.set_meta({"why": "it failed"})
        q.nack(job.job, error="boom")
        t.assertEqual(q.get(job.id).state, JobState.DEAD)
        t.assertEqual(q.get(job.id).meta, {"why": "it failed"})
        q.requeue_dead(job.id)
        t.assertEqual(q.get(job.id).meta, {"why": "it failed"}, "a requeue keeps it")
        if q.capabilities.compaction:
            q.compact()
            t.assertEqual(q.get(job.id).meta, {"why": "it failed"})
            t.assertEqual(q.get("the-key").meta, {"kept": "with its key"})

    def test_gone_with_the_job(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, _, job = self.running()
        job.set_meta({"a": 1})
        q.ack(job.job)  # no result, no key: nothing of the job is kept
        with t.assertRaises(JobNotFoundError):
            q.get(job.id)
        q, clock, job = self.running(job_id="again", key_retention=5)
        job.set_meta({"old": True})
        q.ack(job.job)
        clock.advance(6)
        q.enqueue("new", job_id="again")  # the key expired: a new job, without the old note
        t.assertEqual(q.get("again").meta, {})

    def test_metadata_given_at_enqueue_is_the_jobs_from_the_start(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, clock = self.clocked()
        given = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
        job = q.enqueue({"n": 1}, meta=given)
        given["traceparent"] = "changed"  # a copy was taken
        t.assertEqual(job.meta["traceparent"][:2], "00")
        t.assertEqual(q.get(job.id).meta, job.meta)
        t.assertIsNone(q.get(job.id).progress)
        leased = q.lease_one()
        assert leased is not None
        t.assertEqual(leased.meta, job.meta, "the worker sees it on the leased job")
        running = RunningJob(leased, q.backend, clock=clock)
        running.set_meta({"step": 1})
        t.assertEqual(q.get(job.id).meta, {**job.meta, "step": 1}, "merged into it")
        keyed = q.enqueue("k", job_id="key", meta={"first": True})
        again = q.enqueue("k", job_id="key", meta={"second": True})  # the existing job
        t.assertEqual((keyed.meta, again.meta), ({"first": True}, {"first": True}))
        t.assertEqual(q.enqueue("plain").meta, {})

    def test_enqueue_many_gives_metadata_to_every_job_or_to_each(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, clock = self.clocked()
        shared = {"batch": "b-1", "nested": {"n": [1]}}
        same = q.enqueue_many(["a", "b"], meta=shared)
        shared["nested"]["n"].append(2)  # a copy was taken
        t.assertEqual([job.meta for job in same], [{"batch": "b-1", "nested": {"n": [1]}},
                                                   {"batch": "b-1", "nested": {"n": [1]}}])
        same[0].meta["nested"]["n"].append(3)  # each Job has its own, apart from storage
        t.assertEqual(same[1].meta["nested"], {"n": [1]})
        each = q.enqueue_many(["c", "d", "e"], meta=[{"i": 0}, None, {"i": 2}])
        t.assertEqual([job.meta for job in each], [{"i": 0}, {}, {"i": 2}])
        plain = q.enqueue_many(["f"])
        t.assertEqual(plain[0].meta, {})
        stored = {job.payload: job.meta for job in q.list_jobs()}
        t.assertEqual(stored, {"a": {"batch": "b-1", "nested": {"n": [1]}},
                               "b": {"batch": "b-1", "nested": {"n": [1]}},
                               "c": {"i": 0}, "d": {}, "e": {"i": 2}, "f": {}})
        with self.make_queue(readonly=True) as other:
            t.assertEqual(other.get(each[2].id).meta, {"i": 2})
        leased = q.lease(6, visibility_timeout=30)
        t.assertEqual({job.payload: job.meta for job in leased}, stored, "the worker sees it")
        running = RunningJob(next(j for j in leased if j.payload == "c"), q.backend,
                             clock=clock)
        running.set_meta({"step": 1})
        t.assertEqual(q.get(each[0].id).meta, {"i": 0, "step": 1}, "merged into it")

    def test_enqueue_many_refuses_bad_metadata_and_writes_nothing(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, _ = self.clocked()
        for bad, error in (([{"i": 0}], ValueError),  # one item for two payloads
                           ("text", TypeError), (5, TypeError), ([{1: "x"}, None], TypeError),
                           ([None, {"x": float("nan")}], SerializationError),
                           ({"x": "y" * 20000}, ValueError)):
            with t.subTest(meta=bad), t.assertRaises(error):
                q.enqueue_many(["a", "b"], meta=bad)
        t.assertEqual(q.stats().total, 0)
        t.assertEqual(q.enqueue_many([], meta=[]), [])

    def test_bad_metadata_at_enqueue_is_refused_and_writes_nothing(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, _ = self.clocked()
        for bad, error in (([1], TypeError), ({1: "x"}, TypeError),
                           ({"x": object()}, SerializationError),
                           ({"x": float("nan")}, SerializationError),
                           ({"x": "y" * 20000}, ValueError)):
            with t.subTest(meta=bad), t.assertRaises(error):
                q.enqueue("x", meta=bad)
        t.assertEqual(q.stats().total, 0)

    def test_metadata_at_enqueue_with_prerequisites(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, _ = self.clocked()
        if not q.capabilities.dependencies:
            t.skipTest("the backend has no dependencies")
        first = q.enqueue("first", max_attempts=1)
        waiting = q.enqueue("then", depends_on=[first.id], meta={"w": 1})
        t.assertEqual((waiting.state, waiting.meta), (JobState.WAITING, {"w": 1}))
        leased = q.lease_one()
        assert leased is not None
        q.nack(leased, error="boom")  # the dependent is cancelled in the same write
        t.assertEqual(q.get(waiting.id).state, JobState.CANCELLED)
        t.assertEqual(q.get(waiting.id).meta, {"w": 1})
        failed = q.enqueue("after the failure", depends_on=[first.id], meta={"c": 2})
        t.assertEqual((failed.state, failed.meta), (JobState.CANCELLED, {"c": 2}))
