"""The explorer has teeth: each classic durability bug, planted in nobroker, is caught.

An explorer that finds nothing proves nothing until it is shown to fail. Each
test here patches one bug into the core (unittest.mock.patch on the function or
method that would hold it), runs the explorer on a workload that exercises it,
and requires (1) at least one violation, (2) of the check that bug must break,
and (3) a report naming the source line that issued the operation the crash
state dropped or tore (as ALICE reports per source line). Reliability note
section 9.8 lists the bugs; the expected checks are in EXPECTED.

The planted bugs:
- no directory fsync after creating the first log (the recording FileSystem's
  fsync_dir does nothing when LogFile.create or LogFile.rename calls it): a
  returned enqueue is lost (I2/I3);
- replace_durably renames NAME.current.tmp before fsyncing it: .current may be
  empty after a crash (I6) under the weak model (ext4's "safe rename" hides it);
- replace_durably without its last directory fsync: the old generation's unlink
  may land before the flip (I6) and compact's own effect may be lost (I2/I3);
- a payload-only CRC (framing.encode_record/decode_record): a flipped bit in a
  record header goes unnoticed and a different state is read (E8);
- a scan that skips a bad record and applies later ones (framing.decode_record
  resynchronising past damage): part of a batch is applied (P2/I1);
- an fdatasync that swallows EIO and retries: the call returns though its pages
  never reached the disk (I2 under the fsyncfail overlay);
- a reader that stops searching for a later batch at the first sector of zeros
  (LogFile._later_batch_after, as it was before the "d" field): a zeroed sector of
  durable records is cut as a torn tail, with every acknowledged batch after it (E8);
- generation 0 created in place (current.create_first_generation writing the
  header under the final name, as it did before): under the weak model a crash
  leaves a 16-byte log of junk that every later open refuses (I6), though no
  call returned; the explorer missed it while `new_file_garbage` was off;
- no generation re-check under the lock (following.refresh reads forward in its
  own generation only): a handle that missed a peer's compaction appends to
  the unlinked old generation and its returned ack is lost (I2/I3/I4);
- a group commit that counts a call's records durable without an fdatasync
  that began after they were written (GroupCommit.sync_to): a returned call
  nobody synced is lost (I2/I3).
"""

from __future__ import annotations

import errno
import struct
import sys
import unittest
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

import harness.support  # noqa: F401
from harness import explorer
from harness.explorer import Bounds, RecordingFS, explore

import nobroker.file.generations.current as current
import nobroker.file.log.framing as framing
import nobroker.file.log.tail
from nobroker.file import following
from nobroker.file.disk.fs import FileSystem
from nobroker.file.handleapi import HandleAPI
from nobroker.file.log.groupcommit import GroupCommit
from nobroker.file.log.logfile import LogFile
from nobroker.file.log.tail import decode_payload


def caught(report: explorer.Report, checks: set[str], source: str) -> explorer.Violation:
    """The first violation of one of `checks` whose report mentions `source`."""
    for violation in report.violations:
        if violation.check in checks and source in str(violation):
            return violation
    found = "\n".join(str(v) for v in report.violations[:5]) or "no violation at all"
    raise AssertionError(f"expected a {sorted(checks)} violation naming {source!r}; got:\n"
                         f"{found}")


@contextmanager
def silenced(method: str, caller: Callable[..., Any]) -> Iterator[None]:
    """The recording FileSystem's `method` does nothing when `caller` calls it."""
    code = getattr(caller, "__func__", caller).__code__
    original = getattr(RecordingFS, method)

    def maybe(self: RecordingFS, *args: Any) -> Any:
        if sys._getframe(1).f_code is code:
            return None  # the planted bug: this fsync is missing
        return original(self, *args)

    with mock.patch.object(RecordingFS, method, maybe):
        yield


class TeethTestCase(unittest.TestCase):
    def explore(self, workload: str, profiles: tuple[str, ...], **bounds: Any
                ) -> explorer.Report:
        report = explore(workload, profiles, Bounds(**{"compound": 0, **bounds}))
        print(f"--- {self.id()}\n{report.summary()}", flush=True)
        self.assertFalse(report.ok, "the planted bug went unnoticed")
        return report


class MissingFsyncTest(TeethTestCase):
    def test_no_directory_fsync_after_creating_the_log_loses_a_returned_enqueue(self) -> None:
        # Generation 0 is created under a temporary name and renamed: both directory
        # fsyncs (after the creation and after the rename) go missing.
        with silenced("fsync_dir", LogFile.create), silenced("fsync_dir", LogFile.rename):
            report = self.explore("first_enqueue", ("ext4ish", "weak"), rot=False)
        caught(report, {"I2", "I3"}, "logfile.py")
        caught(report, {"I2", "I3"}, "create_first_generation")

    def test_renaming_current_before_its_data_is_synced_leaves_it_empty(self) -> None:
        def no_fsync_before_rename(fs: FileSystem, directory: str, name: str,
                                   data: bytes) -> None:
            target = f"{directory}/{name}"
            fd = fs.open(target + ".tmp", 0o1 | 0o100 | 0o1000)  # O_WRONLY|O_CREAT|O_TRUNC
            try:
                fs.write_all(fd, data, 0)  # the planted bug: no fs.fsync(fd) here
            finally:
                fs.close(fd)
            fs.replace(target + ".tmp", target)
            fs.fsync_dir(directory)

        with mock.patch.object(current, "replace_durably", no_fsync_before_rename):
            clean = explore("compaction", ("ext4ish",), Bounds(compound=0, rot=False))
            report = self.explore("compaction", ("weak",), rot=False)
        self.assertTrue(clean.ok, "ext4's safe rename should hide this bug")
        violation = caught(report, {"I6"}, "publish_generation")
        self.assertIn("current", violation.message)

    def test_creating_the_first_log_in_place_leaves_junk_that_never_opens(self) -> None:
        def in_place(fs: FileSystem, directory: str, name: str) -> None:
            LogFile.create(fs, directory, name, 0).close()  # the planted bug

        with mock.patch.object(current, "create_first_generation", in_place):
            hidden = explore("first_enqueue", ("weak",),
                             Bounds(compound=0, rot=False, new_file_garbage=False))
            report = self.explore("first_enqueue", ("weak",), rot=False)
        self.assertTrue(hidden.ok, "without new-file garbage the explorer cannot see it")
        violation = caught(report, {"I6"}, "LogFile.create")
        self.assertIn("not a nobroker log", violation.message)

    def test_unlinking_the_old_generation_before_the_flip_is_durable(self) -> None:
        def no_fsync_after_rename(fs: FileSystem, directory: str, name: str,
                                  data: bytes) -> None:
            target = f"{directory}/{name}"
            fd = fs.open(target + ".tmp", 0o1 | 0o100 | 0o1000)
            try:
                fs.write_all(fd, data, 0)
                fs.fsync(fd)
            finally:
                fs.close(fd)
            fs.replace(target + ".tmp", target)  # the planted bug: no fs.fsync_dir after

        with mock.patch.object(current, "replace_durably", no_fsync_after_rename):
            report = self.explore("compaction", ("weak",), rot=False)
        caught(report, {"I6", "I2", "I3"}, "remove_stale_files")


class FormatTest(TeethTestCase):
    def test_a_payload_only_crc_lets_header_damage_through(self) -> None:
        original = framing.decode_record

        def encode(rtype: int, payload: bytes, more: bool = False) -> bytes:
            type_byte = rtype | framing.MORE if more else rtype
            return struct.pack("<IBI", len(payload), type_byte, zlib.crc32(payload)) + payload

        def decode(buf: bytes | memoryview, pos: int) -> tuple[int, int, bytes, int]:
            # The same reader, checking the CRC of the payload alone.
            if len(buf) - pos >= 9:
                length, type_byte, crc = struct.unpack_from("<IBI", buf, pos)
                stop = pos + 9 + length
                if 0 < length <= framing.MAX_RECORD and type_byte & 0x7F and stop <= len(buf):
                    payload = bytes(buf[pos + 9:stop])
                    if zlib.crc32(payload) == crc:
                        return framing.RECORD, type_byte, payload, stop
                    return framing.BAD, 0, b"crc mismatch", pos
            return original(buf, pos)

        with mock.patch.object(framing, "encode_record", encode), \
                mock.patch.object(framing, "decode_record", decode):
            report = self.explore("dlq_requeue", ("process",))
        violation = caught(report, {"E8"}, "not in the history")
        self.assertIn("type byte", violation.strategy)


class ReaderTest(TeethTestCase):
    def test_a_reader_that_skips_damage_applies_part_of_a_batch(self) -> None:
        original = framing.decode_record

        def skipping(buf: bytes | memoryview, pos: int) -> tuple[int, int, bytes, int]:
            result = original(buf, pos)
            if result[0] == framing.RECORD:
                return result
            data = bytes(buf)
            hit = data.find(framing.RESYNC_MARKER, pos + 1)
            while hit != -1:  # the planted bug: resynchronise on the next good record
                if hit - 9 > pos:
                    later = original(data, hit - 9)
                    if later[0] == framing.RECORD:
                        return later
                hit = data.find(framing.RESYNC_MARKER, hit + 1)
            return result

        with mock.patch.object(framing, "decode_record", skipping):
            report = self.explore("enqueue_many", ("ext4ish",), rot=False)
        caught(report, {"P2", "I1"}, "handle.py")
        self.assertTrue(any(v.check == "P2" for v in report.violations),
                        "no torn enqueue_many was reported")


    def test_a_reader_that_stops_at_zeros_cuts_the_durable_batches_after_them(self) -> None:
        def stops_at_zeros(self: LogFile, bad_at: int, tail_end: int,
                           last_batch: int) -> int | None:
            data = self.fs.pread(self.fd, tail_end - bad_at, bad_at)
            # The planted bug: nothing past the first never-written sector is looked at.
            data = data[:nobroker.file.log.tail.unwritten_sector(data, bad_at)]
            hit = data.find(framing.RESYNC_MARKER, 1)
            while hit != -1:
                start = hit - framing.RECORD_HEADER.size
                outcome, _, payload, _ = framing.decode_record(data, start)
                record = decode_payload(payload) if outcome == framing.RECORD else None
                if record is not None and type(record.get("b")) is int \
                        and record["b"] > last_batch + 1:
                    return int(record["b"])
                hit = data.find(framing.RESYNC_MARKER, hit + 1)
            return None

        with mock.patch.object(LogFile, "_later_batch_after", stops_at_zeros):
            report = self.explore("lease_ack", ("process",))
        violation = caught(report, {"E8"}, "durable records were cut")
        self.assertIn("zeroed sector", violation.strategy)


class FsyncErrorTest(TeethTestCase):
    def test_retrying_fsync_after_eio_reports_success_for_lost_pages(self) -> None:
        original = RecordingFS.fdatasync

        def retrying(self: RecordingFS, fd: int) -> None:
            try:
                original(self, fd)
            except OSError as exc:
                if exc.errno != errno.EIO:
                    raise
                original(self, fd)  # the planted bug: the second fsync "succeeds"

        with mock.patch.object(RecordingFS, "fdatasync", retrying):
            report = self.explore("fsync_fails", ("ext4ish", "weak"), rot=False)
        violation = caught(report, {"I2", "I3"}, "test_explorer_teeth.py")
        self.assertIn("retrying", str(violation))


class GenerationTest(TeethTestCase):
    def test_a_handle_that_misses_a_compaction_writes_into_the_unlinked_generation(self
                                                                                  ) -> None:
        def no_generation_check(handle: HandleAPI) -> None:
            # The planted bug: read forward in our own generation without asking
            # whether a peer compacted into a new one.
            handle.live_log().scan(handle.state.apply_batch, handle.state.last_batch,
                                   full=False)

        with mock.patch.object(following, "refresh", no_generation_check):
            report = self.explore("two_handles", ("process",), rot=False)
        violation = caught(report, {"I2", "I3", "I4"}, "QueueHandle.commit")
        self.assertIn("h1.ack", violation.message)


class GroupCommitTest(TeethTestCase):
    def test_a_group_commit_that_trusts_the_fdatasync_in_flight_loses_a_returned_call(
            self) -> None:
        correct = GroupCommit.sync_to

        def trusts_the_running_one(self: GroupCommit, log: Any, offset: int) -> bool:
            # The planted bug: a thread whose records were written after another
            # thread's (or handle's) fdatasync began takes that one as covering them.
            self._durable = max(self._durable, offset)
            return correct(self, log, offset)

        with mock.patch.object(GroupCommit, "sync_to", trusts_the_running_one):
            report = self.explore("group_commit", ("ext4ish",), rot=False)
        caught(report, {"I2", "I3"}, "LogFile.append")



if __name__ == "__main__":
    unittest.main()
