"""A short kill -9 soak in the normal suite, and proof that its audit has teeth.

tests/harness/soak/ holds the machinery and its theory; tools/torture/run.py runs the
long soaks. Here: about ten seconds of two producers, two workers and a
compactor on one queue with a process `kill -9`ed every second or so, then
the Jepsen-style audit (lost, double-acked, resurrected, unexpected, lease
overlaps, unexplained duplicates, stats against logs) must come out clean.
The teeth tests feed the audit hand-written logs that break each rule once.
"""

from __future__ import annotations

import os
import unittest

from harness import soak
from harness.support import TempDirTestCase

import nobroker
from nobroker.dependencies import GraphNode


class ShortSoakTest(TempDirTestCase):
    def test_two_producers_two_workers_and_kill_9_lose_nothing(self) -> None:
        cfg = soak.SoakConfig(seconds=9.0, producers=2, workers=2, kill_every=(0.5, 1.2),
                              seed=int.from_bytes(os.urandom(2), "little"))
        report = soak.run_soak(cfg, str(self.tmp))
        detail = f"seed {cfg.seed}: {report.summary()}\n" + "\n".join(report.problems[:20])
        self.assertEqual(report.problems, [], detail)
        self.assertGreaterEqual(sum(report.kills.values()), 4, detail)
        self.assertGreater(report.enqueued, 200, detail)
        self.assertGreater(report.acked, 200, detail)
        self.assertGreaterEqual(report.compactions, 1, detail)
        self.assertGreater(report.results, 0, detail)  # acks with results, each checked
        self.assertGreater(report.graphs, 0, detail)  # chords and chains, each checked
        self.assertEqual((report.lost, report.double_acked, report.resurrected,
                          report.unexpected, report.overlaps, report.unexplained,
                          report.early), (0, 0, 0, 0, 0, 0, 0), detail)


class AuditTeethTest(TempDirTestCase):
    """Each rule, broken once in hand-written logs, is reported."""

    VT = 1.5

    def setUp(self) -> None:
        super().setUp()
        self.queue = str(self.tmp / "queue")
        self.logs = self.tmp / "logs"
        self.logs.mkdir()
        self.lines: dict[int, list[str]] = {}

    def log(self, pid: int, *fields: object) -> None:
        self.lines.setdefault(pid, []).append("\t".join(map(str, fields)))

    def audit(self, killed: frozenset[int] = frozenset()) -> soak.SoakReport:
        for pid, lines in self.lines.items():
            (self.logs / f"x0-{pid}.log").write_text("\n".join(lines) + "\n")
        cfg = soak.SoakConfig(visibility_timeout=self.VT)
        return soak.audit(self.queue, str(self.logs), set(killed), cfg)

    def done_job(self, tag: str, pid: int = 10) -> str:
        """A job enqueued, leased and acked for real, logged correctly."""
        with nobroker.Queue(self.queue) as q:
            self.log(pid, "try", tag, "-")
            job = q.enqueue({"tag": tag})
            self.log(pid, "ok", tag, job.id)
            held = q.lease_one(visibility_timeout=self.VT)
            assert held is not None and held.id == job.id
            self.log(pid + 1, "start", held.id, held.token, tag, repr(held.lease_expires_at))
            self.log(pid + 1, "acking", held.id, held.token)
            q.ack(held)
            self.log(pid + 1, "acked", held.id, held.token)
            return job.id

    def test_a_clean_history_passes(self) -> None:
        self.done_job("a")
        report = self.audit()
        self.assertEqual(report.problems, [])
        self.assertEqual((report.enqueued, report.acked, report.deliveries), (1, 1, 1))

    def test_lost(self) -> None:
        self.done_job("a")
        self.log(10, "try", "b", "-")
        self.log(10, "ok", "b", "ffff0000ffff0000")
        report = self.audit()
        self.assertEqual(report.lost, 1, report.problems)

    def test_double_acked(self) -> None:
        job = self.done_job("a")
        self.log(11, "acked", job, 99)
        self.assertEqual(self.audit().double_acked, 1)

    def test_resurrected(self) -> None:
        job = self.done_job("a")
        self.log(11, "start", job, 99, "a", "1e12")
        self.assertGreaterEqual(self.audit().resurrected, 1)

    def test_unexpected(self) -> None:
        self.done_job("a")
        with nobroker.Queue(self.queue) as q:
            job = q.enqueue({"tag": "nobody"})
            q.nack(q.lease_one(), delay=0) if False else None  # stays pending
        report = self.audit()
        self.assertEqual(report.unexpected, 1, report.problems)
        self.assertTrue(any(job.id in p for p in report.problems))

    def test_unexplained_duplicate_and_lease_overlap(self) -> None:
        job = self.done_job("a")
        self.log(12, "start", job, 0, "a", 100.0)  # an earlier delivery, holder alive
        report = self.audit()
        self.assertEqual(report.unexplained, 1, report.problems)
        self.assertEqual(report.overlaps, 0)
        self.log(12, "start", job, -1, "a", "1e12")  # and one whose lease outlives the next
        report = self.audit()
        self.assertGreaterEqual(report.overlaps, 1, report.problems)

    def test_a_killed_holder_explains_a_duplicate(self) -> None:
        job = self.done_job("a")
        self.log(12, "start", job, 0, "a", 100.0)
        report = self.audit(killed=frozenset({12}))
        self.assertEqual(report.unexplained, 0, report.problems)
        self.assertEqual(report.problems, [])

    def test_stats_must_agree_with_the_logs(self) -> None:
        self.done_job("a")
        with nobroker.Queue(self.queue) as q:  # an ack nobody logged
            self.log(10, "try", "c", "-")
            job = q.enqueue({"tag": "c"})
            held = q.lease_one()
            assert held is not None
            q.ack(held)
        report = self.audit()
        self.assertTrue(any("stats.done" in p or job.id in p for p in report.problems),
                        report.problems)

    def test_a_result_or_a_cancel_that_returned_must_be_kept(self) -> None:
        job = self.done_job("a")
        self.lines[11][-1] += "\tresult"  # the log says: acked with a result (it was not)
        with nobroker.Queue(self.queue) as q:
            self.log(10, "try", "b", "-")
            other = q.enqueue({"tag": "b"})
            self.log(10, "ok", "b", other.id)
            self.log(10, "cancelling", other.id)
            self.log(10, "cancelled", other.id, "yes")  # it was not: still pending
        problems = self.audit().problems
        self.assertTrue(any(p.startswith("result lost") and job in p for p in problems),
                        problems)
        self.assertTrue(any(p.startswith("cancel lost") and other.id in p for p in problems),
                        problems)

    def test_a_cancel_nobody_asked_for_is_reported(self) -> None:
        self.done_job("a")
        with nobroker.Queue(self.queue) as q:
            self.log(10, "try", "b", "-")
            job = q.enqueue({"tag": "b"})
            self.log(10, "ok", "b", job.id)
            q.cancel(job.id)  # nobody logged trying
        problems = self.audit().problems
        self.assertTrue(any("nobody cancelled" in p for p in problems), problems)

    def test_a_rated_start_too_many_in_a_window_is_reported(self) -> None:
        count, period = soak.roles.RATE
        for n in range(count + 1):  # all within one period
            self.done_job(f"r{n}{soak.roles.RATED}", pid=10 + 2 * n)
        problems = self.audit().problems
        self.assertTrue(any(p.startswith("rate limit broken") for p in problems), problems)
        self.assertGreater(period, 0)  # the starts above came within well under it


if __name__ == "__main__":
    unittest.main()

    def test_a_dependent_delivered_before_its_prerequisites_ack_is_reported(self) -> None:
        with nobroker.Queue(self.queue) as q:
            self.log(10, "after", "cb", "m")
            self.log(10, "trygraph", "m", "cb")
            member, callback = q.enqueue_graph([GraphNode({"tag": "m"}),
                                                GraphNode({"tag": "cb"}, (0,))])
            self.log(10, "okgraph", f"m={member.id}", f"cb={callback.id}")
            for tag in ("m", "cb"):
                held = q.lease_one(visibility_timeout=self.VT)
                assert held is not None and held.payload == {"tag": tag}
                self.log(11, "start", held.id, held.token, tag, repr(held.lease_expires_at))
                self.log(11, "acking", held.id, held.token)
                q.ack(held)
                self.log(11, "acked", held.id, held.token)
        report = self.audit()
        self.assertEqual((report.problems, report.graphs), ([], 1))
        self.log(12, "start", callback.id, 0, "cb", 100.0)  # before m's lease: too early
        report = self.audit(killed=frozenset({12}))
        self.assertEqual(report.early, 1, report.problems)
        self.log(10, "trygraph", "lonely", "cb")  # a graph only half there
        self.assertTrue(any(p.startswith("graph torn") for p in self.audit().problems))
