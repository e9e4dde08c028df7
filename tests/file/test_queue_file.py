"""What only the file queue has: permissions, recovery, torn tails, generations.

Every test that damages a log keeps the state the undamaged prefix had and
checks the reopened queue against it (fingerprints of the replay state).
"""

from __future__ import annotations

import os
import stat
import threading
import unittest
from pathlib import Path
from unittest import mock

from harness.support import FakeClock, TempDirTestCase, file_queue, store_of, tree_digest

from nobroker import CorruptLogError, Job, JobState, NobrokerError, Queue
from nobroker.file.disk.fs import FileSystem
from nobroker.file.log.framing import FILE_HEADER


def log_path(directory: Path, generation: int = 0, name: str = "default") -> Path:
    return directory / f"{name}.{generation:06d}.log"


def write_at(path: Path, offset: int, data: bytes) -> None:
    with open(path, "r+b") as handle:
        handle.seek(offset)
        handle.write(data)


class FileQueueTestCase(TempDirTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.dir = self.tmp / "q"

    def open(self, **kwargs: object) -> Queue:
        q = Queue(self.dir, **kwargs)  # type: ignore[arg-type]
        self.addCleanup(q.close)
        return q

    def populated(self) -> tuple[tuple[object, ...], int]:
        """A closed queue with a little of everything; returns (fingerprint, logical end)."""
        clock = FakeClock()
        with Queue(self.dir, clock=clock, max_attempts=1) as q:
            q.enqueue_many([{"n": i} for i in range(5)])
            q.enqueue("keyed", job_id="k1")
            a, b = q.lease(2)
            q.ack(a)
            q.nack(b, error="boom")
            q.lease()
            return store_of(q).state.fingerprint(), q.stats().log_bytes

    def assertReopensAs(self, fingerprint: tuple[object, ...], **kwargs: object) -> Queue:
        q = self.open(**kwargs)
        self.assertEqual(store_of(q).state.fingerprint(), fingerprint)
        return q


class PermissionsTest(FileQueueTestCase):
    def test_directory_is_0700_and_files_are_0600_whatever_the_umask(self) -> None:
        old = os.umask(0)
        try:
            q = self.open(clock=FakeClock())
            q.enqueue("x")
            q.compact()
            q.enqueue("y")
        finally:
            os.umask(old)
        write_at(log_path(self.dir, 1), q.stats().log_bytes, b"torn!")
        self.open()  # cuts the tail into a side file
        self.assertEqual(stat.S_IMODE(self.dir.stat().st_mode), 0o700)
        files = sorted(p.name for p in self.dir.iterdir() if p.is_file())
        self.assertIn("default.current", files)
        self.assertTrue(any(".torn-" in f for f in files), files)
        for name in files:
            with self.subTest(file=name):
                self.assertEqual(stat.S_IMODE((self.dir / name).stat().st_mode), 0o600)


class RecoveryReportTest(FileQueueTestCase):
    def test_a_clean_open_reports_nothing_to_repair(self) -> None:
        fingerprint, _ = self.populated()
        q = self.assertReopensAs(fingerprint)
        report = q.recovery
        self.assertTrue(report.clean)
        self.assertEqual((report.generation, report.torn_offset, report.repaired,
                          report.side_file), (0, None, False, None))
        self.assertGreater(report.records, 0)
        self.assertIn("clean", report.describe())

    def test_opening_an_undamaged_queue_changes_no_byte(self) -> None:
        self.populated()
        before = tree_digest(self.tmp)
        with Queue(self.dir) as q:
            q.stats()
            q.list_jobs()
        self.assertEqual(tree_digest(self.tmp), before)

    def test_a_brand_new_queue_has_generation_zero_and_a_lock_file_only(self) -> None:
        q = self.open()
        self.assertTrue(q.recovery.clean)
        names = sorted(p.name for p in self.dir.iterdir())
        self.assertEqual(names, ["default.000000.log", "default.lock"])
        self.assertEqual(log_path(self.dir).read_bytes()[:8], b"NOBROKER")


class TornTailTest(FileQueueTestCase):
    def assertRepaired(self, fingerprint: tuple[object, ...], torn_at: int,
                       cut: bytes) -> Queue:
        q = self.assertReopensAs(fingerprint)
        report = q.recovery
        self.assertFalse(report.clean)
        self.assertEqual(report.torn_offset, torn_at)
        self.assertEqual(report.torn_bytes, len(cut))
        self.assertTrue(report.repaired)
        assert report.side_file is not None
        self.assertEqual(Path(report.side_file).read_bytes(), cut)
        self.assertEqual(Path(report.side_file).parent, self.dir)
        self.assertEqual(log_path(self.dir).stat().st_size, torn_at, "the tail was cut")
        self.assertIn(str(torn_at), report.describe())
        # The repaired queue works, and reopens clean with the new write.
        q.enqueue("after repair")
        expected = store_of(q).state.fingerprint()
        q.close()
        again = self.assertReopensAs(expected)
        self.assertTrue(again.recovery.clean, again.recovery.describe())
        return again

    def test_garbage_written_at_the_logical_end_is_cut_and_saved(self) -> None:
        fingerprint, end = self.populated()
        garbage = bytes(range(1, 200))
        write_at(log_path(self.dir), end, garbage)
        self.assertRepaired(fingerprint, end, garbage)

    def test_garbage_appended_after_the_preallocated_zeros_is_cut_with_them(self) -> None:
        fingerprint, end = self.populated()
        size = log_path(self.dir).stat().st_size
        self.assertGreater(size, end, "the log is preallocated")
        with open(log_path(self.dir), "ab") as handle:
            handle.write(b"\xde\xad\xbe\xef" * 10)
        self.assertRepaired(fingerprint, end, bytes(size - end) + b"\xde\xad\xbe\xef" * 10)

    def test_appended_zeros_are_a_clean_end_and_nothing_is_cut(self) -> None:
        fingerprint, _ = self.populated()
        with open(log_path(self.dir), "ab") as handle:
            handle.write(bytes(8192))
        before = tree_digest(self.tmp)
        q = self.assertReopensAs(fingerprint)
        self.assertTrue(q.recovery.clean, q.recovery.describe())
        q.close()
        self.assertEqual(tree_digest(self.tmp), before)

    def test_a_partially_written_record_is_cut(self) -> None:
        fingerprint, end = self.populated()
        # The populated queue's clock: with the real one its lease would expire, and
        # that expiry is committed as a batch of its own ahead of this call's.
        with Queue(self.dir, clock=FakeClock()) as q:
            q.enqueue({"last": "x" * 300})
            new_end = q.stats().log_bytes
        data = log_path(self.dir).read_bytes()
        half = end + (new_end - end) // 2
        write_at(log_path(self.dir), half, bytes(new_end - half))  # the rest never landed
        self.assertRepaired(fingerprint, end, data[end:half])

    def test_a_batch_missing_its_last_records_is_cut_whole(self) -> None:
        fingerprint, end = self.populated()
        with Queue(self.dir, clock=FakeClock()) as q:
            q.enqueue_many([{"i": i} for i in range(6)])
            new_end = q.stats().log_bytes
        record = (new_end - end) // 6  # equal-sized records
        keep = end + 2 * record
        data = log_path(self.dir).read_bytes()
        write_at(log_path(self.dir), keep, bytes(new_end - keep))
        q = self.assertRepaired(fingerprint, end, data[end:keep])
        self.assertFalse(any(j.payload == {"i": 0} for j in q.list_jobs()))

    def test_a_torn_tail_found_by_a_live_handle_is_cut_before_it_appends(self) -> None:
        fingerprint, end = self.populated()
        q = self.open()
        write_at(log_path(self.dir), end, b"\x07" * 50)  # a peer died mid-write
        q.enqueue("next")
        expected = store_of(q).state.fingerprint()
        self.assertNotEqual(expected, fingerprint)
        q.close()
        self.assertReopensAs(expected)


class ReadonlyTest(FileQueueTestCase):
    def test_readonly_reports_a_torn_tail_but_repairs_nothing(self) -> None:
        fingerprint, end = self.populated()
        write_at(log_path(self.dir), end, b"garbage!")
        before = tree_digest(self.tmp)
        q = self.assertReopensAs(fingerprint, readonly=True)
        self.assertEqual((q.recovery.torn_offset, q.recovery.repaired, q.recovery.side_file),
                         (end, False, None))
        self.assertIn("read-only", q.recovery.describe())
        q.list_jobs()
        q.close()
        self.assertEqual(tree_digest(self.tmp), before)

    def test_readonly_refuses_every_write(self) -> None:
        self.populated()
        q = self.open(readonly=True)
        before = tree_digest(self.tmp)
        for call in (lambda: q.enqueue("x"), q.lease, q.purge, q.compact,
                     lambda: q.requeue_dead()):
            with self.subTest(call=call):
                self.assertRaises(NobrokerError, call)
        self.assertEqual(tree_digest(self.tmp), before)

    def test_readonly_does_not_create_a_missing_directory(self) -> None:
        self.assertRaises(NobrokerError, Queue, self.dir, readonly=True)
        self.assertFalse(self.dir.exists())

    def test_readonly_creates_nothing_in_a_directory_without_the_queue(self) -> None:
        self.dir.mkdir()
        self.assertRaises(NobrokerError, Queue, self.dir, readonly=True)
        self.assertEqual(list(self.dir.iterdir()), [])

    def test_a_readonly_handle_sees_a_writers_later_records(self) -> None:
        writer = self.open()
        reader = self.open(readonly=True)
        writer.enqueue("x")
        self.assertEqual([j.payload for j in reader.list_jobs()], ["x"])
        writer.compact()
        writer.enqueue("y")
        self.assertEqual([j.payload for j in reader.list_jobs()], ["x", "y"])


class SameProcessHandlesTest(FileQueueTestCase):
    def test_two_handles_see_each_others_writes(self) -> None:
        q1, q2 = self.open(), self.open()
        job = q1.enqueue("from q1")
        (leased,) = q2.lease()
        self.assertEqual(leased.id, job.id)
        self.assertEqual(q1.get(job.id).state, JobState.LEASED)
        q1.ack(leased)
        self.assertEqual(q2.stats().done, 1)
        q2.compact()
        q1.enqueue("after compaction")
        self.assertEqual([j.payload for j in q2.list_jobs()], ["after compaction"])
        self.assertEqual(store_of(q1).state.fingerprint(), store_of(q2).state.fingerprint())

    def test_threads_on_two_handles_neither_deadlock_nor_lose_writes(self) -> None:
        handles = [self.open(), self.open()]
        errors: list[BaseException] = []

        def work(q: Queue, tag: int) -> None:
            try:
                for i in range(40):
                    q.enqueue({"t": tag, "i": i})
                    if i % 4 == 0:
                        for job in q.lease(2):
                            q.ack(job)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(handles[n % 2], n)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        self.assertFalse(any(t.is_alive() for t in threads), "deadlock")
        self.assertEqual(errors, [])
        stats = handles[0].stats()
        self.assertEqual(stats.pending + stats.done, 160)
        self.assertEqual(handles[1].stats(), stats)
        for q in handles:
            q.close()
        with Queue(self.dir) as fresh:
            self.assertEqual(store_of(fresh).state.fingerprint(),
                             store_of(handles[0]).state.fingerprint())


class CompactionTest(FileQueueTestCase):
    def build(self, q: Queue, clock: FakeClock) -> Job:
        jobs = q.enqueue_many([{"n": i, "pad": "x" * 200} for i in range(200)])
        leased = q.lease(190)
        q.ack_many(leased[:150])
        for job in leased[150:160]:
            q.nack(job, error="retry")
        for job in leased[160:170]:
            q.nack(job, error="dead", delay=0)
        q.enqueue("keyed", job_id="k")
        del jobs, clock
        return leased[170]  # leases 170..189 stay open

    def test_compaction_flips_the_generation_keeps_the_state_and_shrinks_the_log(self) -> None:
        clock = FakeClock()
        q = self.open(clock=clock, max_attempts=1)
        still_leased = self.build(q, clock)
        before_fp, before_bytes = store_of(q).state.fingerprint(), q.stats().log_bytes
        before_payloads = {j.id: j.payload for j in q.list_jobs()}
        result = q.compact()
        self.assertEqual((result.old_generation, result.new_generation), (0, 1))
        self.assertEqual((self.dir / "default.current").read_bytes(), b"1\n")
        self.assertFalse(log_path(self.dir, 0).exists(), "old generation removed")
        self.assertTrue(log_path(self.dir, 1).exists())
        self.assertEqual(store_of(q).state.fingerprint(), before_fp)
        self.assertEqual({j.id: j.payload for j in q.list_jobs()}, before_payloads)
        self.assertLess(q.stats().log_bytes, before_bytes / 3)
        self.assertEqual(result.bytes_before, before_bytes)
        self.assertEqual(result.bytes_after, q.stats().log_bytes)
        self.assertEqual(result.live_jobs, q.stats().total)
        self.assertEqual(q.stats().generation, 1)
        q.ack(still_leased)  # a lease survives compaction with its token
        expected = store_of(q).state.fingerprint()
        q.close()
        reopened = self.assertReopensAs(expected)
        self.assertEqual(reopened.recovery.generation, 1)

    def test_each_compaction_moves_to_the_next_generation_and_removes_the_last(self) -> None:
        q = self.open()
        q.enqueue("x")
        for generation in (1, 2, 3):
            self.assertEqual(q.compact().new_generation, generation)
            logs = sorted(p.name for p in self.dir.glob("default.*.log"))
            self.assertEqual(logs, [log_path(self.dir, generation).name])
        self.assertEqual([j.payload for j in q.list_jobs()], ["x"])

    def test_compaction_removes_leftovers_but_never_unrelated_or_side_files(self) -> None:
        q = self.open()
        q.enqueue("x")
        (self.dir / "default.000007.log").write_bytes(b"orphan of a crashed compaction")
        (self.dir / "default.current.tmp").write_bytes(b"9\n")
        (self.dir / "default.000000.log.torn-99").write_bytes(b"evidence")
        (self.dir / "notes.txt").write_bytes(b"mine")
        (self.dir / "other.000000.log").write_bytes(b"another queue")
        q.compact()
        names = {p.name for p in self.dir.iterdir()}
        self.assertNotIn("default.000007.log", names)
        self.assertNotIn("default.current.tmp", names)
        self.assertLessEqual({"default.000000.log.torn-99", "notes.txt", "other.000000.log"},
                             names)

    def test_a_lone_surrogate_payload_survives_compaction(self) -> None:
        q = self.open()
        q.enqueue("\ud800 lone")
        q.compact()
        self.assertEqual(q.list_jobs()[0].payload, "\ud800 lone")

    def test_a_lease_reads_its_payloads_from_its_generation_after_a_compaction(self) -> None:
        # Leased jobs' payloads are read after the lock is released (FileBackend.
        # _leased_views); a compaction in between retires their generation, which
        # must stay open for them until they are read.
        from nobroker.file import views as file_views
        from nobroker.file.backend import FileBackend
        from nobroker.file.log.logfile import LogFile

        q = self.open(auto_compact=None)
        q.enqueue_many([{"n": i, "pad": "x" * 300} for i in range(40)])
        for job in q.lease(30):
            q.ack(job)
        views_of, close = FileBackend._leased_views, LogFile.close
        payload = file_views.read_payload
        compactions: list[int] = []
        closed: set[int] = set()
        kept: list[LogFile] = []  # alive, so that no later log takes a closed one's id
        read_closed: list[str] = []

        def compact_first(backend: FileBackend, entries: list[object]) -> object:
            views = views_of(backend, entries)  # type: ignore[arg-type]

            def later(source: LogFile) -> object:
                compactions.append(backend.handle.compact().new_generation)
                return views(source)
            return later

        def closing(log: LogFile) -> None:
            closed.add(id(log))
            kept.append(log)
            close(log)

        def reading(source: LogFile, entry: object) -> object:
            if id(source) in closed:
                read_closed.append(source.path)
            return payload(source, entry)  # type: ignore[arg-type]

        with mock.patch.object(FileBackend, "_leased_views", compact_first), \
                mock.patch.object(LogFile, "close", closing), \
                mock.patch.object(file_views, "read_payload", reading):
            leased = q.lease(3)
            following = q.ack_and_lease(leased[0])
        self.assertEqual(compactions, [1, 2])
        self.assertEqual(read_closed, [])
        self.assertEqual([job.payload["n"] for job in leased], [30, 31, 32])
        assert following is not None
        self.assertEqual(following.payload, {"n": 33, "pad": "x" * 300})
        self.assertEqual(q.get(following.id).payload["n"], 33)


class ShortWritesTest(FileQueueTestCase):
    def test_short_writes_are_continued_until_every_byte_is_written(self) -> None:
        fs = ShortWriting()
        with file_queue(self.dir, fs=fs) as q:
            q.enqueue({"n": 1, "pad": "x" * 100})
            job = q.lease_one()
            assert job is not None
            q.ack_and_lease(job)
            q.enqueue_many([{"n": i} for i in range(2, 12)])
        self.assertGreater(fs.short, 3)
        with self.open() as q:
            self.assertEqual(q.stats().pending, 10)
            self.assertEqual(q.stats().done, 1)


class ReadForwardTest(FileQueueTestCase):
    def test_reading_a_few_peer_batches_forward_takes_one_read(self) -> None:
        # What each call of N worker processes does first: a few small batches of
        # its peers, in the one read that finds nothing new when nobody wrote.
        with file_queue(self.dir, fsync=False) as writer:
            writer.enqueue_many([{"n": i} for i in range(10)])
            fs = CountingReads()
            with file_queue(self.dir, fs=fs, fsync=False) as reader:
                reader.stats()
                job = writer.lease_one()
                for _ in range(5):
                    job = writer.ack_and_lease(job)  # type: ignore[arg-type]
                fs.preads = 0
                stats = reader.stats()
                self.assertEqual(fs.preads, 1)
                self.assertEqual((stats.done, stats.leased), (5, 1))


class LeasedPayloadsTest(FileQueueTestCase):
    def test_jobs_leased_together_read_their_payloads_in_one_read(self) -> None:
        fs = CountingReads()
        with file_queue(self.dir, fs=fs, fsync=False) as q:
            q.enqueue_many([{"n": i} for i in range(16)])
            fs.preads = 0
            jobs = q.lease(16)
            self.assertEqual([job.payload for job in jobs], [{"n": i} for i in range(16)])
            self.assertLessEqual(fs.preads, 2, "one read forward, one for the payloads")
            q.ack_many(jobs)
            q.enqueue_many([{"n": i} for i in range(8)])
            q.enqueue_many([{"n": i} for i in range(8, 16)], priority=1)
            fs.preads = 0
            jobs = q.lease(16)  # the later enqueued first: backwards in the log
            self.assertEqual([job.payload for job in jobs],
                             [{"n": i} for i in [*range(8, 16), *range(8)]])
            self.assertLessEqual(fs.preads, 2, "one read forward, one for the payloads")

    def test_jobs_far_apart_in_the_log_are_read_one_by_one_with_their_payloads(self) -> None:
        big = "x" * 100_000  # more than read_payloads reads ahead
        with file_queue(self.dir, fsync=False) as q:
            q.enqueue_many([{"n": 0}])
            q.enqueue_many([big, {"n": 2}])
            q.enqueue({"n": 3}, priority=1)  # leased first: the reads go backwards too
            jobs = q.lease(4)
            self.assertEqual([job.payload for job in jobs], [{"n": 3}, {"n": 0}, big, {"n": 2}])
            self.assertEqual(q.ack_many_and_lease(jobs[:2], 2), [])


class CountingReads(FileSystem):
    preads = 0

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        self.preads += 1
        return super().pread(fd, size, offset)


class ShortWriting(FileSystem):
    """Writes at most 7 bytes a call, as a kernel may."""

    short = 0

    def pwrite(self, fd: int, data: bytes, offset: int) -> int:
        if len(data) > 7:
            self.short += 1
            data = data[:7]
        return super().pwrite(fd, data, offset)


class AutoCompactionTest(FileQueueTestCase):
    def small(self, auto_compact: float | None) -> Queue:
        """A queue that auto-compacts from 4 KiB of log, not 1 MiB."""
        q: Queue = file_queue(self.dir, auto_compact=auto_compact, min_compact_bytes=4096)
        self.addCleanup(q.close)
        return q

    def churn(self, q: Queue) -> None:
        for _ in range(6):
            q.enqueue_many([{"pad": "x" * 100}] * 10)
            q.ack_many(q.lease(10))

    def test_auto_compaction_runs_once_dead_records_pass_the_threshold(self) -> None:
        q = self.small(auto_compact=0.5)
        self.churn(q)
        self.assertGreaterEqual(q.stats().generation, 1)
        self.assertLess(q.stats().log_bytes, 4096)
        self.assertTrue((self.dir / "default.current").exists())

    def test_auto_compact_none_never_compacts(self) -> None:
        q = self.small(auto_compact=None)
        self.churn(q)
        self.assertEqual(q.stats().generation, 0)
        self.assertGreater(q.stats().log_bytes, 4096)

    def test_a_small_log_is_never_auto_compacted(self) -> None:
        q = self.open(auto_compact=0.5)
        self.churn(q)
        self.assertEqual(q.stats().generation, 0)


class CreationCrashTest(FileQueueTestCase):
    def test_an_empty_or_short_generation_zero_log_is_created_again(self) -> None:
        header = FILE_HEADER.pack(b"NOBROKER", 1, 0, 0)
        for size in (0, 1, 8, 15):
            with self.subTest(size=size):
                self.dir.mkdir(exist_ok=True)
                log_path(self.dir).write_bytes(header[:size])
                with Queue(self.dir) as q:
                    self.assertTrue(any("re-created" in n for n in q.recovery.notes),
                                    q.recovery.notes)
                    self.assertFalse(q.recovery.clean)
                    q.enqueue("works")
                with Queue(self.dir) as q:
                    self.assertEqual([j.payload for j in q.list_jobs()], ["works"])
                    self.assertTrue(q.recovery.clean)
                for path in self.dir.iterdir():
                    path.unlink()

    def test_a_short_generation_zero_log_is_not_re_created_by_a_readonly_open(self) -> None:
        self.dir.mkdir()
        log_path(self.dir).write_bytes(b"NOBRO")
        self.assertRaises(NobrokerError, Queue, self.dir, readonly=True)
        self.assertEqual(log_path(self.dir).read_bytes(), b"NOBRO")

    def test_a_short_log_named_by_current_is_corruption_not_a_creation_crash(self) -> None:
        with Queue(self.dir) as q:
            q.enqueue("x")
            q.compact()
        log_path(self.dir, 1).write_bytes(b"NOBROKER")
        before = tree_digest(self.tmp)
        self.assertRaises(CorruptLogError, Queue, self.dir)
        self.assertEqual(tree_digest(self.tmp), before)


class StatsAreCountersTest(FileQueueTestCase):
    def test_stats_never_walks_the_jobs(self) -> None:
        q = self.open()
        q.enqueue_many(range(100))
        q.lease(10)

        def walk(*args: object, **kwargs: object) -> object:
            raise AssertionError("stats() walked the job table")

        with mock.patch.object(store_of(q).state, "entries", walk):
            stats = q.stats()
        self.assertEqual((stats.pending, stats.leased, stats.total), (90, 10, 100))


if __name__ == "__main__":
    unittest.main()
