"""Damaged and hostile files: every case ends typed, and corruption touches nothing.

The catalogue of docs (reliability research section 10.1-10.3). Each case
ends in exactly one of:
- a clean open whose state is the replay of the longest valid prefix, with
  a torn tail cut into a side file and reported (damage no later batch
  follows: a writer that died);
- CorruptLogError naming the path, the offset and a reason, with no byte,
  name or permission in the directory changed (damage inside durable data,
  or a file no crash can produce).
Never a raw struct.error, KeyError, UnicodeDecodeError or RecursionError:
assertRaises(CorruptLogError) lets any other exception fail the test.
"""

from __future__ import annotations

import random
import struct
import unittest
from collections.abc import Callable
from pathlib import Path

from harness.support import FakeClock, TempDirTestCase, file_queue, store_of, tree_digest

from nobroker import CorruptLogError, Job, NobrokerError, Queue
from nobroker.file.inspection import read_records
from nobroker.file.log.framing import FILE_HEADER, MAGIC, encode_file_header, encode_record
from nobroker.file.log.records import RecordType

LAST = 8  # index of the last batch
MID = 4  # a batch with later batches after it
ACK = 6  # the batch holding the one ACK


def log_path(directory: Path, generation: int = 0) -> Path:
    return directory / f"default.{generation:06d}.log"


class DamagedLogTestCase(TempDirTestCase):
    """A queue of nine small batches, one per call; `spans[i]` is batch i's (start, end)."""

    def setUp(self) -> None:
        super().setUp()
        self.dir = self.tmp / "q"
        self.path = log_path(self.dir)
        clock = FakeClock()
        self.fingerprints: dict[int, tuple[object, ...]] = {}
        held: list[Job] = []
        with Queue(self.dir, clock=clock, fsync=False, max_attempts=1) as q:
            self.fingerprints[16] = store_of(q).state.fingerprint()
            steps: list[Callable[[], object]] = [
                lambda: q.enqueue({"n": 1}), lambda: q.enqueue({"n": 2}),
                lambda: q.enqueue_many([{"n": 3}, {"n": 4}, {"n": 5}]),
                lambda: q.lease(1), lambda: q.enqueue({"n": 6}, job_id="six"),
                lambda: held.extend(q.lease(1)), lambda: q.ack(held[0]),
                lambda: q.enqueue({"n": 7}), lambda: q.enqueue({"n": 8})]
            for step in steps:
                clock.advance(1)
                step()
                self.fingerprints[q.stats().log_bytes] = store_of(q).state.fingerprint()
            self.end = q.stats().log_bytes
        self.data = self.path.read_bytes()
        self.spans: list[tuple[int, int]] = []
        self.records = list(read_records(str(self.path)))
        start = 16
        for rec in self.records:
            if rec.error is None and rec.crc_ok and not rec.more:
                self.spans.append((start, rec.offset + 9 + rec.length))
                start = self.spans[-1][1]
        self.assertEqual(len(self.spans), LAST + 1)
        self.assertEqual(self.spans[-1][1], self.end)

    # -- building damage ------------------------------------------------------

    def write(self, data: bytes, path: Path | None = None) -> None:
        (path or self.path).write_bytes(data)

    def replace_batch(self, index: int, replacement: bytes) -> int:
        """Put `replacement` where batch `index` was; returns its offset."""
        start, stop = self.spans[index]
        self.write(self.data[:start] + replacement + self.data[stop:])
        return start

    def record_at(self, offset: int) -> int:
        """The offset of the record holding byte `offset`."""
        return max(r.offset for r in self.records if r.offset <= offset)

    def batch_number(self, index: int) -> int:
        return index + 1

    # -- outcomes -------------------------------------------------------------

    def assertCorrupt(self, offset: int | None = None, reason: str | None = None,
                      path: Path | None = None) -> CorruptLogError:
        before = tree_digest(self.tmp)
        with self.assertRaises(CorruptLogError) as caught:
            Queue(self.dir).close()
        exc = caught.exception
        self.assertEqual(tree_digest(self.tmp), before, "opening modified a file")
        self.assertEqual(exc.path, str(path or self.path))
        if offset is not None:
            self.assertEqual(exc.offset, offset, exc.reason)
        if reason is not None:
            self.assertIn(reason, exc.reason)
        self.assertIn(str(exc.offset), str(exc))
        with self.assertRaises(CorruptLogError):  # and it stays refused: nothing was "fixed"
            Queue(self.dir, readonly=True).close()
        return exc

    def assertTorn(self, at: int) -> None:
        with Queue(self.dir) as q:
            self.assertEqual(q.recovery.torn_offset, at, q.recovery.describe())
            self.assertTrue(q.recovery.repaired)
            self.assertEqual(store_of(q).state.fingerprint(), self.fingerprints[at])
        with Queue(self.dir) as q:
            self.assertTrue(q.recovery.clean, q.recovery.describe())


class ControlTest(DamagedLogTestCase):
    def test_the_undamaged_log_opens_clean_and_unchanged(self) -> None:
        before = tree_digest(self.tmp)
        with Queue(self.dir) as q:
            self.assertTrue(q.recovery.clean)
            self.assertEqual(store_of(q).state.fingerprint(), self.fingerprints[self.end])
        self.assertEqual(tree_digest(self.tmp), before)


class HeaderTest(DamagedLogTestCase):
    def test_random_bytes_as_the_log_are_corruption(self) -> None:
        rng = random.Random(1)
        for size in (16, 17, 100, 4096, 65536):
            with self.subTest(size=size):
                self.write(rng.randbytes(size))
                self.assertCorrupt(offset=0, reason="magic")

    def test_short_garbage_that_is_no_header_prefix_is_not_taken_for_a_creation_crash(self
                                                                                     ) -> None:
        # A crash while creating the queue leaves a prefix of the header (or zeros);
        # these bytes are someone else's file and must not be deleted.
        for data in (b"hello", b"#!/bin/sh\n", b"\xff" * 15):
            with self.subTest(data=data):
                self.write(data)
                self.assertCorrupt(offset=0)

    def test_bad_magic_is_corruption(self) -> None:
        self.write(b"NOBROKEX" + self.data[8:])
        self.assertCorrupt(offset=0, reason="magic")

    def test_a_newer_format_version_is_refused_and_named(self) -> None:
        self.write(FILE_HEADER.pack(MAGIC, 999, 0, 0) + self.data[16:])
        self.assertCorrupt(offset=0, reason="newer")

    def test_format_version_zero_is_refused(self) -> None:
        self.write(FILE_HEADER.pack(MAGIC, 0, 0, 0) + self.data[16:])
        self.assertCorrupt(offset=0, reason="version")

    def test_a_non_zero_reserved_field_is_refused(self) -> None:
        self.write(FILE_HEADER.pack(MAGIC, 1, 0, 7) + self.data[16:])
        self.assertCorrupt(offset=0, reason="reserved")

    def test_a_header_generation_that_disagrees_with_the_file_name_is_refused(self) -> None:
        self.write(encode_file_header(5) + self.data[16:])
        self.assertCorrupt(offset=0, reason="generation")


class CrcValidButInvalidTest(DamagedLogTestCase):
    """Records whose frame is perfect but whose content no writer produces."""

    def bad_payloads(self, number: int) -> dict[str, bytes]:
        head = b'{"b":%d' % number
        return {
            "truncated json": head + b',"id":',
            "not utf-8": head + b',"id":"\xff\xfe"}',
            "NaN": head + b',"id":"x","pr":0,"at":NaN,"t":0,"ma":1}',
            "overflowing float": head + b',"id":"x","pr":0,"at":1e999,"t":0,"ma":1}',
            "deep nesting": head + b',"p":' + b"[" * 100_000 + b"]" * 100_000 + b"}",
            "not an object": b"[1,2,3]",
            "no batch marker": b'{"id":"x"}',
        }

    def wrong_shapes(self, number: int) -> dict[str, tuple[int, bytes]]:
        b = number
        return {
            "id is an int": (RecordType.ENQUEUE,
                             b'{"b":%d,"id":5,"pr":0,"at":0,"t":0,"ma":1,"p":1}' % b),
            "priority is a bool": (
                RecordType.ENQUEUE, b'{"b":%d,"id":"x","pr":true,"at":0,"t":0,"ma":1,"p":1}' % b),
            "missing fields": (RecordType.ENQUEUE, b'{"b":%d,"id":"x"}' % b),
            "ack of an unknown job": (RecordType.ACK, b'{"b":%d,"id":"ghost","tok":1,"t":0}' % b),
            "unknown record type": (100, b'{"b":%d,"id":"x"}' % b),
            "batch number skips": (RecordType.ENQUEUE,
                                   b'{"b":%d,"id":"x","pr":0,"at":0,"t":0,"ma":1,"p":1}' % (b + 5)),
        }

    def test_invalid_json_mid_log_is_corruption_at_its_offset(self) -> None:
        for name, payload in self.bad_payloads(self.batch_number(MID)).items():
            with self.subTest(name):
                offset = self.replace_batch(MID, encode_record(RecordType.LEASE, payload))
                self.assertCorrupt(offset=offset)

    def test_invalid_json_at_the_tail_is_a_torn_tail(self) -> None:
        for name, payload in self.bad_payloads(self.batch_number(LAST)).items():
            with self.subTest(name):
                offset = self.replace_batch(LAST, encode_record(RecordType.ENQUEUE, payload))
                self.assertTorn(offset)

    def test_a_wrong_shape_mid_log_is_corruption_at_its_offset(self) -> None:
        for name, (rtype, payload) in self.wrong_shapes(self.batch_number(MID)).items():
            with self.subTest(name):
                offset = self.replace_batch(MID, encode_record(rtype, payload))
                exc = self.assertCorrupt()
                self.assertGreaterEqual(exc.offset, offset)
                self.assertLess(exc.offset, self.spans[MID + 1][0])

    def test_a_wrong_shape_at_the_tail_is_corruption_too(self) -> None:
        # No crash writes a CRC-valid record: this is a bug or a newer writer, and
        # cutting it would silently drop what that writer acknowledged.
        for name, (rtype, payload) in self.wrong_shapes(self.batch_number(LAST)).items():
            with self.subTest(name):
                offset = self.replace_batch(LAST, encode_record(rtype, payload))
                self.assertCorrupt(offset=offset)


class FrameDamageTest(DamagedLogTestCase):
    def patch_length(self, index: int, length: int) -> int:
        start = self.spans[index][0]
        data = bytearray(self.data)
        struct.pack_into("<I", data, start, length)
        self.write(bytes(data))
        return start

    def test_a_huge_length_at_the_tail_is_a_torn_tail(self) -> None:
        for length in (0xFFFFFFFF, 64 << 20, len(self.data)):
            with self.subTest(length=length):
                self.assertTorn(self.patch_length(LAST, length))

    def test_a_huge_length_mid_log_followed_by_later_batches_is_corruption(self) -> None:
        for length in (0xFFFFFFFF, 64 << 20, len(self.data)):
            with self.subTest(length=length):
                self.assertCorrupt(offset=self.patch_length(MID, length))

    def test_a_bit_flip_in_an_earlier_record_is_corruption_naming_its_offset(self) -> None:
        for index in range(LAST):
            start, stop = self.spans[index]
            for where in (start + 2, start + 4, start + 6, start + 12, stop - 2):
                with self.subTest(batch=index, byte=where - start):
                    data = bytearray(self.data)
                    data[where] ^= 0x10
                    self.write(bytes(data))
                    self.assertCorrupt(offset=self.record_at(where))

    def test_a_bit_flip_in_a_later_record_of_a_multi_record_batch_names_that_record(self
                                                                                    ) -> None:
        third = [r for r in self.records if r.offset >= self.spans[2][0]][2]
        data = bytearray(self.data)
        data[third.offset + 12] ^= 0x01
        self.write(bytes(data))
        self.assertCorrupt(offset=third.offset)

    def test_a_bit_flip_in_the_last_batch_is_a_torn_tail(self) -> None:
        start, stop = self.spans[LAST]
        data = bytearray(self.data)
        data[stop - 3] ^= 0x40
        self.write(bytes(data))
        self.assertTorn(start)

    def test_a_zeroed_region_mid_log_followed_by_later_batches_is_corruption(self) -> None:
        start, stop = self.spans[MID]
        self.write(self.data[:start] + bytes(stop - start) + self.data[stop:])
        self.assertCorrupt(offset=start)

    def test_length_zero_or_type_zero_mid_log_is_corruption(self) -> None:
        start, stop = self.spans[MID]
        for name, frame in (("length 0", struct.pack("<IBI", 0, 1, 77)),
                            ("type 0", struct.pack("<IBI", 3, 0, 77) + b"abc")):
            with self.subTest(name):
                self.write(self.data[:start] + frame + self.data[stop:])
                self.assertCorrupt(offset=start)

    def test_a_batch_cut_short_mid_log_is_corruption(self) -> None:
        # The first record of a three-record batch, then the next batch: the batch
        # never finished, yet later batches are intact, so this was durable data.
        start, stop = self.spans[2]
        first = self.records[[r.offset for r in self.records].index(start)]
        self.write(self.data[:start + 9 + first.length] + self.data[stop:])
        self.assertCorrupt()

    def test_random_damage_mid_log_is_always_typed_and_touches_nothing(self) -> None:
        rng = random.Random(5)
        start, stop = self.spans[1][0], self.spans[5][1]
        for _ in range(40):
            data = bytearray(self.data)
            pos = rng.randrange(start, stop)
            data[pos:pos + rng.randrange(1, 20)] = rng.randbytes(rng.randrange(1, 20))
            self.write(bytes(data))
            before = tree_digest(self.tmp)
            try:
                Queue(self.dir, readonly=True).close()
            except CorruptLogError:
                self.assertEqual(tree_digest(self.tmp), before)


class ZeroedSectorTest(TempDirTestCase):
    """A 512-byte sector in the middle of the log reads back as zeros (a lost or
    misdirected write): whether the batches after it may be cut depends on whether
    they were ever promised."""

    def zero_middle_sector(self, fsync: bool) -> tuple[Path, int]:
        directory = self.tmp / ("durable" if fsync else "unsynced")
        with Queue(directory, fsync=fsync) as q:
            for n in range(60):
                q.enqueue({"n": n, "pad": "x" * 150})
        for checkpoint in directory.glob("*.ckpt"):
            checkpoint.unlink()  # a checkpoint's CRC would catch it first
        path = log_path(directory)
        data = bytearray(path.read_bytes())
        sector = len(data.rstrip(b"\0")) // 2 // 512 * 512
        data[sector:sector + 512] = bytes(512)
        path.write_bytes(bytes(data))
        return directory, sector

    def test_zeros_before_batches_that_were_fsynced_after_them_are_refused(self) -> None:
        directory, sector = self.zero_middle_sector(fsync=True)
        before = tree_digest(self.tmp)
        with self.assertRaises(CorruptLogError) as caught:
            Queue(directory, readonly=True).close()
        with self.assertRaises(CorruptLogError):
            Queue(directory).close()
        self.assertEqual(tree_digest(self.tmp), before, "opening modified a file")
        self.assertLess(caught.exception.offset, sector + 512)
        self.assertIn("followed by intact batch", caught.exception.reason)

    def test_without_fsync_nothing_was_promised_so_the_rest_is_a_torn_tail(self) -> None:
        directory, sector = self.zero_middle_sector(fsync=False)
        with Queue(directory) as q:
            self.assertIsNotNone(q.recovery.torn_offset)
            self.assertLessEqual(q.recovery.torn_offset or 0, sector)
            self.assertLess(q.stats().pending, 60)


class CurrentFileTest(DamagedLogTestCase):
    def setUp(self) -> None:
        super().setUp()
        with Queue(self.dir) as q:
            q.compact()
            q.enqueue("after compaction")
        self.current = self.dir / "default.current"
        self.assertEqual(self.current.read_bytes(), b"1\n")

    def test_current_naming_a_missing_generation_is_corruption(self) -> None:
        self.current.write_bytes(b"7\n")
        self.assertCorrupt(path=self.current, reason="missing")

    def test_current_holding_garbage_is_corruption(self) -> None:
        for data in (b"", b"\n", b"  \n", b"one\n", b"-1\n", b"1\n2\n", b"1 \n", b"\x00" * 8,
                     b"\xff\xfe", b"9" * 40):
            with self.subTest(data=data):
                self.current.write_bytes(data)
                self.assertCorrupt(path=self.current, offset=0)

    def test_current_that_is_a_directory_is_corruption(self) -> None:
        self.current.unlink()
        self.current.mkdir()
        self.assertCorrupt(path=self.current)

    def test_current_that_is_a_symlink_is_refused(self) -> None:
        self.current.unlink()
        (self.dir / "elsewhere").write_bytes(b"1\n")
        self.current.symlink_to(self.dir / "elsewhere")
        self.assertCorrupt(path=self.current)

    def test_missing_current_with_generations_but_no_generation_zero_is_corruption(self
                                                                                  ) -> None:
        # Starting a fresh empty queue here would silently drop every job.
        self.current.unlink()
        self.assertFalse(log_path(self.dir, 0).exists())
        self.assertCorrupt(path=self.current)

    def test_a_generation_without_its_snapshot_is_corruption(self) -> None:
        # Generation 1's header on generation 0's records: two logs spliced.
        log_path(self.dir, 1).write_bytes(encode_file_header(1) + self.data[16:])
        for stale in self.dir.glob("*.ckpt"):
            stale.unlink()
        self.assertCorrupt(path=log_path(self.dir, 1), reason="snapshot")


class LockFileTest(DamagedLogTestCase):
    def test_a_lock_file_that_is_a_directory_is_a_typed_error_naming_it(self) -> None:
        lock = self.dir / "default.lock"
        lock.unlink()
        lock.mkdir()
        before = tree_digest(self.tmp)
        with self.assertRaises(NobrokerError) as caught:
            Queue(self.dir).close()
        self.assertIn(str(lock), str(caught.exception))
        self.assertEqual(tree_digest(self.tmp), before)


class CheckpointTest(DamagedLogTestCase):
    def test_a_bit_flip_below_a_checkpoint_is_still_reported_as_corruption(self) -> None:
        # A checkpoint is a cache of the log: it must not hide damage to durable
        # records that the log alone would have reported.
        with file_queue(self.dir, checkpoint_after_bytes=0) as q:
            q.enqueue("one more, so that close() saves a checkpoint")
        self.assertTrue(list(self.dir.glob("*.ckpt")), "setup: no checkpoint was written")
        start = self.spans[ACK][0]  # an ACK: no later read or compaction looks at it again
        self.assertEqual(self.records[[r.offset for r in self.records].index(start)].type, "ACK")
        data = bytearray(self.path.read_bytes())
        data[start + 12] ^= 0x01
        self.write(bytes(data))
        self.assertCorrupt(offset=start)


if __name__ == "__main__":
    unittest.main()
