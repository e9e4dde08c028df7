"""The canvas (docs/WORKFLOWS.md) as a contract every backend with
`capabilities.dependencies` passes: chain, group, chord, on_error and cancel, run
by a real in-process Worker, and every failure rule of the semantics table.
Mixed into QueueContract (test_queue_contract.py), so it runs wherever that
does: files, memory://, and PostgreSQL once it has the capability (skipped
until then).
"""

from __future__ import annotations

import asyncio
import threading
import unittest
from typing import Any

from nobroker import (
    GroupResult,
    JobState,
    NobrokerError,
    NotLeasedError,
    Queue,
    Retry,
    SerializationError,
    TaskFailed,
    Worker,
    chain,
    chord,
    group,
)
from nobroker.tasks import Task, TaskResult


class Tasks:
    """The tasks of one test's queue, and what the handlers saw."""

    def __init__(self, q: Queue) -> None:
        self.errors: list[dict[str, Any]] = []
        self.ran: list[str] = []

        @q.task(name="add")
        def add(x: Any, y: Any = 0) -> Any:
            self.ran.append("add")
            return x + y

        @q.task(name="tsum")
        def tsum(numbers: list[int]) -> int:
            self.ran.append("tsum")
            return sum(numbers)

        @q.task(name="echo")
        def echo(*args: Any) -> list[Any]:
            self.ran.append("echo")
            return list(args)

        @q.task(name="boom", max_attempts=1)
        def boom(*args: Any) -> None:
            self.ran.append("boom")
            raise ValueError("boom")

        @q.task(name="notify")
        def notify(*args: Any, job_id: str, error: str) -> None:
            self.ran.append("notify")
            self.errors.append({"args": list(args), "job_id": job_id, "error": error})

        self.add: Task[Any, Any] = add
        self.tsum: Task[Any, Any] = tsum
        self.echo: Task[Any, Any] = echo
        self.boom: Task[Any, Any] = boom
        self.notify: Task[Any, Any] = notify


class WorkflowContract:
    """Needs the QueueContract plumbing: queue(), needs()."""

    def queue(self, **kwargs: Any) -> Queue:
        raise NotImplementedError

    def needs(self, q: Queue, capability: str) -> None:
        raise NotImplementedError

    def workflow_queue(self) -> tuple[Queue, Tasks]:
        q = self.queue()
        self.needs(q, "dependencies")
        return q, Tasks(q)

    def drain(self, q: Queue) -> None:
        """Run every job there is (and every job they release) with a Worker, then stop."""
        Worker(q, handle_signals=False, idle_timeout=0.3, poll_interval=0.01).run()

    # -- chains ---------------------------------------------------------------

    def test_a_chain_passes_each_result_to_the_next_step(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, tasks = self.workflow_queue()
        add = tasks.add
        result = chain(add.s(2, 2), add.s(4), add.s(8)).delay()
        also = (add.s(1, 1) | add.s(1)).delay()
        self.drain(q)
        t.assertEqual((result.get(timeout=5), also.get(timeout=5)), (16, 3))
        t.assertIsInstance(result, TaskResult)
        t.assertEqual(result.parent.get(timeout=0), 8)
        t.assertEqual(result.parent.parent.get(timeout=0), 4)
        t.assertIsNone(result.parent.parent.parent, "the first step has no parent")

    def test_an_immutable_step_ignores_the_previous_result(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, tasks = self.workflow_queue()
        result = (tasks.add.s(1, 1) | tasks.echo.si("fresh")).delay()
        self.drain(q)
        t.assertEqual(result.get(timeout=5), ["fresh"])

    def test_a_lone_signature_is_a_plain_task_job_on_every_backend(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q = self.queue()  # no dependencies needed: it is enqueued as task.delay would
        tasks = Tasks(q)
        result = tasks.add.s(2).delay(40)  # partial arguments go in front
        t.assertEqual(q.get(result.id).payload, {"task": "add", "args": [40, 2], "kwargs": {}})
        self.drain(q)
        t.assertEqual(result.get(timeout=5), 42)

    def test_a_dead_step_cancels_the_rest_and_get_names_it_and_its_task(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, tasks = self.workflow_queue()
        result = chain(tasks.add.s(1, 1), tasks.boom.s(), tasks.add.s(1), tasks.add.s(1)).delay()
        self.drain(q)
        dead = result.parent.parent
        with t.assertRaises(TaskFailed) as caught:
            result.get(timeout=5)
        t.assertEqual((caught.exception.job_id, caught.exception.task, caught.exception.state),
                      (dead.id, "boom", "dead"))
        t.assertIn("ValueError: boom", caught.exception.last_error or "")
        t.assertEqual((result.state, result.parent.state), (JobState.CANCELLED,) * 2)
        t.assertIn(dead.id, q.get(result.parent.id).last_error or "",
                   "a cancelled dependent's last_error names the prerequisite")
        t.assertEqual(tasks.ran, ["add", "boom"])

    def test_non_json_arguments_are_refused_at_delay_and_nothing_is_written(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, tasks = self.workflow_queue()
        with t.assertRaises(SerializationError):
            tasks.add.s(object())
        first = tasks.add.s(1)
        with t.assertRaises(SerializationError):
            first.delay(object())
        with t.assertRaises(ValueError):  # two nodes with one job id: all or nothing
            chain(tasks.add.s(1, 1), tasks.add.s(1).set(job_id="x"),
                  tasks.add.s(1).set(job_id="x")).delay()
        t.assertEqual(q.stats().total, 0)

    # -- groups ---------------------------------------------------------------

    def test_a_group_result_lists_member_results_in_member_order(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, tasks = self.workflow_queue()
        result = group(tasks.add.s(i, i) for i in range(5)).delay()
        t.assertIsInstance(result, GroupResult)
        t.assertEqual((result.ready(), result.completed_count(), len(result.results)),
                      (False, 0, 5))
        with t.assertRaises(TimeoutError):
            result.get(timeout=0.05)
        self.drain(q)
        t.assertEqual(result.get(timeout=5), [0, 2, 4, 6, 8])
        t.assertEqual((result.ready(), result.completed_count()), (True, 5))

    def test_an_empty_group_is_an_empty_list_at_once(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, _ = self.workflow_queue()
        result = group([]).delay()
        t.assertEqual((result.get(timeout=0), result.ready(), q.stats().total), ([], True, 0))

    def test_a_group_member_that_dies_fails_the_group_and_not_its_siblings(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, tasks = self.workflow_queue()
        result = group(tasks.add.s(1, 1), tasks.boom.s(), tasks.add.s(2, 2)).delay()
        self.drain(q)
        with t.assertRaises(TaskFailed) as caught:
            result.get(timeout=5)
        t.assertEqual(caught.exception.job_id, result.results[1].id)
        t.assertEqual((result.completed_count(), result.ready()), (2, True))

    # -- chords ---------------------------------------------------------------

    def test_a_chord_callback_receives_the_header_results_in_member_order(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, tasks = self.workflow_queue()
        result = chord([tasks.echo.s(i) for i in range(4)], tasks.echo.s("end")).delay()
        called = chord(tasks.add.s(i, i) for i in range(3))(tasks.tsum.s())
        self.drain(q)
        t.assertEqual(result.get(timeout=5), [[[0], [1], [2], [3]], "end"])
        t.assertEqual(called.get(timeout=5), 6)
        t.assertIsInstance(called.parent, GroupResult)
        t.assertEqual(called.parent.get(timeout=0), [0, 2, 4])

    def test_an_empty_header_runs_the_callback_with_an_empty_list(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, tasks = self.workflow_queue()
        empty = chord([], tasks.tsum.s()).delay()
        one = chord([tasks.add.s(5, 5)], tasks.tsum.s()).delay()
        self.drain(q)
        t.assertEqual((empty.get(timeout=5), one.get(timeout=5)), (0, 10))

    def test_a_dead_member_cancels_the_callback_and_get_names_the_member(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, tasks = self.workflow_queue()
        result = chord([tasks.add.s(1, 1), tasks.boom.s(), tasks.add.s(2, 2)],
                       tasks.tsum.s()).delay()
        self.drain(q)
        with t.assertRaises(TaskFailed) as caught:
            result.get(timeout=5)
        t.assertEqual((caught.exception.job_id, caught.exception.task),
                      (result.parent.results[1].id, "boom"))
        t.assertNotIn("tsum", tasks.ran)

    def test_a_member_retried_then_succeeding_lets_the_callback_run(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, tasks = self.workflow_queue()
        tries: list[int] = []

        @q.task(name="flaky", max_attempts=3)
        def flaky() -> int:
            tries.append(1)
            if len(tries) < 2:
                raise Retry("not yet", delay=0.01)
            return 7

        result = chord([flaky.s(), tasks.add.s(1, 1)], tasks.tsum.s()).delay()
        self.drain(q)
        t.assertEqual((result.get(timeout=5), len(tries)), (9, 2))

    def test_a_requeue_of_a_dead_member_resumes_the_chord_and_the_chain_after_it(self
                                                                                ) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, tasks = self.workflow_queue()
        self.needs(q, "revival")
        first_time = [True]

        @q.task(name="once", max_attempts=1)
        def once(x: int) -> int:
            if first_time:
                first_time.pop()
                raise ValueError("not this time")
            return x

        result = chord([tasks.add.s(1, 1), once.s(5)], tasks.tsum.s() | tasks.add.s(100)).delay()
        self.drain(q)
        with t.assertRaises(TaskFailed):
            result.get(timeout=5)
        t.assertEqual(q.requeue_dead(), 1)  # the callback and the step after it wait again
        self.drain(q)
        t.assertEqual(result.get(timeout=5), 107)
        t.assertEqual(tasks.ran.count("tsum"), 1)

    # -- nesting --------------------------------------------------------------

    def test_signatures_nest_as_in_celery(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, tasks = self.workflow_queue()
        add, tsum = tasks.add, tasks.tsum
        chains_in_group = group(add.s(1, 1) | add.s(10), add.s(2, 2) | add.s(20)).delay()
        group_in_chain = (add.s(1, 1) | group(add.s(1), add.s(2)) | tsum.s()).delay()
        ends_in_group = (add.s(3, 3) | group(add.s(1), add.s(2))).delay()
        chain_callback = chord([add.s(1, 1), add.s(2, 2)], tsum.s() | add.s(100)).delay()
        self.drain(q)
        t.assertEqual(chains_in_group.get(timeout=5), [12, 24])
        t.assertEqual(group_in_chain.get(timeout=5), 7)
        t.assertIsInstance(ends_in_group, GroupResult)
        t.assertEqual(ends_in_group.get(timeout=5), [7, 8])
        t.assertEqual(ends_in_group.parent.get(timeout=0), 6)
        t.assertEqual(chain_callback.get(timeout=5), 106)
        t.assertIsInstance(chain_callback.parent.parent, GroupResult)

    # -- on_error ---------------------------------------------------------------

    def test_on_error_runs_once_with_the_dead_jobs_id_and_error(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, tasks = self.workflow_queue()
        handler = tasks.notify.s("ops")
        result = chain(tasks.add.s(1, 1), tasks.add.s(1).on_error(handler), tasks.boom.s(),
                       tasks.add.s(1)).delay()
        self.drain(q)
        dead = result.parent
        t.assertEqual(len(tasks.errors), 1)
        t.assertEqual(tasks.errors[0]["args"], ["ops"])
        t.assertEqual(tasks.errors[0]["job_id"], dead.id)
        t.assertIn("ValueError: boom", tasks.errors[0]["error"])

    def test_on_error_runs_once_when_several_members_die(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, tasks = self.workflow_queue()
        result = group(tasks.boom.s(1), tasks.boom.s(2), tasks.add.s(1, 1)).on_error(
            tasks.notify.s()).delay()
        self.drain(q)
        t.assertEqual(len(tasks.errors), 1)
        t.assertIn(tasks.errors[0]["job_id"], [r.id for r in result.results[:2]])

    def test_on_error_does_not_run_when_nothing_dies_or_for_a_cancel(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, tasks = self.workflow_queue()
        fine = (tasks.add.s(1, 1) | tasks.add.s(1)).on_error(tasks.notify.s()).delay()
        cancelled = (tasks.add.s(1, 1) | tasks.add.s(1)).on_error(tasks.notify.s()).delay()
        t.assertTrue(cancelled.cancel())
        self.drain(q)
        t.assertEqual(fine.get(timeout=5), 3)
        t.assertEqual((tasks.errors, tasks.ran), ([], ["add", "add"]))
        t.assertEqual(q.stats().waiting, 0, "the handlers were settled (cancelled)")

    # -- cancel ---------------------------------------------------------------

    def test_cancelling_a_chain_cancels_every_step_not_finished_the_running_one_too(
            self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, tasks = self.workflow_queue()
        result = chain(tasks.add.s(1, 1), tasks.add.s(1), tasks.add.s(1)).delay()
        running = q.lease_one()  # the first step, as a worker holds it
        assert running is not None
        t.assertTrue(result.cancel())
        with t.assertRaises(NotLeasedError):
            q.ack(running, result=2)
        steps = [result, result.parent, result.parent.parent]
        t.assertEqual([s.state for s in steps], [JobState.CANCELLED] * 3)
        t.assertFalse(result.cancel(), "nothing left to cancel")
        with t.assertRaises(TaskFailed):
            result.get(timeout=0)

    def test_cancelling_a_group_or_chord_cancels_its_unfinished_jobs(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, tasks = self.workflow_queue()
        members = group(tasks.add.s(1, 1), tasks.add.s(2, 2)).delay()
        callback = chord([tasks.add.s(1, 1)], tasks.tsum.s()).delay()
        t.assertTrue(members.cancel())
        t.assertTrue(callback.cancel())
        self.drain(q)
        t.assertEqual(tasks.ran, [])
        t.assertEqual(q.stats().pending + q.stats().waiting, 0)

    # -- asyncio --------------------------------------------------------------

    def test_adelay_and_aget(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q, tasks = self.workflow_queue()

        async def main() -> tuple[Any, Any]:
            result = await (tasks.add.s(1, 1) | tasks.add.s(1)).adelay()
            members = await group(tasks.add.s(1, 1), tasks.add.s(2, 2)).adelay()
            worker = threading.Thread(target=self.drain, args=(q,))
            worker.start()
            try:
                return await result.aget(timeout=5), await members.aget(timeout=5)
            finally:
                await asyncio.to_thread(worker.join)

        t.assertEqual(asyncio.run(main()), (3, [2, 4]))

    def test_a_backend_without_dependencies_refuses_a_workflow_with_a_clear_error(
            self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        q = self.queue()
        if q.capabilities.dependencies:
            t.skipTest("the backend has dependencies")
        tasks = Tasks(q)
        with t.assertRaisesRegex(NobrokerError, "dependencies"):
            (tasks.add.s(1, 1) | tasks.add.s(1)).delay()
        t.assertEqual(q.stats().total, 0)
