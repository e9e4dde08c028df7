"""tasks/lineage.py: a job's parents, children and chord progress, on memory:// and files
(and on PostgreSQL: test_postgres_dependencies.PostgresLineageTest).

What `nobroker get` and the dashboard's job page show (their own tests check the
shapes they print); here, that the lookup finds the same jobs on both backends
through the public Queue API: a chain, a chord, a plain depends_on, an on_error
handler, a job in no workflow, and the scan's bound.
"""

from __future__ import annotations

import itertools
import unittest
from collections.abc import Iterator
from typing import Any

from harness.support import TempDirTestCase

from nobroker import JobState, Queue, chain, chord
from nobroker.tasks.lineage import Lineage, lineage, named_parents

_sets = itertools.count()


class LineageTest(TempDirTestCase):
    finished_payload_kept = False  # the backend's get() hands a finished job's payload out

    def locations(self) -> list[str]:
        """Where the fresh queues are, one per backend."""
        return [f"memory://lineage-{next(_sets)}", str(self.tmp / f"q{next(_sets)}")]

    def _each(self) -> Iterator[tuple[Queue, Any, Any]]:
        """Each backend in turn: a fresh queue and its tasks add and tsum."""
        for location in self.locations():
            with Queue(location) as queue:

                @queue.task(name="add")
                def add(a: int, b: int) -> int:
                    return a + b

                @queue.task(name="tsum")
                def tsum(values: list[int]) -> int:
                    return sum(values)

                yield queue, add, tsum

    def look(self, queue: Queue, job_id: str, **options: Any) -> Lineage:
        return lineage(queue, queue.get(job_id), **options)

    def finish_next(self, queue: Queue, result: Any = 1) -> str:
        job = queue.lease_one()
        assert job is not None
        queue.ack(job, result=result)
        return job.id

    def test_a_chain_links_each_step_to_the_next_both_ways(self) -> None:
        for queue, add, _ in self._each():
            last = chain(add.s(1, 1), add.s(2), add.si(5, 5)).delay()
            first, middle = last.parent.parent.id, last.parent.id
            self.assertEqual(self.look(queue, first), Lineage((), (middle,)))
            self.assertEqual(self.look(queue, middle), Lineage((first,), (last.id,)))
            # .si receives nothing: its parent is known from waiting_for while it waits
            self.assertEqual(self.look(queue, last.id), Lineage((middle,), ()))
            self.assertEqual(self.finish_next(queue, 2), first)
            # released, the middle step still names its parent in its payload
            self.assertEqual(queue.get(middle).state, JobState.PENDING)
            self.assertEqual(self.look(queue, middle), Lineage((first,), (last.id,)))
            self.assertEqual(self.look(queue, first).children, (middle,))

    def test_a_chord_callback_has_every_member_as_parent_and_counts_them(self) -> None:
        for queue, add, tsum in self._each():
            callback = chord([add.s(i, i) for i in range(3)], tsum.s()).delay()
            members = tuple(r.id for r in callback.parent.results)
            self.assertEqual(self.look(queue, callback.id), Lineage(members, (), (0, 3)))
            for member in members:
                self.assertEqual(self.look(queue, member), Lineage((), (callback.id,)))
            self.finish_next(queue)
            self.finish_next(queue)
            self.assertEqual(self.look(queue, callback.id).progress, (2, 3))
            self.finish_next(queue)
            self.assertEqual(queue.get(callback.id).state, JobState.PENDING)
            self.assertEqual(self.look(queue, callback.id), Lineage(members, (), (3, 3)))

    def test_a_finished_step_forgets_its_parents_with_its_payload(self) -> None:
        for queue, add, tsum in self._each():
            callback = chord([add.s(i, i) for i in range(3)], tsum.s()).delay()
            members = [r.id for r in callback.parent.results]
            queue.cancel(members[2])
            cancelled = queue.get(callback.id)
            self.assertEqual((cancelled.state, cancelled.payload is not None),
                             (JobState.CANCELLED, self.finished_payload_kept))
            self.assertEqual(self.look(queue, callback.id), Lineage((), ()))
            # nor is it a child: its parents' pages no longer list it
            self.assertEqual(self.look(queue, members[0]), Lineage((), ()))
            self.assertIn(members[2], str(cancelled.last_error))

    def test_plain_depends_on_is_seen_while_the_dependent_waits(self) -> None:
        for queue, _, _ in self._each():
            first, second = queue.enqueue({"n": 1}), queue.enqueue({"n": 2})
            waiting = queue.enqueue({"n": 3}, depends_on=[first, second])
            self.assertEqual(self.look(queue, first.id), Lineage((), (waiting.id,)))
            self.assertEqual(self.look(queue, waiting.id),
                             Lineage((first.id, second.id), ()))
            self.finish_next(queue)
            # what it still waits for; the finished prerequisite is forgotten
            self.assertEqual(self.look(queue, waiting.id), Lineage((second.id,), ()))
            self.assertEqual(self.look(queue, first.id), Lineage((), ()))
            self.assertEqual(self.look(queue, second.id).children, (waiting.id,))

    def test_an_on_error_handler_names_the_steps_it_watches(self) -> None:
        for queue, add, _ in self._each():
            handler = add.si(0, 0)
            step = add.s(1, 1).on_error(handler).delay()
            found = [job for job in queue.list_jobs() if job.id != step.id]
            self.assertEqual(len(found), 1)
            self.assertEqual(self.look(queue, found[0].id).parents, (step.id,))
            self.assertEqual(self.look(queue, step.id).children, (found[0].id,))

    def test_a_job_in_no_workflow_has_no_lineage(self) -> None:
        for queue, add, _ in self._each():
            plain = queue.enqueue({"parents": ["x"], "n": 1})  # not a task payload
            task = add.delay(1, 2)
            for job_id in (plain.id, task.id):
                place = self.look(queue, job_id)
                self.assertFalse(place)
                self.assertEqual(place, Lineage((), ()))
            self.assertEqual(named_parents({"parents": ["x"]}), [])
            self.assertEqual(named_parents({"task": "t", "parents": ["a", ["b", "a"]]}),
                             ["a", "b"])
            self.assertEqual(named_parents({"task": "t", "parents": [1]}), [])

    def test_the_children_scan_is_bounded_and_says_so(self) -> None:
        for queue, _, _ in self._each():
            first, other = queue.enqueue({"n": 0}), queue.enqueue({"n": 1})
            queue.enqueue_many([{"n": i} for i in range(5)])  # pending: never read for
            for n in range(3):                               # an unfinished job
                queue.enqueue({"n": 10 + n}, depends_on=other)
            child = queue.enqueue({"n": 9}, depends_on=first)
            # an unfinished job has released no one: only waiting jobs are read, in
            # enqueue order, so a bound of 2 stops before the child
            cut = self.look(queue, first.id, scan_limit=2)
            self.assertEqual((cut.children, cut.complete), ((), False))
            self.assertFalse(cut.as_dict()["children_complete"])
            whole = self.look(queue, first.id, scan_limit=4)
            self.assertEqual((whole.children, whole.complete), ((child.id,), True))


if __name__ == "__main__":
    unittest.main()
