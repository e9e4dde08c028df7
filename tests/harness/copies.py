"""What `nobroker migrate`'s tests on every target share: a source queue with a chord half
done, and the check that it finishes on the target; a source queue whose chain a death
cancelled (revivable), and the check that a requeue on the target revives it; a source
queue of limited jobs, and the check that their keys, caps and limits came along; a
source queue whose rate window is used up, and the check that it still is on the target
and lets jobs through once its period has passed.
"""

from __future__ import annotations

import time
import unittest
from typing import Any, cast

from nobroker import Job, JobState, Queue
from nobroker.dependencies import FAILURE, NO_FAILURE, GraphNode
from nobroker.transfer import transfer

__all__ = ["half_done_chord_in", "finish_chord", "dead_chain_in", "copy_and_revive",
           "limited_task", "limited_jobs_in", "check_limits_kept", "rated_task",
           "used_up_window_in", "check_window_kept", "an_hour_on"]


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


def limited_task(q: Queue) -> Any:
    """Task "send" on `q`: 100 starts a minute (rate key "send") and one job of each
    customer at a time (concurrency key "send" + NUL + the customer, cap 1)."""
    return q.task(name="send", rate_limit="100/m", concurrency=1,
                  concurrency_key=lambda customer: customer)(lambda customer: None)


def limited_jobs_in(directory: str, name: str) -> dict[str, str]:
    """A queue at `directory` of "send" jobs: two pending for "acme", one delayed an
    hour, one leased (for "held"), one dead (for "gone") and one waiting (for "wait")
    for the second of acme's. Their ids, by role."""
    with Queue(directory, name) as source:
        send = limited_task(source)
        gone = send.apply_async(("gone",), max_attempts=1).id
        (doomed,) = source.lease(1)
        source.nack(doomed, error="boom")
        ids = {"acme": send.delay("acme").id, "acme2": send.delay("acme").id,
               "delayed": send.apply_async(("later",), delay=3600).id,
               "held": send.delay("held").id, "gone": gone}
        ids["waiting"] = send.apply_async(("wait",), depends_on=ids["acme2"]).id
        leased = source.lease(5)  # acme's first and held's: one job of each customer
        assert sorted(j.id for j in leased) == sorted([ids["acme"], ids["held"]]), leased
    return ids


def check_limits_kept(test: unittest.TestCase, q: Queue, ids: dict[str, str],
                      dead: bool = True) -> None:
    """Where limited_jobs_in's jobs were copied (`q`, "send" declared on it): each kept
    its keys and cap, and one job of a customer is leased at a time (`dead`: the dead
    one came along, dead)."""
    limits = cast(Any, q.backend).export_limits()
    for role, job_id in ids.items():
        if role == "gone" and not dead:
            test.assertNotIn(job_id, limits)
            continue
        customer = {"acme2": "acme", "delayed": "later", "waiting": "wait"}.get(role, role)
        test.assertEqual(limits.get(job_id), (("send", f"send\x00{customer}"), 1), role)
    if dead:
        test.assertIs(q.get(ids["gone"]).state, JobState.DEAD)
        test.assertEqual(q.requeue_dead(ids["gone"]), 1)
    leased = q.lease(10)
    test.assertEqual(sorted(j.id for j in leased),
                     sorted(ids[r] for r in ("acme", "held", "gone")[:3 if dead else 2]),
                     "one job of each customer at a time, the delayed one not yet due")
    q.ack_many(leased)
    (second,) = q.lease(10)
    test.assertEqual(second.id, ids["acme2"])
    q.ack(second)
    test.assertEqual([j.id for j in q.lease(10)], [ids["waiting"]], "released, as it waited")


def rated_task(q: Queue) -> Any:
    """Task "call" on `q`: 2 starts an hour (rate key "call")."""
    return q.task(name="call", rate_limit="2/h")(lambda n: None)


def used_up_window_in(directory: str, name: str) -> list[str]:
    """A queue at `directory` of four "call" jobs, two of them leased (its window used
    up for the hour) and acked: the ids of the two left, pending."""
    with Queue(directory, name) as source:
        call = rated_task(source)
        ids = [call.delay(n).id for n in range(4)]
        leased = source.lease(10)
        assert [j.id for j in leased] == ids[:2], leased
        source.ack_many(leased)
    return ids[2:]


def an_hour_on() -> float:
    """A clock an hour and a second ahead of time.time: past used_up_window_in's window."""
    return time.time() + 3601.0


def check_window_kept(test: unittest.TestCase, q: Queue, later: Queue,
                      left: list[str]) -> None:
    """Where used_up_window_in's queue was copied (`q`, and `later`, a handle on it whose
    clock is an_hour_on): "call" declared, `q` leases nothing, its window still full
    with the source's two starts; `later` leases the two `left`."""
    rated_task(q)
    test.assertEqual(q.lease(10), [], "the window used up before the copy is full after it")
    (use,) = q.limit_use()
    test.assertEqual((use.key, use.used, use.limit), ("call", 2, 2))
    rated_task(later)
    test.assertEqual(sorted(j.id for j in later.lease(10)), sorted(left),
                     "once the hour has passed, the window lets the jobs left through")
