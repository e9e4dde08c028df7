"""tools/bench/scaling.py: what the workers and mixed rows (and bench-peers' drain) count.

The rate is the steady state (start-up and tail left out), a job run twice
counts as a duplicate, a job never run fails the round, and a real drain by
two Worker processes runs every job once.
"""

from __future__ import annotations

import unittest

from harness.support import TempDirTestCase

import tools.bench.scaling as bench_scaling


class SteadyRateTest(unittest.TestCase):
    def test_slow_start_and_tail_do_not_count(self) -> None:
        # 100 jobs 1 ms apart, after 5 that took a second to start and before 5 that
        # trickled out over a second (processes finding the queue empty).
        starts = [i * 0.2 for i in range(5)]
        starts += [1.0 + i * 0.001 for i in range(100)]
        starts += [1.1 + i * 0.2 for i in range(1, 6)]
        self.assertAlmostEqual(bench_scaling.steady_rate(starts), 1000.0, delta=20.0)

    def test_too_few_calls_is_an_error_not_a_rate(self) -> None:
        with self.assertRaises(RuntimeError):
            bench_scaling.steady_rate([0.0, 1.0, 2.0])


class DrainOutcomeTest(TempDirTestCase):
    def record(self, values: list[int]) -> None:
        for value in values:
            bench_scaling.record(str(self.tmp), float(value))

    def test_a_job_run_twice_is_counted_as_a_duplicate(self) -> None:
        self.record([*range(20), 3, 7])
        outcome = bench_scaling.drain_outcome(self.tmp, 20)
        self.assertEqual((outcome.jobs, outcome.duplicates), (22, 2))

    def test_a_job_never_run_fails_the_drain(self) -> None:
        self.record(list(range(19)))
        with self.assertRaisesRegex(RuntimeError, "19 distinct jobs ran, 20 were queued"):
            bench_scaling.drain_outcome(self.tmp, 20)


class DrainTest(TempDirTestCase):
    def test_two_worker_processes_run_every_job_once(self) -> None:
        outcome = bench_scaling.drain(self.tmp, 2, 300)
        self.assertEqual((outcome.jobs, outcome.duplicates), (300, 0))
        stamps = bench_scaling.read_stamps(self.tmp / "stamps")
        self.assertEqual(sorted(int(value) for _, value in stamps), list(range(300)))


if __name__ == "__main__":
    unittest.main()
