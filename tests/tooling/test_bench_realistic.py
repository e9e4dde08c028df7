"""tools/bench/realistic/ (python make.py bench-realistic): its modules import
without the peers, its records count lost and duplicated jobs, its /proc CPU
sees a whole process tree, and a real drain by nobroker fills the table.

The peers (huey, dramatiq, celery, rq, redis) are blocked in the child
interpreters below, so these tests prove the harness never imports them
itself: only the generated apps and the worker commands do.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import unittest

from harness.support import REPO, SRC, TempDirTestCase, slow

from tools.bench.realistic import jobs
from tools.bench.realistic.drain import DrainResult, tree_cpu_seconds
from tools.bench.realistic.nobroker_system import parse_variant
from tools.bench.realistic.report import CONFIGS, Results, notes, rows
from tools.bench.realistic.run import choose

MODULES = ("run", "drain", "jobs", "report", "systems", "nobroker_system", "huey_system",
           "dramatiq_system", "celery_system", "rq_system")
PEERS = ("huey", "dramatiq", "celery", "kombu", "rq", "redis")
BLOCK_PEERS = f"import sys; sys.modules.update(dict.fromkeys({PEERS!r})); "


def run_python(*args: str, env_extra: dict[str, str] | None = None,
               timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "NOBROKER_QUICK")}
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), str(REPO)])
    env.update(env_extra or {})
    return subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=timeout, check=False)


class ImportTest(unittest.TestCase):
    def test_every_module_imports_with_the_peers_missing(self) -> None:
        for module in MODULES:
            with self.subTest(module=module):
                done = run_python("-c", BLOCK_PEERS + f"import tools.bench.realistic.{module}")
                self.assertEqual(done.returncode, 0, done.stderr)

    def test_help_names_the_options(self) -> None:
        done = run_python("-m", "tools.bench.realistic.run", "--help")
        self.assertEqual(done.returncode, 0, done.stderr)
        for option in ("--quick", "--jobs", "--only", "--redis-fsync", "--variants"):
            self.assertIn(option, done.stdout)

    def test_only_picks_systems_and_workloads(self) -> None:
        systems, configs = choose("huey,cpu")
        self.assertEqual(systems, ["huey"])
        self.assertEqual({c.kind for c in configs}, {"cpu"})
        systems, configs = choose(None)
        self.assertEqual(systems, ["nobroker", "huey", "dramatiq", "celery", "celery-nobroker",
                                   "rq", "dramatiq-nobroker"])
        self.assertEqual(len(configs), 6)
        with self.assertRaises(SystemExit):
            choose("nobroker,kafka")


class RecordsTest(TempDirTestCase):
    def test_variants_name_file_options_and_worker_options(self) -> None:
        self.assertEqual(parse_variant("base"), ({}, {}))
        self.assertEqual(parse_variant("checkpoints=0+prefetch=4"),
                         ({"checkpoints": False}, {"prefetch": 4}))
        self.assertEqual(parse_variant("prefetch=16+ack_delay=0.02"),
                         ({}, {"prefetch": 16, "ack_delay": 0.02}))
        self.assertEqual(parse_variant("checkpoints=off"), ({"checkpoints": False}, {}))
        for bad in ("fs", "no_such_option", "prefetch=many", "share_fsyncs", "batch_acks=1",
                    "acker_leases=0"):
            with self.subTest(spec=bad), self.assertRaises(ValueError):
                parse_variant(bad)

    def test_lost_and_duplicated_jobs_are_counted(self) -> None:
        code = ("from tools.bench.realistic.jobs import run_job\n"
                "for i in [0, 1, 2, 2, 4, 5, 6, 7, 8, 9, 9, 9]: run_job(i)\n")
        done = run_python("-c", code, env_extra={jobs.RECORDS_ENV: str(self.tmp),
                                                  jobs.KIND_ENV: "noop"})
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(jobs.record_count(self.tmp), 12)
        got = jobs.outcome(self.tmp, 11)  # ids 0..10: 3 and 10 never ran
        self.assertEqual((got.lost, got.duplicated), (2, 3))

    def test_a_cpu_job_burns_its_own_thread_time(self) -> None:
        done = run_python("-c", "from tools.bench.realistic.jobs import run_job; run_job(7)",
                          env_extra={jobs.RECORDS_ENV: str(self.tmp), jobs.KIND_ENV: "cpu"})
        self.assertEqual(done.returncode, 0, done.stderr)
        [(_, job_id, cpu)] = jobs.read_records(self.tmp)
        self.assertEqual(job_id, 7.0)
        self.assertGreaterEqual(cpu, jobs.CPU_SECONDS)


class TreeCpuTest(unittest.TestCase):
    def test_a_grandchild_burning_cpu_counts_for_its_root(self) -> None:
        burn = "import time; t = time.process_time() + 0.3\nwhile time.process_time() < t: pass"
        root = subprocess.Popen([sys.executable, "-c",
                                 "import subprocess, sys; subprocess.run([sys.executable, "
                                 f"'-c', {burn!r}]); import time; time.sleep(30)"])
        try:
            deadline = time.monotonic() + 60
            while tree_cpu_seconds([root.pid]) < 0.3 and time.monotonic() < deadline:
                time.sleep(0.05)
            self.assertGreaterEqual(tree_cpu_seconds([root.pid]), 0.3)
        finally:
            root.kill()
            root.wait()


class ReportTest(unittest.TestCase):
    def test_rows_show_shares_cpu_and_losses(self) -> None:
        results = Results()
        io1, _, cpu1 = CONFIGS[:3]
        out = jobs.Outcome(rate=1600.0, lost=1, duplicated=2, job_cpu=0.0)
        results.add("nobroker", io1, DrainResult(out, enqueue_rate=2000.0,
                                                 queue_cpu_per_job=None))
        results.add("nobroker", cpu1, DrainResult(out, enqueue_rate=1000.0,
                                                  queue_cpu_per_job=0.000428))
        results.skipped[("huey", io1)] = "error: RuntimeError: a long reason for the notes"
        headers, table = rows(results, ["nobroker", "huey"])
        self.assertEqual(headers, ["", "nobroker", "huey"])
        by_row = {row[0]: row[1:] for row in table}
        self.assertEqual(by_row["W-io, 1 process x 16 threads, share of the ideal 3,200/s"],
                         ["0.50", "error: RuntimeErro *"])
        self.assertEqual(by_row["queue CPU per job beside a 2.1 ms CPU job, 1 process"][0],
                         "428 us")
        self.assertEqual(by_row["one producer's durable enqueue"][0], "1,500/s")
        self.assertEqual(by_row["lost / duplicated jobs, all drains"][0], "2 / 4")
        self.assertEqual(notes(results),
                         ["huey (io 1x16): error: RuntimeError: a long reason for the notes"])


@slow
class NobrokerDrainTest(unittest.TestCase):
    def test_nobroker_drains_every_job_once_with_its_own_worker_command(self) -> None:
        done = run_python("-c", BLOCK_PEERS + "import sys; from tools.bench.realistic.run "
                          "import main; sys.exit(main(['--no-venv', '--only', 'nobroker,noop', "
                          "'--jobs', '40', '--dir', sys.argv[1]]))", str(REPO / ".bench"),
                          timeout=300)
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        self.assertRegex(done.stdout, r"W-noop jobs/s, 1 process / 2 processes \(2/1\) +"
                                      r"[\d,]+ / [\d,]+")
        self.assertRegex(done.stdout, r"lost / duplicated jobs, all drains +0 / 0")

    def test_variants_drain_side_by_side(self) -> None:
        done = run_python("-c", BLOCK_PEERS + "import sys; from tools.bench.realistic.run "
                          "import main; sys.exit(main(['--no-venv', '--only', 'nobroker,noop', "
                          "'--jobs', '40', '--variants', 'base,prefetch=2+ack_delay=0.01', "
                          "'--dir', sys.argv[1]]))", str(REPO / ".bench"), timeout=300)
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        self.assertRegex(done.stdout, r"nobroker\[base\] +nobroker\[prefetch=2\+ack_delay=0.01\]")
        self.assertRegex(done.stdout, r"lost / duplicated jobs, all drains +0 / 0 +0 / 0")


if __name__ == "__main__":
    unittest.main()
