"""Salvage of a damaged log (nobroker.file.repair.salvage, `nobroker recover --salvage`).

The claims: a salvaged queue always opens cleanly and works; every batch that
survived the damage intact is kept; every other byte of the old log is in a
side file, and the report names it; an undamaged log is left alone byte for
byte; another process inside a call makes salvage refuse; and a salvage
killed (kill -9) at any file operation leaves either the old state or the
salvaged one, and running it again finishes the job.

The damaged logs are the fuzzer's (tests/harness/fuzz/: its corpus and its
mutations), plus in-place damage of our own for which the surviving batches
are known exactly.
"""

from __future__ import annotations

import json
import logging
import os
import random
import signal
import subprocess
import sys
import textwrap
import unittest
from pathlib import Path

from harness.explorer import Bounds, RecordingFS, crash_states
from harness.support import FakeClock, TempDirTestCase, child_env, store_of, tree_digest

from file.test_fuzz import (
    CURRENT,
    LOG0,
    LOG1,
    build_corpus,
    exercise,
    make_case,
    materialise,
)
from nobroker import CorruptLogError, NobrokerError, Queue
from nobroker.file.inspection import read_records
from nobroker.file.log import framing
from nobroker.file.log.records import Applied, RecordType
from nobroker.file.repair.damagedlog import Restart, TolerantReplay, find_batches, read_batch
from nobroker.file.repair.salvage import SalvageReport, salvage


def batches_of(data: bytes) -> list[tuple[int, bytes]]:
    """(offset, bytes) of every batch of an undamaged log."""
    found = []
    pos = framing.FILE_HEADER.size
    while True:
        batch, stop, _ = read_batch(data, pos)
        if batch is None:
            return found
        found.append((pos, data[pos:stop]))
        pos = stop


def check_accounting(test: unittest.TestCase, data: bytes, report: SalvageReport,
                     label: str) -> None:
    """Every non-zero byte after the header is in a kept batch or a side file."""
    end = len(data.rstrip(b"\0"))
    pieces = sorted([(o, n, "kept") for o, n in report.kept]
                    + [(r.offset, r.length, r.side_file) for r in report.set_aside])
    pos = pieces[0][0] if pieces else end
    test.assertIn(pos, (0, framing.FILE_HEADER.size), label)
    for offset, length, where in pieces:
        test.assertEqual(offset, pos, f"{label}: a gap or an overlap at {pos}")
        if where != "kept":
            test.assertEqual(Path(where).read_bytes(), data[offset:offset + length], label)
        pos = offset + length
    test.assertEqual(pos, max(end, framing.FILE_HEADER.size), f"{label}: bytes unaccounted")
    test.assertEqual(report.bytes_set_aside, sum(r.length for r in report.set_aside))


def lose_record(test: unittest.TestCase, log: str, rtype: RecordType, job_id: str) -> str:
    """Make the first `rtype` record of `log` (about `job_id`) name a job nobody
    enqueued: the same frame, CRC-valid, so replay skips it as if the damage had
    taken it and kept the rest of its batch. Returns the id it names now."""
    data = bytearray(Path(log).read_bytes())
    record = next(r for r in read_records(log) if r.type == rtype.name)
    test.assertEqual(record.payload["id"], job_id)
    nobody = "f" * len(job_id)
    forged = json.dumps({**record.payload, "id": nobody}, separators=(",", ":")).encode()
    frame = framing.encode_record(rtype, forged, record.more)
    test.assertEqual(len(frame), 9 + record.length)
    data[record.offset:record.offset + len(frame)] = frame
    Path(log).write_bytes(bytes(data))
    return nobody


class SalvageFuzzTest(TempDirTestCase):
    def setUp(self) -> None:
        super().setUp()
        logger = logging.getLogger("nobroker")
        saved = logger.disabled
        logger.disabled = True  # torn-tail warnings by the hundred say nothing here
        self.addCleanup(setattr, logger, "disabled", saved)
        self.corpus = build_corpus(str(self.tmp / "corpus"))

    def log_name(self, files: dict[str, bytes]) -> str:
        return LOG1 if CURRENT in files else LOG0

    def test_every_refused_fuzz_case_salvages_to_a_queue_that_opens_and_works(self) -> None:
        salvaged = 0
        for index in range(300):
            files, steps = make_case(self.corpus, 41, index)
            directory = str(self.tmp / f"case{index}")
            materialise(directory, files)
            try:
                Queue(directory, auto_compact=None).close()
                continue  # opens as it is: recovery's business, not salvage's
            except CorruptLogError:
                pass
            label = f"case (41, {index}): {'; '.join(steps)}"
            try:
                report = salvage(directory)
            except NobrokerError:
                continue  # damage outside the log (NAME.current, a missing file)
            outcome, problem = exercise(directory, FakeClock(2_000_000.0))
            self.assertIn(outcome, ("clean", "repaired"), label)
            self.assertIsNone(problem, label)
            if report.new_generation is not None:
                check_accounting(self, files[os.path.basename(report.log)], report, label)
            salvaged += 1
        self.assertGreater(salvaged, 30, "too few refused cases reached salvage")

    def test_in_place_damage_keeps_every_batch_that_survived_it(self) -> None:
        rng = random.Random(7)
        probed = 0
        for label, files in sorted(self.corpus.seeds.items()):
            name = self.log_name(files)
            original = files[name]
            spans = batches_of(original)
            for trial in range(40):
                data = bytearray(original)
                for _ in range(rng.choice((1, 1, 2, 3))):
                    start = rng.randrange(framing.FILE_HEADER.size, len(data) - 1)
                    length = rng.choice((1, 3, 40, 512))
                    kind = rng.choice(("flip", "zero", "junk"))
                    for pos in range(start, min(start + length, len(data))):
                        data[pos] = (data[pos] ^ 0x5A if kind == "flip" else
                                     0 if kind == "zero" else rng.randrange(256))
                damaged = {n: d for n, d in files.items() if not n.endswith(".ckpt")}
                damaged[name] = bytes(data)
                directory = str(self.tmp / f"{label}-{trial}")
                materialise(directory, damaged)
                try:
                    report = salvage(directory)
                except NobrokerError:
                    self.fail(f"{label} trial {trial}: salvage raised")
                where = f"{label} trial {trial}"
                survived = [(o, b) for o, b in spans if bytes(data[o:o + len(b)]) == b]
                kept_bytes = {pos for o, n in report.kept for pos in range(o, o + n)}
                if report.new_generation is None:
                    self.assertEqual(len(survived), len(spans), where)
                    continue
                for offset, _ in survived:
                    self.assertTrue(offset in kept_bytes, f"{where}: lost the batch at {offset}")
                check_accounting(self, bytes(data), report, where)
                self.assertSameReplay(bytes(data), 1 if CURRENT in files else 0, where)
                outcome, problem = exercise(directory, FakeClock(2_000_000.0))
                self.assertEqual((outcome, problem), ("clean", None), where)
                probed += 1
        self.assertGreater(probed, 40)


    def assertSameReplay(self, data: bytes, generation: int, where: str) -> None:
        """The fast path (whole batches that fit) and the careful one agree."""
        scan = find_batches(data, generation)
        fast, careful = TolerantReplay(), TolerantReplay(careful=True)
        for batch in scan.batches:
            fast.apply_batch(batch)
            careful.apply_batch(batch)
        self.assertEqual(fast.state.fingerprint(), careful.state.fingerprint(), where)
        self.assertEqual(fast.skipped, careful.skipped, where)


class TolerantReplayTest(unittest.TestCase):
    def test_a_malformed_record_on_the_fast_path_asks_for_a_careful_replay(self) -> None:
        good = [Applied(RecordType.ENQUEUE, {"b": 1, "id": "a", "pr": 0, "at": 1.0, "t": 1.0,
                                             "ma": 3, "p": None}, 16, 50)]
        # CRC-valid yet malformed: priority must be an int. No crash writes this.
        bad = [Applied(RecordType.ENQUEUE, {"b": 2, "id": "b", "pr": "high", "at": 1.0,
                                            "t": 1.0, "ma": 3, "p": None}, 66, 50),
               Applied(RecordType.ENQUEUE, {"b": 2, "id": "c", "pr": 0, "at": 1.0, "t": 1.0,
                                            "ma": 3, "p": None}, 116, 50)]
        fast = TolerantReplay()
        fast.apply_batch(good)
        with self.assertRaises(Restart):
            fast.apply_batch(bad)
        careful = TolerantReplay(careful=True)
        careful.apply_batch(good)
        careful.apply_batch(bad)
        self.assertEqual(sorted(careful.state.jobs), ["a", "c"])
        self.assertEqual([(s.offset, s.job_id) for s in careful.skipped], [(66, "b")])
        self.assertEqual(careful.unknown_jobs, ())

    def test_records_about_a_job_never_seen_are_skipped_and_named(self) -> None:
        replay = TolerantReplay()
        replay.apply_batch([Applied(RecordType.LEASE, {"b": 7, "id": "lost", "tok": 1,
                                                       "until": 5.0}, 16, 40)])
        replay.apply_batch([Applied(RecordType.ENQUEUE, {"b": 8, "id": "new", "pr": 0,
                                                         "at": 1.0, "t": 1.0, "ma": 3,
                                                         "p": None}, 56, 50)])
        self.assertEqual(replay.unknown_jobs, ("lost",))
        self.assertEqual(list(replay.state.jobs), ["new"])
        self.assertEqual(replay.state.last_batch, 8)


class SalvageBehaviourTest(TempDirTestCase):
    def build(self, count: int = 6) -> tuple[str, Path]:
        directory = str(self.tmp / "q")
        with Queue(directory) as q:
            for i in range(count):
                q.enqueue({"i": i})
            job = q.lease_one()
            assert job is not None
            q.ack(job)
            q.enqueue_many([{"many": i} for i in range(3)])
        return directory, Path(directory, LOG0)

    def damage(self, path: Path, offset: int) -> bytes:
        data = bytearray(path.read_bytes())
        data[offset] ^= 0xFF
        path.write_bytes(data)
        return bytes(data)

    def test_an_undamaged_log_is_left_alone_byte_for_byte(self) -> None:
        directory, _ = self.build()
        before = tree_digest(directory)
        for point_in_time in (False, True):
            report = salvage(directory, point_in_time=point_in_time)
            self.assertIsNone(report.new_generation)
            self.assertIn("no damage found", report.describe())
            self.assertEqual(tree_digest(directory), before)

    def test_salvage_skips_the_damage_and_names_the_job_whose_enqueue_was_lost(self) -> None:
        directory, path = self.build()
        data = self.damage(path, 20)  # inside the first ENQUEUE
        with self.assertRaises(CorruptLogError):
            Queue(directory)
        report = salvage(directory)
        first = find_batches(data, 0).damaged[0]
        self.assertEqual((report.set_aside[0].offset, report.set_aside[0].length),
                         (first.offset, first.length))
        self.assertEqual(report.lost_batches, ((1, 1),))
        # Job 0 was enqueued in the lost batch; its lease and ack were kept but skipped.
        self.assertEqual(report.unknown_jobs, ("0000000000000000",))
        self.assertEqual(len(report.skipped), 2)
        self.assertIn("whose records were lost", report.describe())
        with Queue(directory) as q:
            self.assertTrue(q.recovery.clean)
            payloads = [job.payload for job in q.list_jobs()]
        self.assertEqual(payloads, [{"i": i} for i in range(1, 6)]
                         + [{"many": i} for i in range(3)])
        check_accounting(self, data, report, "first enqueue")

    def test_a_damaged_file_header_costs_only_its_16_bytes(self) -> None:
        directory, path = self.build()
        data = self.damage(path, 2)  # the magic
        records = list(read_records(str(path)))
        self.assertEqual((records[0].type, records[0].offset, records[0].length),
                         ("DAMAGED", 0, 16))
        self.assertEqual(sum(1 for r in records if r.error is None), len(records) - 1)
        report = salvage(directory)
        self.assertEqual([(r.offset, r.length) for r in report.set_aside], [(0, 16)])
        self.assertEqual((report.unknown_jobs, report.skipped), ((), ()))
        check_accounting(self, data, report, "header")
        with Queue(directory) as q:
            self.assertEqual(q.stats().pending, 8)

    def test_point_in_time_keeps_only_what_precedes_the_first_damage(self) -> None:
        directory, path = self.build()
        spans = batches_of(path.read_bytes())
        data = self.damage(path, spans[3][0] + 20)  # the fourth batch
        report = salvage(directory, point_in_time=True)
        self.assertEqual(report.batches_kept, 3)
        self.assertEqual(len(report.set_aside), 1)
        self.assertEqual(report.set_aside[0].offset, spans[3][0])
        check_accounting(self, data, report, "point in time")
        with Queue(directory) as q:
            self.assertEqual([job.payload for job in q.list_jobs()],
                             [{"i": i} for i in range(3)])

    def test_salvage_refuses_while_another_process_holds_the_lock(self) -> None:
        directory, path = self.build()
        self.damage(path, 20)
        before = tree_digest(directory)
        code = textwrap.dedent("""
            import sys, time
            from nobroker.file.disk.fs import FileSystem
            from nobroker.file.disk.lock import shared_lock
            lock = shared_lock(FileSystem(), sys.argv[1])
            lock.acquire(10)
            print("held", flush=True)
            time.sleep(60)
        """)
        holder = subprocess.Popen([sys.executable, "-c", code,
                                   os.path.join(directory, "default.lock")],
                                  stdout=subprocess.PIPE, env=child_env())
        self.addCleanup(holder.wait)
        self.addCleanup(holder.kill)
        assert holder.stdout is not None
        self.assertEqual(holder.stdout.readline().strip(), b"held")
        with self.assertRaises(NobrokerError) as caught:
            salvage(directory)
        self.assertIn("another process holds the queue's lock", str(caught.exception))
        self.assertEqual(tree_digest(directory), before)

    def test_a_salvage_killed_at_any_file_operation_leaves_the_old_or_the_new_state(
            self) -> None:
        directory, path = self.build()
        self.damage(path, 20)
        pristine = {p.name: p.read_bytes() for p in Path(directory).iterdir()}
        reference = str(self.tmp / "reference")
        materialise(reference, pristine)
        salvage(reference)
        with Queue(reference) as q:
            salvaged = store_of(q).state.fingerprint()
        ops = 0
        outcomes = {"old": 0, "new": 0}
        while True:
            target = str(self.tmp / f"kill{ops}")
            materialise(target, pristine)
            finished = self.salvage_killed_at(target, ops)
            state = self.opened(target)
            if state is None:
                outcomes["old"] += 1
                self.assertEqual(Path(target, LOG0).read_bytes(), pristine[LOG0])
            else:
                self.assertEqual(state, salvaged, f"killed at operation {ops}")
                outcomes["new"] += 1
            # Running it again (after a kill, or to see a finished one is idempotent)
            # always ends in the salvaged state.
            salvage(target)
            self.assertEqual(self.opened(target), salvaged, f"rerun after a kill at {ops}")
            if finished:
                break
            ops += 1
        self.assertGreater(ops, 10, "salvage made suspiciously few file operations")
        self.assertGreater(outcomes["old"], 0)
        self.assertGreater(outcomes["new"], 0)

    def test_a_salvage_cut_short_by_a_power_cut_leaves_the_old_or_the_new_state(
            self) -> None:
        # The explorer's disk models (tests/harness/explorer/): every file operation of one
        # salvage recorded, and after each the states a crash may leave on the disk.
        directory, path = self.build()
        self.damage(path, 20)
        pristine = {p.name: p.read_bytes() for p in Path(directory).iterdir()}
        recorded = str(self.tmp / "recorded")
        materialise(recorded, pristine)
        fs = RecordingFS(recorded, adopt=True)
        salvage(recorded, fs=fs)
        with Queue(recorded) as q:
            salvaged = store_of(q).state.fingerprint()
        seen: dict[str, int] = {"old": 0, "new": 0}
        checked: set[bytes] = set()
        bounds = Bounds(random_subsets=2, max_unit_variants=16)
        for profile in ("ext4ish", "weak"):
            for point in range(len(fs.events)):
                for state in crash_states(fs.events[:point + 1], profile, bounds, pristine):
                    key = repr(sorted(state.items())).encode()
                    if key in checked:
                        continue
                    checked.add(key)
                    target = str(self.tmp / f"state{len(checked)}")
                    materialise(target, state)
                    where = f"{profile}, crash after {fs.events[point].describe()}"
                    found = self.opened(target)
                    if found is None:
                        seen["old"] += 1
                        self.assertEqual(state.get(LOG0), pristine[LOG0], where)
                        salvage(target)  # and the way on is to run it again
                        self.assertEqual(self.opened(target), salvaged, where)
                    else:
                        seen["new"] += 1
                        self.assertEqual(found, salvaged, where)
        print(f"power-cut states of one salvage: {seen}", flush=True)
        self.assertGreater(seen["old"], 20)
        self.assertGreaterEqual(seen["new"], 3)

    @staticmethod
    def opened(directory: str) -> tuple[object, ...] | None:
        try:
            with Queue(directory, auto_compact=None) as q:
                return store_of(q).state.fingerprint()
        except CorruptLogError:
            return None

    def salvage_killed_at(self, directory: str, ops: int) -> bool:
        """Run salvage in a child that kills itself (SIGKILL) at file operation `ops`;
        True if it finished first."""
        code = textwrap.dedent("""
            import os, signal, sys
            from nobroker.file.disk.fs import FileSystem
            from nobroker.file.repair.salvage import salvage

            class Dying(FileSystem):
                left = int(sys.argv[2])
                def tick(self):
                    if Dying.left == 0:
                        os.kill(os.getpid(), signal.SIGKILL)
                    Dying.left -= 1

            for op in ("open", "pwrite", "write_all", "fsync", "fdatasync", "fsync_dir",
                       "replace", "unlink", "ftruncate", "mkdir"):
                def wrapped(self, *args, _op=op, **kwargs):
                    self.tick()
                    return getattr(FileSystem, _op)(self, *args, **kwargs)
                setattr(Dying, op, wrapped)
            salvage(sys.argv[1], fs=Dying())
            print("finished")
        """)
        done = subprocess.run([sys.executable, "-c", code, directory, str(ops)],
                              capture_output=True, env=child_env(), timeout=60)
        if done.returncode == -signal.SIGKILL:
            return False
        self.assertEqual(done.returncode, 0, done.stderr.decode())
        return True


class SalvageCliTest(TempDirTestCase):
    def nb(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "nobroker", "--dir", str(self.tmp / "q"),
                               *args], capture_output=True, text=True, env=child_env(),
                              timeout=60)

    def test_recover_salvage_inspect_and_the_hint_in_every_refusal(self) -> None:
        for i in range(4):
            self.assertEqual(self.nb("enqueue", json.dumps({"i": i})).returncode, 0)
        path = self.tmp / "q" / LOG0
        data = bytearray(path.read_bytes())
        second = batches_of(bytes(data))[1][0]
        data[second + 15] ^= 1
        path.write_bytes(data)
        refused = self.nb("stats")
        self.assertEqual(refused.returncode, 1)
        self.assertIn("recover --salvage", refused.stderr)
        shown = self.nb("inspect")
        self.assertEqual(shown.returncode, 1)
        self.assertRegex(shown.stdout, rf"\n{second} +DAMAGED")
        self.assertEqual(shown.stdout.count("ENQUEUE"), 3, "inspect stopped at the damage")
        self.assertEqual(self.nb("recover", "--salvage", "--point-in-time").returncode, 2)
        done = self.nb("recover", "--salvage", "--json")
        self.assertEqual(done.returncode, 0, done.stderr)
        report = json.loads(done.stdout)
        self.assertEqual(report["new_generation"], 1)
        self.assertEqual(report["set_aside"][0]["offset"], second)
        self.assertTrue(os.path.exists(report["set_aside"][0]["side_file"]))
        stats = json.loads(self.nb("stats", "--json").stdout)
        self.assertEqual(stats["pending"], 3)
        self.assertEqual(self.nb("inspect").returncode, 0)



class LostReleaseTest(TempDirTestCase):
    """A RELEASE the damage took (its batch otherwise kept): salvage releases the job
    as the writer had, rather than leave it waiting for nothing."""

    def test_an_on_error_job_whose_release_was_lost_is_released(self) -> None:
        from nobroker.dependencies import GraphNode
        directory = str(self.tmp / "q")
        with Queue(directory, max_attempts=1, auto_compact=None) as q:
            step, handler = q.enqueue_graph([GraphNode("step"),
                                             GraphNode("handler", (0,), "failure")])
            leased = q.lease_one()
            assert leased is not None
            q.nack(leased, error="boom")  # dead: the handler's RELEASE in this batch
            q.enqueue("after")
        lose_record(self, os.path.join(directory, "default.000000.log"), RecordType.RELEASE,
                    handler.id)
        with self.assertRaises(CorruptLogError):
            Queue(directory).close()
        salvage(directory)
        with Queue(directory) as q:
            self.assertEqual(q.get(step.id).state.value, "dead")
            self.assertEqual(q.get(handler.id).state.value, "pending")
            self.assertEqual(q.stats().waiting, 0)


class LostReviveTest(TempDirTestCase):
    """A REVIVE the damage took, in the batch that requeued the dependent's last failed
    prerequisite (its batch otherwise kept; the fuzz case (41, 118)): replay leaves the
    dependent revivable with no failed prerequisite, a state no checkpoint can hold.
    Salvage forgets its revival (_forget_unrevived): it stays cancelled."""

    def test_a_dependent_whose_revive_was_lost_stays_cancelled_and_the_queue_works(
            self) -> None:
        from nobroker.dependencies import GraphNode
        directory = str(self.tmp / "q")
        with Queue(directory, max_attempts=1, auto_compact=None) as q:
            step, dependent = q.enqueue_graph([GraphNode("step"), GraphNode("after", (0,))])
            leased = q.lease_one()
            assert leased is not None
            q.nack(leased, error="boom")  # dead: its dependent cancelled, revivable
            self.assertEqual(q.get(dependent.id).state.value, "cancelled")
            self.assertEqual(q.requeue_dead(step.id), 1)  # REQUEUE + the dependent's REVIVE
            q.enqueue("later")
        nobody = lose_record(self, os.path.join(directory, "default.000000.log"),
                             RecordType.REVIVE, dependent.id)
        with self.assertRaises(CorruptLogError):
            Queue(directory).close()
        report = salvage(directory)
        self.assertIsNotNone(report.new_generation)
        self.assertEqual(report.unknown_jobs, (nobody,))
        with Queue(directory, max_attempts=1) as q:
            self.assertTrue(q.recovery.clean)
            self.assertEqual(q.get(step.id).state.value, "pending")
            self.assertEqual(q.get(dependent.id).state.value, "cancelled")
            self.assertEqual(q.stats().waiting, 0)
            for expected in ("step", "later"):  # it works: leases, acks, compacts
                job = q.lease_one()
                assert job is not None
                self.assertEqual(job.payload, expected)
                q.ack(job)
            self.assertIsNone(q.lease_one())
            q.compact()
        with Queue(directory) as q:  # and reopens from what it wrote
            self.assertTrue(q.recovery.clean)
            self.assertEqual(q.get(dependent.id).state.value, "cancelled")


if __name__ == "__main__":
    unittest.main()
