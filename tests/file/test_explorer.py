"""The crash-state explorer (tests/harness/explorer/) and, through it, nobroker's crash safety.

Three layers of tests:

- the explorer's own parts: the recorder sees every file operation and notices
  one that bypasses the seam; the disk models produce exactly the states they
  should for small hand-written traces (create without a directory fsync,
  torn sectors, sizes with zeros or garbage, atomic or split renames, the
  fsyncgate "clean but lost" pages);
- nobroker under the explorer: every workload of the scenario library, the
  50-call mixed workload and a sample of ACE-style two-call sequences, under
  the process, ext4ish, weak and windows profiles, with zero violations of
  I1-I10 (and enqueue_many all-or-nothing, checked explicitly);
- the regression corpus (tests/crash_corpus): every state (or trace) that ever
  failed still recovers as expected.

The bounded runs here fit the suite's budget; `@slow` ones and tools/torture/run.py
(`explorer.explore(..., bounds=Bounds.torture())`) go further. Each test prints
the explorer's figures (states explored, unique, violations) to stdout.
"""

from __future__ import annotations

import os
import random
import shutil
import sys
import tempfile
import time
import unittest

from harness import explorer
from harness.explorer import SECTOR, Bounds, Driver, Event, crash_states, explore, record
from harness.explorer.frames import _scan_frames
from harness.support import REPO, TempDirTestCase, slow

CORPUS = str(REPO / "tests" / "crash_corpus")
PROFILES = ("process", "ext4ish", "weak", "windows")
SCENARIOS = [name for name in explorer.WORKLOADS if name != "mixed50"]
# Workloads with directory operations beyond the first create: where `windows`
# (no directory fsync) differs from ext4ish.
DIRECTORY_SCENARIOS = {"first_enqueue", "compaction", "keyed_compaction", "big_compaction",
                       "two_handles", "fsync_fails_reopen", "fsync_false", "checkpoints",
                       "results_compaction", "cancel_pause",
                       "racing_compactions", "checkpoint_after_switch", "progress"}


# The default run's bounds for the scenario library (the long run: explorer.long_run).
LIBRARY_BOUNDS = Bounds(random_subsets=4, max_unit_variants=32, compound=1, rot_records=4)


def show(report: explorer.Report) -> None:
    print(report.summary(), file=sys.stdout, flush=True)


class ExplorerTestCase(unittest.TestCase):
    def assertClean(self, report: explorer.Report) -> None:
        show(report)
        self.assertTrue(report.ok, "\n".join(str(v) for v in report.violations[:5]))
        self.assertGreater(sum(s.unique for s in report.stats.values()), 0, "nothing explored")


# --------------------------------------------------------------------------
# the recorder


class RecorderTest(TempDirTestCase):
    def test_every_file_operation_of_a_workload_is_recorded_with_its_source_line(self) -> None:
        trace = record(explorer.WORKLOADS["compaction"], str(self.tmp / "q"))
        self.assertEqual(trace.problems, [])
        kinds = {e.kind for e in trace.events}
        self.assertLessEqual({"create", "write", "fsync", "dirsync", "rename", "unlink",
                              "begin", "end"}, kinds)
        writes = [e for e in trace.events if e.kind == "write"]
        self.assertTrue(all(e.where and "nobroker" not in e.where[0] for e in writes[:1]))
        self.assertTrue(any("logfile.py" in frame for e in writes for frame in e.where))
        self.assertEqual([c.outcome for c in trace.calls], ["returned"] * len(trace.calls))

    def test_calls_are_bracketed_and_their_batches_known(self) -> None:
        trace = record(explorer.WORKLOADS["lease_ack"], str(self.tmp / "q"))
        enqueues = [c for c in trace.calls if c.op == "enqueue"]
        self.assertEqual([c.batches for c in enqueues], [((1, 0),), ((2, 0),)])
        for call in trace.calls:
            self.assertEqual(trace.events[call.begin].kind, "begin")
            self.assertEqual(trace.events[call.end].kind, "end")
        # The oracle replayed the log itself: a state for every batch (batch, generation).
        self.assertEqual(sorted(trace.history), [(b, 0) for b in range(7)])

    def test_a_write_that_bypasses_the_seam_fails_the_shadow_check(self) -> None:
        directory = str(self.tmp / "q")

        def sneaky(d: Driver) -> None:
            h = d.open()
            with open(os.path.join(directory, "q.000000.log"), "r+b") as f:
                f.seek(16)
                f.write(b"behind the recorder's back")
            d.call(h, "stats")

        trace = record(sneaky, directory)
        self.assertTrue(trace.problems)
        self.assertIn("q.000000.log", trace.problems[0])

    def test_a_simulated_crash_kills_the_handle_and_writes_nothing_more(self) -> None:
        def dies(d: Driver) -> None:
            h = d.open()
            d.crash_next("write", keep=10)
            d.call(h, "enqueue", explorer.payload(1, 100))
            d.call(h, "enqueue", explorer.payload(2, 100))  # the handle is dead

        trace = record(dies, str(self.tmp / "q"))
        self.assertEqual([c.outcome for c in trace.calls], ["returned", "crashed"])
        crashed = trace.calls[1]
        writes = [e for e in trace.events[crashed.begin:crashed.end] if e.kind == "write"]
        self.assertEqual(len(writes[-1].data), 10)
        self.assertEqual(trace.problems, [])

    def test_an_injected_fsync_error_is_recorded_and_reaches_the_caller(self) -> None:
        trace = record(explorer.WORKLOADS["fsync_fails"], str(self.tmp / "q"))
        self.assertIn("fsync_failed", {e.kind for e in trace.events})
        self.assertEqual([c.result for c in trace.calls if c.outcome == "raised"],
                         ["StorageError", "QueueClosedError"])


# --------------------------------------------------------------------------
# the disk models, on hand-written traces


def ev(kind: str, ino: int = -1, name: str = "", index: int = 0, **fields: object) -> Event:
    return Event(index, kind, ino=ino, name=name, **fields)  # type: ignore[arg-type]


def numbered(*events: Event) -> list[Event]:
    for index, event in enumerate(events):
        event.index = index
    return list(events)


class DiskModelTest(unittest.TestCase):
    def test_a_create_not_followed_by_a_directory_fsync_may_vanish(self) -> None:
        trace = numbered(ev("create", 1, "a"), ev("write", 1, "a", data=b"x" * 10),
                         ev("fsync", 1, "a"))
        for profile in ("ext4ish", "weak"):
            names = {tuple(sorted(s)) for s in crash_states(trace, profile)}
            self.assertEqual(names, {(), ("a",)}, profile)
        self.assertEqual([sorted(s) for s in crash_states(trace, "process")], [["a"]])
        trace.append(ev("dirsync", index=3))
        self.assertEqual({tuple(sorted(s)) for s in crash_states(trace, "weak")}, {("a",)})

    def test_a_directory_fsync_makes_the_name_durable_but_not_unsynced_data(self) -> None:
        trace = numbered(ev("create", 1, "a"), ev("dirsync"),
                         ev("write", 1, "a", data=b"y" * 100))
        contents = {s["a"] for s in crash_states(trace, "ext4ish")}
        self.assertEqual(contents, {b"", b"y" * 100, bytes(100)})  # zeros: size without data

    def test_un_synced_sectors_land_in_any_subset_and_grown_space_may_hold_garbage(self
                                                                                 ) -> None:
        old = b"o" * (2 * SECTOR)
        trace = numbered(ev("write", 1, "f", offset=0, data=b"n" * (2 * SECTOR)))
        ext4 = {s["f"] for s in crash_states(trace, "ext4ish", initial={"f": old})}
        self.assertEqual(ext4, {old, b"n" * 2 * SECTOR, b"n" * SECTOR + b"o" * SECTOR,
                                b"o" * SECTOR + b"n" * SECTOR})
        grown = numbered(ev("write", 1, "f", offset=SECTOR, data=b"g" * SECTOR))
        weak = {s["f"] for s in crash_states(grown, "weak", initial={"f": b"h" * SECTOR})}
        self.assertIn(b"h" * SECTOR, weak)  # the size change did not land
        self.assertIn(b"h" * SECTOR + bytes(SECTOR), weak)  # size, zeros
        self.assertTrue(any(len(c) == 2 * SECTOR and c[SECTOR:] not in (bytes(SECTOR),
                                                                      b"g" * SECTOR)
                            for c in weak), "weak never showed garbage in grown space")
        ext4 = {s["f"] for s in crash_states(grown, "ext4ish", initial={"f": b"h" * SECTOR})}
        self.assertTrue(all(c[SECTOR:] in (b"", bytes(SECTOR), b"g" * SECTOR) for c in ext4))

    def test_a_rename_is_atomic_in_ext4ish_and_three_micro_ops_in_weak(self) -> None:
        initial = {"cur": b"1\n", "tmp": b"2\n"}
        trace = numbered(ev("rename", 2, "tmp", name2="cur"))
        ext4 = {tuple(sorted(s.items())) for s in crash_states(trace, "ext4ish",
                                                               initial=initial)}
        self.assertEqual(ext4, {(("cur", b"1\n"), ("tmp", b"2\n")), (("cur", b"2\n"),)})
        weak = [s for s in crash_states(trace, "weak", initial=initial)]
        self.assertIn({"tmp": b"2\n"}, weak)  # the old entry dropped, the new not added
        self.assertIn({}, weak)  # both entries dropped: the file has no name at all
        self.assertIn({"cur": b"2\n", "tmp": b"2\n"}, weak)  # a hard link, for a moment

    def test_safe_rename_in_ext4ish_only(self) -> None:
        trace = numbered(ev("create", 2, "tmp"), ev("write", 2, "tmp", data=b"7\n"),
                         ev("rename", 2, "tmp", name2="cur"))
        ext4 = crash_states(trace, "ext4ish", initial={"cur": b"1\n"})
        self.assertNotIn({"cur": b""}, ext4)
        self.assertIn({"cur": b"7\n"}, ext4)
        weak = crash_states(trace, "weak", initial={"cur": b"1\n"})
        self.assertIn({"cur": b""}, weak)  # renamed before its data landed

    def test_pages_of_a_failed_fsync_never_reach_the_disk(self) -> None:
        trace = numbered(ev("write", 1, "f", offset=0, data=b"B" * SECTOR),
                         ev("fsync_failed", 1, "f"), ev("fsync", 1, "f"))
        for profile in ("ext4ish", "weak"):
            contents = {s["f"] for s in crash_states(trace, profile,
                                                     initial={"f": bytes(SECTOR)})}
            self.assertEqual(contents, {bytes(SECTOR)}, profile)

    def test_windows_ignores_directory_fsync_but_a_file_fsync_carries_earlier_names(self
                                                                                  ) -> None:
        trace = numbered(ev("create", 1, "a"), ev("dirsync"))
        self.assertEqual({tuple(s) for s in crash_states(trace, "windows")}, {(), ("a",)})
        trace.append(ev("fsync", 1, "a", index=2))
        self.assertEqual({tuple(s) for s in crash_states(trace, "windows")}, {("a",)})


# --------------------------------------------------------------------------
# nobroker under the explorer


class ScenarioTest(ExplorerTestCase):
    """Every scenario of the library, every profile: no violation of I1-I10."""

    def test_the_scenario_library_under_every_profile(self) -> None:
        total = explorer.Report()
        for name in SCENARIOS:
            with self.subTest(workload=name):
                profiles = PROFILES if name in DIRECTORY_SCENARIOS else PROFILES[:3]
                report = explore(name, profiles, LIBRARY_BOUNDS)
                total.merge(report)
                self.assertTrue(report.ok, "\n".join(str(v) for v in report.violations[:3]))
        show(total)
        self.assertGreater(total.compound_states, 0)
        self.assertGreater(total.continued_states, 0)
        self.assertGreater(total.rot_states, 0)

    def test_a_50_call_workload_with_compaction_dlq_requeue_and_purge(self) -> None:
        trace = record(explorer.WORKLOADS["mixed50"],
                       tempfile.mkdtemp(prefix="nobroker-mixed50-"))
        ops = {c.op for c in trace.calls if c.outcome == "returned"}
        self.assertEqual(len(trace.calls), 52)  # 50 calls plus two opens
        self.assertLessEqual({"compact", "nack", "requeue_dead", "purge", "enqueue_many",
                              "ack", "extend"}, ops)
        started = time.perf_counter()
        report = explore("mixed50", ("process", "ext4ish", "weak"))
        self.assertLess(time.perf_counter() - started, 60)
        self.assertClean(report)

    def test_enqueue_many_is_all_or_nothing_across_a_crash(self) -> None:
        # The explorer checks P2 on every state; here we also make sure it had torn
        # batches to look at: states whose log held part of the 20-job batch.
        report = explore("enqueue_many", ("process", "ext4ish", "weak"))
        self.assertClean(report)
        trace = record(explorer.WORKLOADS["enqueue_many"],
                       tempfile.mkdtemp(prefix="nobroker-em-"))
        big = next(c for c in trace.calls if c.op == "enqueue_many")
        self.assertEqual(len(big.enqueued), 20)
        write = next(e for e in trace.events[big.begin:big.end]
                     if e.kind == "write" and any(e.data))
        self.assertGreater(len(write.data), 4 * SECTOR)  # spans sectors: it can tear


    def test_enqueue_many_beside_keyed_jobs_is_all_or_nothing_across_a_crash(self) -> None:
        report = explore("enqueue_many_keyed", ("process", "ext4ish", "weak"))
        self.assertClean(report)
        trace = record(explorer.WORKLOADS["enqueue_many_keyed"],
                       tempfile.mkdtemp(prefix="nobroker-emk-"))
        big = next(c for c in trace.calls if c.op == "enqueue_many")
        self.assertEqual(len(big.enqueued), 24)
        self.assertNotIn("0000000000000006", big.enqueued, "the key's id is skipped")
        write = next(e for e in trace.events[big.begin:big.end]
                     if e.kind == "write" and any(e.data))
        self.assertGreater(len(write.data), 4 * SECTOR)  # spans sectors: it can tear


    def test_a_workflow_graph_and_a_chord_finished_by_two_handles_at_once(self) -> None:
        report = explore("workflows", ("process", "ext4ish", "weak"))
        self.assertClean(report)
        trace = record(explorer.WORKLOADS["workflows"],
                       tempfile.mkdtemp(prefix="nobroker-wf-"))
        graph = next(c for c in trace.calls if c.op == "enqueue_graph")
        self.assertEqual((len(graph.enqueued), len(graph.batches)), (7, 1))
        first, second = [c for c in trace.calls if c.op == "ack"][:2]
        self.assertLess(first.begin, second.begin)
        self.assertLess(second.end, first.end, "the second ack ran inside the first's fsync")
        releases = [record["id"] for event in trace.events if event.kind == "write"
                    for rtype, _, record in _scan_frames(event.data) if rtype == 19]
        callback, handler = graph.enqueued[2], graph.enqueued[6]
        self.assertEqual(sorted(releases), sorted([callback, handler]),
                         "one RELEASE each: the callback's, the dying step's handler's")


    def test_a_requeue_that_resumes_a_chain_across_a_crash(self) -> None:
        report = explore("revive", ("process", "ext4ish", "weak"))
        self.assertClean(report)
        trace = record(explorer.WORKLOADS["revive"], tempfile.mkdtemp(prefix="nobroker-rv-"))
        graph = next(c for c in trace.calls if c.op == "enqueue_graph")
        requeue = next(c for c in trace.calls if c.op == "requeue_dead")
        revived = [record["id"] for event in trace.events[requeue.begin:requeue.end]
                   if event.kind == "write"
                   for rtype, _, record in _scan_frames(event.data) if rtype == 22]
        self.assertEqual(revived, list(graph.enqueued[1:]), "both steps revived, in one write")
        acked = [c for c in trace.calls if c.op == "ack"]
        self.assertEqual(len(acked), 3, "then the chain ran to its end")


class AceTest(ExplorerTestCase):
    """ACE-style bounded workloads: one or two ops on two handles from a seeded queue."""

    def test_every_single_op_and_a_sample_of_pairs(self) -> None:
        workloads = explorer.ace_workloads(2)
        singles = [k for k in workloads if k.count("+") == 0]
        pairs = sorted(k for k in workloads if k.count("+") == 1)
        chosen = singles + random.Random(0).sample(pairs, 16)
        total = explorer.Report()
        for key in chosen:
            report = explore(workloads[key], ("ext4ish", "weak"), Bounds.quick(), name=key)
            total.merge(report)
        self.assertEqual(len(singles), 18)
        self.assertClean(total)



class HeavierTest(ExplorerTestCase):
    """Bigger bounds than the default run; the long run is explorer.long_run (torture)."""

    @slow
    def test_a_longer_random_workload_with_more_random_subsets(self) -> None:
        workload = explorer.random_workload(101, 30, handles=3)
        self.assertClean(explore(workload, ("weak",), Bounds(random_subsets=24, rot=False,
                                                             compound=0)))

    @slow
    def test_byte_exhaustive_process_crashes(self) -> None:
        total = explorer.Report()
        for name in ("lease_ack",):  # every byte of every write; torture does the rest
            total.merge(explore(name, "process", Bounds(byte_exhaustive=True, rot=False,
                                                        compound=0)))
        self.assertClean(total)


# --------------------------------------------------------------------------
# the regression corpus


class CorpusTest(ExplorerTestCase):
    def test_every_fixture_recovers_as_expected(self) -> None:
        paths = list(explorer.iter_fixtures(CORPUS))
        self.assertGreaterEqual(len(paths), 5)
        scratch = tempfile.mkdtemp(prefix="nobroker-corpus-", dir=explorer.scratch_root())
        self.addCleanup(shutil.rmtree, scratch, ignore_errors=True)
        for path in paths:
            fixture = explorer.load_fixture(path)
            with self.subTest(bug=fixture["bug"]):
                self.assertTrue(fixture.get("note"), "a fixture says what it guards")
                where = os.path.join(scratch, fixture["bug"])
                self.assertEqual(explorer.check_fixture(fixture, where), [])


class FaultScenarioTest(ExplorerTestCase):
    def test_an_fsync_error_is_never_a_success_and_a_reopen_rescues_the_queue(self) -> None:
        trace = record(explorer.WORKLOADS["fsync_fails_reopen"],
                       tempfile.mkdtemp(prefix="nobroker-fsyncfail-"))
        failed = [c for c in trace.calls if c.outcome == "raised"]
        self.assertEqual([c.result for c in failed], ["StorageError"])
        reopen = [c for c in trace.calls if c.op == "open"][1]
        self.assertTrue(reopen.batches, "the reopen did not rewrite the queue")


if __name__ == "__main__":
    unittest.main()
