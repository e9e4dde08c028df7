"""What `nobroker migrate`'s tests on every target share: a source queue with a chord half
done, and the check that it finishes on the target; a source queue whose chain a death
cancelled (revivable), and the check that a requeue on the target revives it.
"""

from __future__ import annotations

import unittest

from nobroker import Job, JobState, Queue
from nobroker.dependencies import FAILURE, NO_FAILURE, GraphNode
from nobroker.transfer import transfer

__all__ = ["half_done_chord_in", "finish_chord", "dead_chain_in", "copy_and_revive"]


def half_done_chord_in(directory: str, name: str) -> list[Job]:
    """A queue at `directory`: four members, a callback waiting for them all and an
    on_error handler (mode "failure") for the last; the first two members acked.
    [callback, handler, *members]."""
    with Queue(directory, name) as source:
        members = source.enqueue_many([{"m": i} for i in range(4)])
        callback, handler = source.enqueue_graph([
            GraphNode("callback", tuple(m.id for m in members)),
            GraphNode("notify", (members[3].id,), mode=FAILURE)])
        for job in source.lease(2):
            source.ack(job, result=job.payload)
    return [callback, handler, *members]


def finish_chord(test: unittest.TestCase, q: Queue, jobs: list[Job]) -> None:
    """Where half_done_chord_in's `jobs` were copied: the callback waits for the two
    members left, runs after them, and the handler, its mode kept, is cancelled."""
    callback, handler, *members = jobs
    got = q.get(callback.id)
    test.assertEqual((got.state, got.waiting_for),
                     (JobState.WAITING, (members[2].id, members[3].id)))
    q.ack_many(q.lease(5))  # the members left
    test.assertEqual(q.get(callback.id).state, JobState.PENDING)
    test.assertEqual((q.get(handler.id).state, q.get(handler.id).last_error),
                     (JobState.CANCELLED, NO_FAILURE), "its mode came along")
    test.assertEqual([j.payload for j in q.lease(5)], ["callback"])


def dead_chain_in(directory: str, name: str) -> list[Job]:
    """A queue at `directory`: a (one attempt) and x, b waiting for both, c for b; then
    a dies, and b and c are cancelled, revivable. [a, x, b, c] as enqueued."""
    with Queue(directory, name) as source:
        a = source.enqueue("a", max_attempts=1)
        x = source.enqueue("x")
        b = source.enqueue({"step": "b"}, depends_on=[a, x])
        c = source.enqueue("c", depends_on=b)
        (leased,) = source.lease(1)
        source.nack(leased, error="boom")
    return [a, x, b, c]


def copy_and_revive(test: unittest.TestCase, directory: str, target: Queue,
                    location: str) -> None:
    """Copy dead_chain_in(directory, target's name) to `location` (`target` is a queue
    there), twice (nothing twice); then a requeue of a there revives b and c, and
    the four run in order."""
    a, x, b, c = dead_chain_in(directory, target.name)
    report = transfer(directory, location, target.name)
    test.assertEqual(report.copied, {"pending": 1, "dead": 1, "cancelled": 2})
    test.assertEqual(transfer(directory, location, target.name).skipped, 4)
    test.assertEqual(target.get(c.id).state, JobState.CANCELLED)
    test.assertEqual(target.requeue_dead(a.id), 1)
    got = target.get(b.id)
    test.assertEqual((got.state, got.waiting_for, got.payload),
                     (JobState.WAITING, (x.id, a.id), {"step": "b"}))
    test.assertEqual(target.get(c.id).waiting_for, (b.id,))
    for step in ([a.id, x.id], [b.id], [c.id]):
        leased = target.lease(5)
        test.assertEqual(sorted(j.id for j in leased), sorted(step))
        target.ack_many(leased)
