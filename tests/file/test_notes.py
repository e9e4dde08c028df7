"""Progress and metadata in the replay (format 1.2), without a disk: PROGRESS records
(type 20) in, each job's note out, kept exactly as long as the job (or its key) is."""

from __future__ import annotations

import random
import unittest
from typing import Any

import harness.support  # noqa: F401  (puts src/ on sys.path)

from file.test_state import (
    Log,
    ack,
    ack_result,
    cancel,
    delete,
    enq,
    forget,
    lease,
    nack,
    progress,
    purge,
    random_history,
    replay,
    snapshot_of,
    via_checkpoint,
)
from nobroker.file.generations import checkpoint
from nobroker.file.state.notes import Note
from nobroker.file.state.state import QueueState, ReplayError


def leased(job_id: str = "j", **fields: Any) -> tuple[QueueState, Log]:
    s, log = QueueState(), Log()
    s.apply_batch(log.batch(enq(job_id, **fields)))
    s.apply_batch(log.batch(lease(job_id, 1, until=50.0)))
    return s, log


class ProgressRecordTest(unittest.TestCase):
    def test_a_progress_record_is_the_jobs_whole_note(self) -> None:
        s, log = leased()
        s.apply_batch(log.batch(progress("j", 1, [0.25, "a quarter"], {"a": 1})))
        self.assertEqual(s.notes.get("j"), Note((0.25, "a quarter"), {"a": 1}))
        # The next replaces it, what it leaves out included: writers merge, replay replaces.
        s.apply_batch(log.batch(progress("j", 1, [1, None])))
        self.assertEqual(s.notes.get("j"), Note((1.0, None), {}))
        s.apply_batch(log.batch(progress("j", 1)))
        self.assertIsNone(s.notes.get("j"))

    def test_a_stale_holders_progress_is_corruption_as_its_ack_would_be(self) -> None:
        s, log = leased()
        with self.assertRaisesRegex(ReplayError, "token 7 is not job 'j'"):
            s.apply_batch(log.batch(progress("j", 7, [0.5, None])))
        self.assertIsNone(s.notes.get("j"))

    def test_only_a_leased_job_takes_progress(self) -> None:
        s, log = QueueState(), Log()
        s.apply_batch(log.batch(enq("j")))
        with self.assertRaisesRegex(ReplayError, "pending, expected leased"):
            s.apply_batch(log.batch(progress("j", 1, [0.5, None])))

    def test_malformed_notes_are_refused_before_anything_changes(self) -> None:
        for pg, m in (([1.5, None], None), ([0.5], None), (["x", None], None),
                      ([0.5, 3], None), ([0.5, None, 1], None),
                      (None, [1]), (None, "meta"), ([-0.1, None], None)):
            with self.subTest(pg=pg, m=m):
                s, log = leased()
                s.apply_batch(log.batch(progress("j", 1, [0.5, "ok"])))
                record = progress("j", 1, None, None)
                record[1].update({} if pg is None else {"pg": pg})
                record[1].update({} if m is None else {"m": m})
                with self.assertRaises(ReplayError):
                    s.apply_batch(log.batch(record))
                self.assertEqual(s.notes.get("j"), Note((0.5, "ok"), {}))


class EnqueueMetaTest(unittest.TestCase):
    """ENQUEUE's `m` (enqueue(meta=), format 1.2): the job's note from the start."""

    def test_an_enqueue_with_metadata_starts_the_jobs_note(self) -> None:
        s, log = QueueState(), Log()
        s.apply_batch(log.batch(enq("j", m={"traceparent": "00-ab"})))
        self.assertEqual(s.notes.get("j"), Note(None, {"traceparent": "00-ab"}))
        s.apply_batch(log.batch(lease("j", 1), progress("j", 1, [0.5, None], {"a": 1})))
        self.assertEqual(s.notes.get("j"), Note((0.5, None), {"a": 1}), "PROGRESS replaces")
        with self.assertRaisesRegex(ReplayError, "must be an object"):
            QueueState().apply_batch(Log().batch(enq("k", m=[1])))  # type: ignore[arg-type]

    def test_metadata_in_enqueue_many_style_batches_is_kept_by_the_one_step_path(self
                                                                                 ) -> None:
        from nobroker.file.state.vocabulary import seq_id
        records = [enq(seq_id(n), p={"n": n}) for n in range(6)]
        records[3] = enq(seq_id(3), p={"n": 3}, m={"third": True})
        s = replay([Log().batch(*records)])
        self.assertEqual(s.notes.by_job, {seq_id(3): Note(None, {"third": True})})
        self.assertEqual(len(s.jobs), 6)


class NoteLifetimeTest(unittest.TestCase):
    """A note lives while the queue keeps the job: live, dead, kept finished, or as a key."""

    def noted(self, **fields: Any) -> tuple[QueueState, Log]:
        s, log = leased(**fields)
        s.apply_batch(log.batch(progress("j", 1, [0.5, "half"], {"k": "v"})))
        return s, log

    def test_kept_through_a_retry_and_in_the_dead_letter_queue_and_gone_with_delete(self) -> None:
        s, log = self.noted(ma=2)
        s.apply_batch(log.batch(nack("j", 1)))
        self.assertEqual(s.notes.get("j"), Note((0.5, "half"), {"k": "v"}))
        s.apply_batch(log.batch(lease("j", 2)))
        s.apply_batch(log.batch(nack("j", 2)))
        self.assertEqual(str(s.jobs["j"].state), "dead")
        self.assertIsNotNone(s.notes.get("j"))
        s.apply_batch(log.batch(delete("j")))
        self.assertIsNone(s.notes.get("j"))

    def test_kept_with_a_result_or_a_cancel_until_forgotten(self) -> None:
        for finish in (lambda: ack_result("j", 1, [1], 5.0, 10.0), lambda: cancel("j")):
            s, log = self.noted()
            s.apply_batch(log.batch(finish()))
            self.assertIsNotNone(s.notes.get("j"))
            s.apply_batch(log.batch(forget("j")))
            self.assertIsNone(s.notes.get("j"))

    def test_a_plain_ack_drops_it_unless_the_key_is_remembered(self) -> None:
        s, log = self.noted()
        s.apply_batch(log.batch(ack("j", 1)))
        self.assertIsNone(s.notes.get("j"))
        s, log = self.noted(keyed=True)
        s.apply_batch(log.batch(ack("j", 1)))
        self.assertEqual(s.notes.get("j"), Note((0.5, "half"), {"k": "v"}))
        self.assertEqual(snapshot_of(s).notes.get("j"), s.notes.get("j"), "the KEY record")
        # The key enqueued again is a new job: it starts without the old note.
        s.apply_batch(log.batch(enq("j", keyed=True)))
        self.assertIsNone(s.notes.get("j"))

    def test_a_purge_drops_the_notes_of_the_pending_jobs_it_removes(self) -> None:
        s, log = self.noted(ma=3)
        s.apply_batch(log.batch(enq("other"), lease("other", 2)))
        s.apply_batch(log.batch(progress("other", 2, [0.1, None])))
        s.apply_batch(log.batch(nack("j", 1)))  # pending again, its note kept
        s.apply_batch(log.batch(purge()))
        self.assertIsNone(s.notes.get("j"))
        self.assertIsNotNone(s.notes.get("other"), "a leased job is not purged")


class NoteSnapshotTest(unittest.TestCase):
    def test_snapshots_and_checkpoints_carry_every_note(self) -> None:
        noted = 0
        for seed in range(8):
            s = replay(random_history(random.Random(900 + seed), 300, generated=seed % 2 == 0))
            noted += len(s.notes.by_job)
            for rebuilt in (snapshot_of(s), via_checkpoint(s)):
                self.assertEqual(rebuilt.notes.by_job, s.notes.by_job, f"seed {seed}")
                self.assertEqual(rebuilt.fingerprint(), s.fingerprint())
        self.assertGreater(noted, 5, "the histories must leave notes to compare")

    def test_a_checkpoint_without_notes_is_not_used(self) -> None:
        s, _ = leased()
        data = bytearray(checkpoint.encode(s, 0, 1 << 20, 7))
        data[:8] = b"NBCKPT04"
        with self.assertRaises(checkpoint.CheckpointError):
            checkpoint.decode(bytes(data), 0, 1 << 20, lambda _: 7)

    def test_a_note_changes_the_fingerprint(self) -> None:
        s, log = leased()
        before = s.fingerprint()
        s.apply_batch(log.batch(progress("j", 1, [0.5, None])))
        self.assertNotEqual(s.fingerprint(), before)


if __name__ == "__main__":
    unittest.main()
