"""A chain's next step is leased in the write that acks the step before it (issue 22).

`Queue.ack_and_lease` of a job that was the last prerequisite of a waiting
step releases the step and leases it in one write (one batch, one fsync on
the file backend), so that a worker runs a chain of N steps in N writes, not
2N (the benchmark's chain_run row). The released step is one more candidate
for that lease, in the usual order (highest priority first, then oldest):
a ready job of higher priority still goes first, a step whose own delay= has
not passed is not taken, a paused queue leases nothing. On memory://, files
and, under `make.py test-postgres`, PostgreSQL (ack_and_lease.sql leases after
the ack's settle: nb_lease_next, migrations/0011).
"""

from __future__ import annotations

import itertools
import unittest
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from harness.postgres import ENABLED, drop_schema, fresh_schema_url
from harness.support import TempDirTestCase

from nobroker import Job, JobState, Queue, chain
from nobroker.file.inspection import current_log_path, read_records
from nobroker.worker import Worker

_names = itertools.count()


def batches_of(directory: Path) -> list[list[tuple[str, str]]]:
    """The (type, job id) of every record of the queue's log, batch by batch."""
    batches: list[list[tuple[str, str]]] = [[]]
    for raw in read_records(current_log_path(str(directory))):
        batches[-1].append((raw.type, raw.payload.get("id")))
        if not raw.more:
            batches.append([])
    return batches


class StepLeasingTest(TempDirTestCase):
    def _each(self) -> Iterator[tuple[Queue, Any, Path | None]]:
        """Each backend in turn: a fresh queue, its task add, and its directory (files);
        PostgreSQL too when the suite runs with a server."""
        locations: list[str | Path] = [f"memory://steps-{next(_names)}",
                                       self.tmp / f"q{next(_names)}"]
        if ENABLED:
            url = fresh_schema_url()
            self.addCleanup(drop_schema, url)
            locations.append(url)
        for location in locations:
            directory = location if isinstance(location, Path) else None
            with Queue(str(location)) as queue:

                @queue.task(name="add")
                def add(a: int, b: int = 0) -> int:
                    return a + b

                yield queue, add, directory

    def test_acking_a_steps_last_prerequisite_leases_the_step_in_the_same_write(self) -> None:
        for queue, add, directory in self._each():
            last = chain(add.s(1, 1), add.s(2)).delay()
            first = queue.lease_one()
            assert first is not None
            self.assertEqual(first.id, last.parent.id)
            following = queue.ack_and_lease(first, result=2)
            assert following is not None
            self.assertEqual((following.id, following.state), (last.id, JobState.LEASED))
            self.assertIsNone(queue.ack_and_lease(following, result=4))
            self.assertEqual(last.get(timeout=5), 4)
            if directory is None:
                continue
            self.assertIn([("ACK", first.id), ("RELEASE", last.id), ("LEASE", last.id)],
                          batches_of(directory))
            with Queue(str(directory)) as reopened:  # replay agrees with the writer
                self.assertEqual(reopened.get(last.id).state, JobState.DONE)
                self.assertEqual(reopened.result(last.id), 4)

    def test_a_ready_job_of_higher_priority_is_leased_before_the_released_step(self) -> None:
        for queue, add, _ in self._each():
            last = chain(add.s(1, 1), add.s(2)).delay()
            first = queue.lease_one()
            assert first is not None
            urgent = add.apply_async((7,), priority=5)
            following = queue.ack_and_lease(first, result=2)
            assert following is not None
            self.assertEqual(following.id, urgent.id)
            self.assertEqual(queue.get(last.id).state, JobState.PENDING)

    def test_a_released_step_of_higher_priority_goes_before_an_older_ready_job(self) -> None:
        for queue, add, _ in self._each():
            last = chain(add.s(1, 1).set(priority=9), add.s(2).set(priority=9)).delay()
            first = queue.lease_one()
            assert first is not None
            older = add.delay(7)
            following = queue.ack_and_lease(first, result=2)
            assert following is not None
            self.assertEqual(following.id, last.id)
            self.assertEqual(queue.get(older.id).state, JobState.PENDING)

    def test_an_older_ready_job_of_the_same_priority_goes_before_the_released_step(self
                                                                                  ) -> None:
        for queue, add, _ in self._each():
            older = add.delay(7)
            last = chain(add.s(1, 1).set(priority=1), add.s(2)).delay()
            first = queue.lease_one()
            assert first is not None and first.id == last.parent.id
            following = queue.ack_and_lease(first, result=2)
            assert following is not None
            self.assertEqual(following.id, older.id)
            self.assertEqual(queue.get(last.id).state, JobState.PENDING)

    def test_a_released_step_whose_own_delay_has_not_passed_is_not_leased(self) -> None:
        for queue, add, _ in self._each():
            last = chain(add.s(1, 1), add.s(2).set(countdown=3600)).delay()
            first = queue.lease_one()
            assert first is not None
            self.assertIsNone(queue.ack_and_lease(first, result=2))
            self.assertEqual(queue.get(last.id).state, JobState.PENDING)
            self.assertEqual(queue.lease(), [])

    def test_a_paused_queue_acks_but_leases_no_released_step(self) -> None:
        for queue, add, _ in self._each():
            last = chain(add.s(1, 1), add.s(2)).delay()
            first = queue.lease_one()
            assert first is not None
            queue.pause()
            self.assertIsNone(queue.ack_and_lease(first, result=2))
            self.assertEqual(queue.get(first.id).state, JobState.DONE)
            self.assertEqual(queue.get(last.id).state, JobState.PENDING)

    def test_a_worker_leases_only_a_chains_first_step_on_its_own(self) -> None:
        for queue, add, _ in self._each():
            last = chain([add.s(0, 1), *(add.s(1) for _ in range(19))]).delay()
            leased: list[str] = []
            queue.lease = _counting(queue.lease, leased)  # type: ignore[method-assign]
            Worker(queue, max_jobs=20, handle_signals=False).run()
            self.assertEqual(last.get(timeout=5), 20)
            self.assertEqual(leased, [_first_of(last)])


def _counting(lease: Callable[..., list[Job]], leased: list[str]
              ) -> Callable[..., list[Job]]:
    """`lease`, noting the id of each job it hands out in `leased`."""
    def counting_lease(*args: Any, **kwargs: Any) -> list[Job]:
        jobs = lease(*args, **kwargs)
        leased.extend(job.id for job in jobs)
        return jobs

    return counting_lease


def _first_of(result: Any) -> str:
    """The id of a chain's first step, from its last step's TaskResult."""
    while result.parent is not None:
        result = result.parent
    return str(result.id)


if __name__ == "__main__":
    unittest.main()
