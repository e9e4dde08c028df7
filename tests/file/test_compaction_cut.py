"""A compaction's unlocked catch-up and a batch its writer cut afterwards.

The catch-up copies, without the queue's lock, the complete batches others
appended to the old generation after the snapshot. A batch can be complete
on disk and then cut again by its writer, still under the lock: the undo in
QueueHandle.commit after the writer's own state refused the batch. The next
writer may then fill the same offsets with other bytes. The claim: the
switch checks, under the lock, that what was copied is still the old log's
bytes, so the new generation never holds a batch the old log no longer has.
After the compaction a fresh replay equals a replay of the old generation
as it ended: no phantom job, no committed job lost, the queue opens.

One process, three handles of their own (each with its own file system
object, so its own SharedLock), driven step by step from inside the
compaction: the writer's cut runs the compactor's catch-up first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harness.support import FakeClock, TempDirTestCase, file_queue, store_of

from nobroker import Queue, QueueClosedError
from nobroker.file.disk.fs import FileSystem
from nobroker.file.generations import compaction


class CutAfterCatchUp(FileSystem):
    """A writer's file system whose next cut of a log first lets `before_cut` run:
    the moment a batch it wrote whole is on disk and about to be undone."""

    def __init__(self) -> None:
        self.before_cut: Callable[[], None] | None = None

    def ftruncate(self, fd: int, length: int) -> None:
        hook, self.before_cut = self.before_cut, None
        if hook is not None:
            hook()
        super().ftruncate(fd, length)


def fresh_fingerprint(directory: str) -> tuple[object, ...]:
    """What a fresh open replays, checkpoints off (payload locations not included)."""
    with file_queue(directory, readonly=True, checkpoints=False) as fresh:
        return store_of(fresh).state.fingerprint()  # type: ignore[no-any-return]


class CatchUpOfACutBatchTest(TempDirTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.directory = str(self.tmp / "q")
        self.clock = FakeClock()  # equal clocks: equally long payloads, equal batches
        self.compactor = file_queue(self.directory, fs=FileSystem(), fsync=False,
                                    clock=self.clock, auto_compact=None)
        self.addCleanup(self.compactor.close)
        self.compactor.enqueue("first")
        self.compactor.ack(self.compactor.lease_one())  # a dead record: worth compacting
        self.compactor.enqueue("second")

    def compact_with_a_cut_batch(self, refill: bool) -> tuple[Any, tuple[object, ...]]:
        """compactor.compact(), during which, after the snapshot and before the
        compactor's own catch-up, a writer appends job "doomed", its state refuses
        it, the compactor's unlocked catch-up copies it, and the writer cuts it;
        then, if asked, another writer enqueues "refill" at the same offsets.
        Returns the result and the fingerprint of the old generation as it ended."""
        fs = CutAfterCatchUp()
        writer = file_queue(self.directory, fs=fs, fsync=False, clock=self.clock,
                            auto_compact=None)
        self.addCleanup(writer.close)
        other = file_queue(self.directory, fs=FileSystem(), fsync=False, clock=self.clock,
                           auto_compact=None)
        self.addCleanup(other.close)
        writer.stats()  # has read all: the next batch it applies is its own
        other.stats()
        old_end: list[tuple[object, ...]] = []
        copied: list[int] = []
        real = compaction.prepare_generation

        def prepare(*args: Any, **kwargs: Any) -> compaction.Prepared:
            prepared = real(*args, **kwargs)
            if old_end:
                return prepared  # a second try runs undisturbed

            def catch_up() -> None:
                before = prepared.upto
                prepared.catch_up()  # no lock: the writer holds it, mid-undo
                copied.append(prepared.upto - before)

            def refuse(batch: Any) -> None:
                raise ValueError("a planted planning bug")

            fs.before_cut = catch_up
            store_of(writer).state.apply_batch = refuse
            with self.assertRaises(QueueClosedError):
                writer.enqueue("doomed")
            if refill:
                other.enqueue("refill")  # as long as "doomed": the same offsets
                self.assertEqual(store_of(other).log_bytes, prepared.upto,
                                 "the refill did not land where the cut batch was")
            old_end.append(fresh_fingerprint(self.directory))
            return prepared

        compaction.prepare_generation = prepare  # type: ignore[assignment]
        try:
            result = self.compactor.compact()
        finally:
            compaction.prepare_generation = real  # type: ignore[assignment]
        self.assertGreater(copied[0], 0, "the catch-up never copied the doomed batch")
        return result, old_end[0]

    def check(self, result: Any, old_end: tuple[object, ...], jobs: list[str]) -> None:
        self.assertEqual(result.new_generation, 1)
        with Queue(self.directory) as fresh:  # opens: no batch replay refuses
            self.assertEqual(sorted(job.payload for job in fresh.list_jobs()), jobs)
        self.assertEqual(fresh_fingerprint(self.directory), old_end,
                         "the new generation is not the old one as it ended")
        self.compactor.stats()
        self.assertEqual(store_of(self.compactor).state.fingerprint(), old_end)
        self.assertEqual(store_of(self.compactor).counters.compactions_abandoned, 1)

    def test_a_copied_batch_its_writer_cut_is_not_switched_to(self) -> None:
        result, old_end = self.compact_with_a_cut_batch(refill=False)
        self.check(result, old_end, ["second"])

    def test_a_copied_batch_cut_and_refilled_at_the_same_offsets_is_caught_by_its_bytes(
            self) -> None:
        result, old_end = self.compact_with_a_cut_batch(refill=True)
        self.check(result, old_end, ["refill", "second"])
        self.compactor.enqueue("after")  # and the compactor writes on from the right place
        with Queue(self.directory) as fresh:
            self.assertEqual(sorted(job.payload for job in fresh.list_jobs()),
                             ["after", "refill", "second"])
