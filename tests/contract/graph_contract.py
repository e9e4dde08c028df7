"""`Queue.enqueue_graph` and the dependency modes (docs/TASKS.md "Dependencies") as a
contract every backend with `capabilities.dependencies` passes: a graph written all
or nothing, in node order, nodes waiting for earlier nodes (by index) and for jobs
already queued (by id); modes "success", "any" and "failure". Mixed into
QueueContract (test_queue_contract.py), so it runs wherever that does.
"""

from __future__ import annotations

import unittest
from typing import Any

from harness.support import FakeClock

from nobroker import Job, JobNotFoundError, JobState, NobrokerError, Queue, SerializationError
from nobroker.dependencies import NO_FAILURE, GraphNode


class GraphContract:
    """Needs the QueueContract plumbing (clocked, needs) and DependencyContract's
    deps() and finish()."""

    def deps(self, **kwargs: Any) -> tuple[Queue, FakeClock]:
        raise NotImplementedError

    def clocked(self, **kwargs: Any) -> tuple[Queue, FakeClock]:
        raise NotImplementedError

    def finish(self, q: Queue, job: Job, *, fail: bool = False) -> None:
        raise NotImplementedError

    def run_next(self, q: Queue, *, fail: bool = False) -> Any:
        """Lease the next job and ack it with a result (so it stays readable), or nack it
        to death (max_attempts=1 in these tests); its payload."""
        leased = q.lease_one()
        assert leased is not None
        if fail:
            q.nack(leased, error="boom")
        else:
            q.ack(leased, result=leased.payload)
        return leased.payload

    def test_a_backend_without_dependencies_refuses_a_graph(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, _ = self.clocked()
        if q.capabilities.dependencies:
            t.skipTest("the backend has dependencies")
        with t.assertRaisesRegex(NobrokerError, "dependencies"):
            q.enqueue_graph([GraphNode("a")])
        t.assertEqual(q.stats().total, 0)

    def test_a_graph_is_enqueued_in_node_order_with_its_options(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, clock = self.deps()
        seen: list[str] = []
        q.on("enqueued", lambda job: seen.append(job.id))
        t.assertEqual(q.enqueue_graph([]), [])
        jobs = q.enqueue_graph([
            GraphNode({"n": 0}), GraphNode("one", priority=5), GraphNode("late", delay=30),
            GraphNode("keyed", job_id="my-key", max_attempts=2)])
        t.assertEqual([j.payload for j in jobs], [{"n": 0}, "one", "late", "keyed"])
        t.assertEqual([j.state for j in jobs], [JobState.PENDING] * 4)
        t.assertEqual(seen, [j.id for j in jobs], "the enqueued hook, once each, in order")
        t.assertEqual((jobs[3].id, jobs[3].max_attempts, jobs[0].max_attempts),
                      ("my-key", 2, q.max_attempts))
        t.assertEqual(len({j.id for j in jobs}), 4)
        t.assertEqual([self.run_next(q) for _ in range(3)], ["one", {"n": 0}, "keyed"])
        t.assertIsNone(q.lease_one(), "its own delay holds")
        clock.advance(30)
        t.assertEqual(self.run_next(q), "late")

    def test_nodes_wait_for_earlier_nodes_and_queued_jobs_and_run_after_them(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, _ = self.deps()
        queued = q.enqueue("queued")
        a, b, c, d = q.enqueue_graph([
            GraphNode("a"), GraphNode("b", (0,)), GraphNode("c", (0, queued.id)),
            GraphNode("d", (2, 1, 1))])  # a diamond; a duplicate dropped
        t.assertEqual((b.state, b.waiting_for), (JobState.WAITING, (a.id,)))
        t.assertEqual(c.waiting_for, (a.id, queued.id))
        t.assertEqual(d.waiting_for, (c.id, b.id), "in the order given")
        t.assertEqual((q.stats().waiting, q.stats().pending), (3, 2))
        order = [self.run_next(q) for _ in range(5)]
        t.assertEqual(order[-1], "d")
        t.assertLess(order.index("a"), order.index("b"))
        t.assertLess(order.index("queued"), order.index("c"))
        t.assertIsNone(q.lease_one())

    def test_bad_graphs_are_refused_before_anything_is_written(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, _ = self.deps()
        queued = q.enqueue("queued", job_id="taken")
        before = q.stats()
        bad: list[tuple[list[Any], type[Exception], str]] = [
            ([GraphNode("a"), GraphNode("b", (1,))], ValueError, "not an earlier node"),
            ([GraphNode("a"), GraphNode("b", (2,))], ValueError, "not an earlier node"),
            ([GraphNode("a", (-1,))], ValueError, "not an earlier node"),
            ([GraphNode("a", ("me",), job_id="me")], ValueError, "itself"),
            ([GraphNode("a", job_id="x"), GraphNode("b", ("x",))], ValueError, "index"),
            ([GraphNode("a", job_id="x"), GraphNode("b", job_id="x")], ValueError, "node 0"),
            ([GraphNode("a"), GraphNode("b", (0, "no-such-job"))], JobNotFoundError, "no-such"),
            ([GraphNode("a"), GraphNode(object())], SerializationError, "payload 1"),
            ([GraphNode("a", mode="sometimes")], ValueError, "mode"),
            ([GraphNode("a", (1.5,))], TypeError, "indexes"),
            ([GraphNode("a", 0)], TypeError, "tuple"),
            (["a"], TypeError, "GraphNode"),
            ([GraphNode("a", priority="high")], TypeError, "priority"),
            ([GraphNode("a"), GraphNode("b", job_id=queued.id)], NobrokerError, "already"),
        ]
        for nodes, error, needle in bad:
            with t.subTest(nodes=nodes), t.assertRaisesRegex(error, needle):
                q.enqueue_graph(nodes)
        t.assertEqual(q.stats(), before)
        t.assertEqual([j.id for j in q.list_jobs()], [queued.id])

    def test_a_dead_prerequisite_cancels_success_nodes_down_the_graph(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, _ = self.deps(max_attempts=1)
        a, b, c, d = q.enqueue_graph([GraphNode("a"), GraphNode("b", (0,)),
                                      GraphNode("c", (1,)), GraphNode("d", (1,), mode="any")])
        self.run_next(q, fail=True)
        got = [q.get(j.id) for j in (b, c, d)]
        t.assertEqual([j.state for j in got],
                      [JobState.CANCELLED, JobState.CANCELLED, JobState.PENDING])
        t.assertIn(a.id, got[0].last_error or "")
        t.assertIn(b.id, got[1].last_error or "")
        t.assertEqual(self.run_next(q), "d", "mode any runs whatever became of b")

    def test_a_graph_on_an_already_failed_job_is_settled_in_its_one_write(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, _ = self.deps(max_attempts=1)
        dead = q.enqueue("dead")
        self.run_next(q, fail=True)
        a, b, c, d = q.enqueue_graph([
            GraphNode("a", (dead.id,)), GraphNode("b", (0,)),
            GraphNode("c", (1,), mode="any"), GraphNode("d", (dead.id,), mode="failure")])
        t.assertEqual([j.state for j in (a, b, c, d)],
                      [JobState.CANCELLED, JobState.CANCELLED, JobState.PENDING,
                       JobState.PENDING])
        t.assertIn(dead.id, a.last_error or "")
        t.assertIn(a.id, q.get(b.id).last_error or "")
        t.assertEqual(sorted([self.run_next(q), self.run_next(q)]), ["c", "d"])

    def test_a_failure_node_is_released_by_the_first_death_and_runs_once(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, _ = self.deps(max_attempts=1)
        _, _, c, handler = q.enqueue_graph([
            GraphNode("a"), GraphNode("b"), GraphNode("c", (0,)),
            GraphNode("handler", (0, 1, 2), mode="failure")])
        t.assertEqual(handler.state, JobState.WAITING)
        t.assertEqual(self.run_next(q, fail=True), "a")
        got = q.get(handler.id)
        t.assertEqual(got.state, JobState.PENDING, "released though b has not finished")
        t.assertEqual(q.get(c.id).state, JobState.CANCELLED)
        t.assertEqual(q.stats().waiting, 0)
        t.assertEqual(self.run_next(q, fail=True), "b")  # a second death: no second run
        t.assertEqual(self.run_next(q), "handler")
        t.assertIsNone(q.lease_one())

    def test_a_failure_node_is_cancelled_once_all_finished_without_a_death(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, _ = self.deps(max_attempts=1)
        a, b, handler = q.enqueue_graph([GraphNode("a"), GraphNode("b"),
                                         GraphNode("h", (0, 1), mode="failure")])
        t.assertTrue(q.cancel(b.id), "a cancel is not a death")
        t.assertEqual(q.get(handler.id).state, JobState.WAITING)
        self.run_next(q)
        got = q.get(handler.id)
        t.assertEqual((got.state, got.last_error), (JobState.CANCELLED, NO_FAILURE))
        t.assertIsNone(q.lease_one())
        done = q.enqueue_graph([GraphNode("late", (a.id,), mode="failure")])[0]
        t.assertEqual((done.state, done.last_error), (JobState.CANCELLED, NO_FAILURE))

    def test_a_failure_node_after_a_success_node_follows_the_cascade(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, _ = self.deps(max_attempts=1)
        # on_error over a chain: a dies, b is cancelled by the cascade, h runs once.
        _, b, h = q.enqueue_graph([GraphNode("a"), GraphNode("b", (0,)),
                                   GraphNode("h", (0, 1), mode="failure")])
        self.run_next(q, fail=True)
        t.assertEqual((q.get(b.id).state, q.get(h.id).state),
                      (JobState.CANCELLED, JobState.PENDING))
        t.assertEqual(self.run_next(q), "h")

    def test_a_failure_node_survives_compaction(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, _ = self.deps(max_attempts=1)
        *_, h = q.enqueue_graph([GraphNode("a"), GraphNode("b", (0,)),
                                 GraphNode("h", (0, 1), mode="failure")])
        q.compact()
        self.run_next(q, fail=True)
        t.assertEqual(q.get(h.id).state, JobState.PENDING)
        _, y = q.enqueue_graph([GraphNode("x"), GraphNode("y", (0,), mode="failure")])
        q.compact()
        self.run_next(q)  # h
        self.run_next(q)  # x succeeds: y is cancelled
        t.assertEqual(q.get(y.id).last_error, NO_FAILURE)
