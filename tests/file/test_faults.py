"""Fault injection: failing fsyncs and writes, lock holders, network file systems, modes.

Theory. Every storage operation of a Queue goes through its `FileSystem`
(src/nobroker/file/disk/fs.py), so `FaultFS` (tests/harness/faults/) can make
any one call fail the way a real kernel would: EIO or ENOSPC, once or from
that call on, or a short write followed by ENOSPC (a write that dies halfway
through a record). The
SQLite-style loop (reliability.md §10.4) runs a ~10-call workload once to
count its mutating calls, then once per (call index, errno, mode), and after
each run disables the faults, reopens twice and checks the audit:

- every call that returned kept its effect (an acked job stays gone, an
  enqueued job is pending, leased, dead or acked by some ack);
- a call that raised is either wholly applied or not at all, and a write
  that failed (handle not poisoned, log cut back) is not applied at all;
- after a failed fsync the handle is poisoned: the next call raises
  QueueClosedError without a single file-system call (fsyncgate: a retried
  fsync proves nothing);
- every error a call raised is a NobrokerError; recovery is idempotent.

`drop` mode goes one step further: a failed fsync also throws away every
byte written since the last successful fsync of that file, as a power cut
after the kernel dropped the dirty pages would.

`run_fault_matrix` (harness.faults) is shared with tools/torture/run.py, which runs it with more
workload seeds.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from unittest import mock

from harness.faults import FaultFS, run_fault_case, run_fault_matrix
from harness.support import FakeClock, TempDirTestCase, file_queue, scratch_root, slow, store_of

import nobroker
from nobroker import (
    CompactionError,
    LockTimeoutError,
    NobrokerError,
    NotLeasedError,
    QueueClosedError,
    StorageError,
    UnsafeFilesystemError,
)
from nobroker.file.disk.fs import FileSystem, filesystem_type

# --------------------------------------------------------------------------


# --------------------------------------------------------------------------
# the tests


class IOErrorLoopTest(TempDirTestCase):
    """reliability.md §10.4: fail every mutating call, every way, and audit."""

    def test_fault_free_workload_passes_the_audit(self) -> None:
        outcome = run_fault_case(str(self.tmp / "q"), None, errno.EIO, "once")
        self.assertEqual(outcome.violations, [])
        self.assertTrue(all(res == "returned" for _, res in outcome.calls), outcome.calls)

    def check_matrix(self, seed: int) -> None:
        # Hundreds of small queues: on tmpfs when there is one (the faults are ours,
        # the disk's speed is beside the point).
        scratch = tempfile.mkdtemp(prefix="nobroker-faults-", dir=scratch_root())
        self.addCleanup(shutil.rmtree, scratch, ignore_errors=True)
        runs, injected, bad = run_fault_matrix(scratch, seed)
        self.assertGreater(runs, 100)
        self.assertGreaterEqual(injected, runs)
        report = "\n".join(f"{o.label}: {o.violations}\n  calls: {o.calls}" for o in bad[:5])
        self.assertEqual(len(bad), 0, f"{len(bad)} of {runs} runs broke a promise:\n{report}")

    def test_every_mutating_call_failing_breaks_no_promise(self) -> None:
        self.check_matrix(0)

    @slow
    def test_the_same_for_a_workload_with_purge_and_a_second_compaction(self) -> None:
        self.check_matrix(1)


class FsyncFailureTest(TempDirTestCase):
    """A failed fsync is never retried into a success: the handle is poisoned."""

    def open(self, fs: FileSystem) -> nobroker.Queue:
        return file_queue(self.tmp / "q", fs=fs, clock=FakeClock())

    def test_failed_fsync_raises_and_poisons_until_reopened(self) -> None:
        fs = FaultFS()
        q = self.open(fs)
        kept = q.enqueue({"n": 1})
        fs.arm(fs.mutating + 2, errno.EIO, "once")  # the pwrite succeeds, the fdatasync fails
        with self.assertRaises(StorageError) as caught:
            q.enqueue({"n": 2})
        self.assertEqual(caught.exception.operation, "fsync")
        self.assertEqual(caught.exception.errno, errno.EIO)
        self.assertIn("fdatasync", fs.trace[-1])
        before_calls, before_syncs = fs.calls, fs.trace.count("fdatasync default.000000.log")
        for attempt in (lambda: q.enqueue({"n": 3}), q.stats, lambda: q.lease(1), q.compact):
            with self.assertRaises(QueueClosedError):
                attempt()
        self.assertEqual(fs.calls, before_calls, "a poisoned handle touched the disk")
        self.assertEqual(fs.trace.count("fdatasync default.000000.log"), before_syncs,
                         "fsync was retried after it failed")
        q.close()
        with nobroker.Queue(self.tmp / "q") as again:
            payloads = [job.payload for job in again.list_jobs()]
            self.assertIn(kept.payload, payloads)
            self.assertNotIn({"n": 3}, payloads)
            # {"n": 2} is indeterminate: present or not, but whole
            self.assertLessEqual(len(payloads), 2)
            again.enqueue({"n": 4})  # the reopened queue takes writes again

    def test_failed_fsync_with_dropped_pages_recovers_the_synced_prefix(self) -> None:
        fs = FaultFS()
        q = self.open(fs)
        kept = [q.enqueue({"n": i}) for i in range(3)]
        fs.arm(fs.mutating + 2, errno.EIO, "drop")
        with self.assertRaises(StorageError):
            q.enqueue_many([{"n": 10}, {"n": 11}])
        q.close()
        with nobroker.Queue(self.tmp / "q") as again:
            self.assertEqual([job.id for job in again.list_jobs()], [job.id for job in kept])

    def test_failed_directory_fsync_of_the_flip_poisons(self) -> None:
        fs = FaultFS()
        q = self.open(fs)
        job = q.enqueue({"n": 1})
        # compaction syncs the directory four times: the new file under its temporary
        # name, its rename to the real one, the flip of NAME.current, the cleanup
        fs.arm_matching("fsync_dir", 3, errno.EIO)
        with self.assertRaises(CompactionError):
            q.compact()
        with self.assertRaises(QueueClosedError):
            q.enqueue({"n": 2})
        q.close()
        with nobroker.Queue(self.tmp / "q") as again:
            self.assertEqual([j.id for j in again.list_jobs()], [job.id])
            again.enqueue({"n": 3})

    def test_failed_fsync_of_the_new_generation_keeps_the_old_one(self) -> None:
        fs = FaultFS()
        q = self.open(fs)
        job = q.enqueue({"n": 1})
        fs.arm_matching("fdatasync", 1, errno.EIO)
        with self.assertRaises(CompactionError):
            q.compact()
        self.assertEqual(q.generation, 0)
        self.assertFalse((self.tmp / "q" / "default.000001.log").exists())
        self.assertFalse((self.tmp / "q" / "default.current").exists())
        q.enqueue({"n": 2})  # the live generation was never at risk
        q.close()
        with nobroker.Queue(self.tmp / "q") as again:
            self.assertEqual(again.generation, 0)
            self.assertEqual(len(again.list_jobs()), 2)
            self.assertEqual(again.list_jobs()[0].id, job.id)


class _StallingFS(FaultFS):
    """The first fdatasync waits until a second thread has written its batch, then fails
    and drops the dirty pages. Any later fdatasync runs only after that failure, and
    succeeds, as a second fsync after a failed write-back does on Linux (the error is
    reported once per open file)."""

    def __init__(self) -> None:
        super().__init__()
        self.second_written = threading.Event()
        self.first_failed = threading.Event()
        self.armed = False
        self.syncs = 0

    def pwrite(self, fd: int, data: bytes, offset: int) -> int:
        written = super().pwrite(fd, data, offset)
        if self.armed and self.syncs >= 1:
            self.second_written.set()
        return written

    def fdatasync(self, fd: int) -> None:
        if not self.armed:
            return super().fdatasync(fd)
        self.syncs += 1
        if self.syncs == 1:
            if not self.second_written.wait(10):
                raise AssertionError("the second writer never came")
            self.arm_matching("fdatasync", 1, errno.EIO, "drop")
            try:
                super().fdatasync(fd)
            finally:
                self.first_failed.set()
        else:
            self.first_failed.wait(10)
            self.target = None  # no more faults
            super().fdatasync(fd)


class ConcurrentFsyncFailureTest(TempDirTestCase):
    """Threads sharing one handle share its fsyncs; a failure must reach all of them."""

    def test_a_second_fsync_after_a_failed_one_does_not_make_a_success(self) -> None:
        fs = _StallingFS()
        q = file_queue(self.tmp / "q", fs=fs, clock=FakeClock())
        durable = q.enqueue("durable")
        fs.armed = True
        outcomes: dict[str, object] = {}

        def call(name: str) -> None:
            try:
                outcomes[name] = q.enqueue(name)
            except NobrokerError as exc:
                outcomes[name] = exc

        first = threading.Thread(target=call, args=("first",))
        first.start()
        deadline = time.monotonic() + 10
        while fs.syncs < 1 and time.monotonic() < deadline:  # first is inside its fsync
            time.sleep(0.001)
        second = threading.Thread(target=call, args=("second",))
        second.start()
        first.join(20)
        second.join(20)
        q.close()
        self.assertIsInstance(outcomes["first"], StorageError)
        with nobroker.Queue(self.tmp / "q") as again:
            payloads = [job.payload for job in again.list_jobs()]
        self.assertIn(durable.payload, payloads)
        if isinstance(outcomes["second"], nobroker.Job):
            self.assertIn("second", payloads,
                          "enqueue returned after the handle's fsync had failed, and its "
                          "job was lost with the dropped pages")


class FailedCallTest(TempDirTestCase):
    """A call that fails after committing records still fsyncs them (or poisons), and
    never leaves its generation held open (LogFile.inflight), which would keep a
    retired generation from ever closing."""

    LOG = "fdatasync default.000000.log"

    def open(self, fs: FileSystem, clock: FakeClock | None = None) -> nobroker.Queue:
        return file_queue(self.tmp / "q", fs=fs, clock=clock or FakeClock())

    def test_a_call_whose_result_cannot_be_built_still_fsyncs_its_records(self) -> None:
        fs = FaultFS()
        q = self.open(fs)
        q.enqueue({"n": 1})
        job = q.lease_one()
        assert job is not None
        syncs = fs.trace.count(self.LOG)
        # The nack is committed under the lock; only then does building its view fail.
        with mock.patch.object(q.backend, "_view", side_effect=RuntimeError("view")):
            with self.assertRaisesRegex(RuntimeError, "view"):
                q.nack(job, error="boom")
        self.assertEqual(fs.trace.count(self.LOG), syncs + 1, "the committed nack not synced")
        self.assertEqual(store_of(q).log.inflight, 0)
        self.assertEqual(q.stats().pending, 1)  # the handle works on
        q.close()
        with nobroker.Queue(self.tmp / "q") as again:
            self.assertEqual(again.get(job.id).last_error, "boom")

    def test_expiries_recorded_by_a_call_that_then_fails_are_fsynced(self) -> None:
        fs, clock = FaultFS(), FakeClock()
        q = self.open(fs, clock)
        q.enqueue({"n": 1})
        q.enqueue({"n": 2})
        first, _second = q.lease(2, visibility_timeout=1)
        clock.advance(5)
        syncs = fs.trace.count(self.LOG)
        # The ack records `second`'s expiry as a batch of its own, then refuses the token.
        with self.assertRaises(NotLeasedError):
            q.ack(dataclasses.replace(first, token=(first.token or 0) + 1000))
        self.assertEqual(fs.trace.count(self.LOG), syncs + 1, "the committed expiry not synced")
        self.assertEqual(store_of(q).log.inflight, 0)
        q.close()

    def test_a_lease_whose_fsync_fails_releases_its_generation(self) -> None:
        for call in ("lease", "ack_and_lease"):
            with self.subTest(call):
                fs = FaultFS()
                q = self.open(fs)
                q.enqueue({"n": 1})
                q.enqueue({"n": 2})
                leased = q.lease_one()
                assert leased is not None
                fs.arm_matching("fdatasync", 1, errno.EIO)
                with self.assertRaises(StorageError):
                    if call == "lease":
                        q.lease(1)
                    else:
                        q.ack_and_lease(leased)
                self.assertEqual(store_of(q).log.inflight, 0, "the lease's pin leaked")
                q.close()
                shutil.rmtree(self.tmp / "q")


class WriteFailureTest(TempDirTestCase):
    """ENOSPC halfway through a record or a batch: clear error, clean log, nothing half done."""

    def test_enospc_halfway_through_a_batch_leaves_the_log_on_a_boundary(self) -> None:
        fs = FaultFS()
        q = file_queue(self.tmp / "q", fs=fs, clock=FakeClock())
        durable = [q.enqueue({"n": i}) for i in range(5)]
        big = [{"n": 100 + i, "pad": "x" * 3000} for i in range(40)]  # ~120 KiB: grows the file
        writes_before = sum(w.startswith("pwrite") for w in fs.trace)
        # Fail each pwrite of the big batch in turn, half-written then ENOSPC.
        for nth in (1, 2):  # the zero-fill that grows the file, then the batch itself
            fs.arm(fs.mutating + nth, errno.ENOSPC, "short")
            with self.assertRaises(StorageError) as caught:
                q.enqueue_many(big)
            self.assertEqual(caught.exception.errno, errno.ENOSPC)
            self.assertEqual(caught.exception.operation, "write")
            self.assertIn("No space left", str(caught.exception))
            self.assertEqual(q.stats().total, 5, "a failed batch became visible")
        self.assertGreater(sum(w.startswith("pwrite") for w in fs.trace), writes_before)
        q.enqueue({"n": 6})  # space came back: the same handle works on
        q.close()
        with nobroker.Queue(self.tmp / "q") as again:
            self.assertTrue(again.recovery.clean, again.recovery.describe())
            self.assertEqual([j.payload for j in again.list_jobs()],
                             [j.payload for j in durable] + [{"n": 6}])

    def test_enospc_in_the_middle_of_one_record(self) -> None:
        fs = FaultFS()
        q = file_queue(self.tmp / "q", fs=fs, clock=FakeClock())
        first = q.enqueue("first")
        fs.arm(fs.mutating + 1, errno.ENOSPC, "short")
        with self.assertRaises(StorageError):
            q.enqueue("x" * 500)
        size_after = os.path.getsize(store_of(q).live_log().path)
        self.assertEqual(q.stats().log_bytes, size_after, "the half record was not cut away")
        q.close()
        with nobroker.Queue(self.tmp / "q") as again:
            self.assertTrue(again.recovery.clean)
            self.assertEqual([j.id for j in again.list_jobs()], [first.id])

    def test_failed_cut_after_a_failed_write_poisons(self) -> None:
        fs = FaultFS()
        q = file_queue(self.tmp / "q", fs=fs, clock=FakeClock())
        first = q.enqueue("first")
        fs.arm(fs.mutating + 1, errno.EIO, "persist")  # the write and then the ftruncate fail
        with self.assertRaises(StorageError):
            q.enqueue("second")
        with self.assertRaises(QueueClosedError):
            q.enqueue("third")
        q.close()
        with nobroker.Queue(self.tmp / "q") as again:
            self.assertEqual([j.id for j in again.list_jobs()], [first.id])


_HOLDER = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
print("locked", flush=True)
time.sleep(120)
"""


@unittest.skipUnless(sys.platform.startswith("linux") or sys.platform == "darwin", "POSIX flock")
class LockHolderTest(TempDirTestCase):
    def start_holder(self) -> subprocess.Popen[str]:
        nobroker.Queue(self.tmp / "q").close()
        child = subprocess.Popen([sys.executable, "-c", _HOLDER, str(self.tmp / "q/default.lock")],
                                 stdout=subprocess.PIPE, text=True)
        assert child.stdout is not None
        self.addCleanup(child.stdout.close)
        self.addCleanup(lambda: (child.poll() is None and child.kill(), child.wait()))
        self.assertEqual(child.stdout.readline().strip(), "locked")
        return child

    def test_live_holder_gives_lock_timeout_error_naming_its_pid(self) -> None:
        child = self.start_holder()
        started = time.monotonic()
        with self.assertRaises(LockTimeoutError) as caught:
            nobroker.Queue(self.tmp / "q", lock_timeout=0.3)
        waited = time.monotonic() - started
        self.assertGreaterEqual(waited, 0.3)
        self.assertLess(waited, 5.0)
        if os.path.exists("/proc/locks"):
            self.assertEqual(caught.exception.holder_pid, child.pid)
            self.assertIn(f"pid {child.pid}", str(caught.exception))

    def test_killed_holder_frees_the_lock_at_once(self) -> None:
        child = self.start_holder()
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        started = time.monotonic()
        with nobroker.Queue(self.tmp / "q", lock_timeout=30) as q:
            q.enqueue("after the holder died")
        self.assertLess(time.monotonic() - started, 2.0)

    def test_holder_killed_while_waiting_lets_the_waiter_in(self) -> None:
        child = self.start_holder()
        threading.Timer(0.3, os.kill, (child.pid, signal.SIGKILL)).start()
        started = time.monotonic()
        with nobroker.Queue(self.tmp / "q", lock_timeout=20) as q:
            self.assertEqual(q.stats().total, 0)
        self.assertLess(time.monotonic() - started, 5.0)


class NetworkFilesystemTest(TempDirTestCase):
    def test_network_mount_is_refused_with_a_clear_error(self) -> None:
        for kind in ("nfs", "nfs4", "cifs", "smb3", "fuse.sshfs"):
            with mock.patch("nobroker.file.opening.filesystem_type", return_value=kind):
                with self.assertRaises(UnsafeFilesystemError) as caught:
                    nobroker.Queue(self.tmp / kind)
            message = str(caught.exception)
            self.assertIn(kind, message)
            self.assertIn("network file system", message)
            self.assertIn("allow_network_fs=True", message)
            self.assertFalse((self.tmp / kind / "default.000000.log").exists())

    def test_opting_in_opens_the_queue(self) -> None:
        with mock.patch("nobroker.file.opening.filesystem_type", return_value="nfs4"):
            with nobroker.Queue(self.tmp / "q", allow_network_fs=True) as q:
                q.enqueue("on nfs, at my own risk")
                self.assertEqual(q.stats().total, 1)

    def test_local_file_systems_are_not_refused(self) -> None:
        for kind in ("ext4", "xfs", "btrfs", "tmpfs", "apfs", None):
            with mock.patch("nobroker.file.opening.filesystem_type", return_value=kind):
                nobroker.Queue(self.tmp / str(kind)).close()

    @unittest.skipUnless(os.path.exists("/proc/self/mountinfo"), "Linux mountinfo")
    def test_filesystem_type_reads_the_real_mount_table(self) -> None:
        kind = filesystem_type(str(self.tmp))
        self.assertIsInstance(kind, str)
        self.assertTrue(kind)
        self.assertEqual(filesystem_type("/proc"), "proc")

    def test_filesystem_type_picks_the_innermost_mount(self) -> None:
        table = "\n".join([
            "22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw",
            "40 22 0:50 / /mnt/share rw - nfs4 server:/export rw",
            "41 40 0:51 / /mnt/share/local rw - tmpfs tmpfs rw",
            "42 22 0:52 / /mnt/my\\040files rw - cifs //srv/files rw",
            "43 22 0:53 / /mnt/sharebut rw - ext4 /dev/sdb1 rw",
        ]) + "\n"
        with mock.patch("builtins.open", mock.mock_open(read_data=table)):
            self.assertEqual(filesystem_type("/mnt/share/jobs"), "nfs4")
            self.assertEqual(filesystem_type("/mnt/share"), "nfs4")
            self.assertEqual(filesystem_type("/mnt/share/local/jobs"), "tmpfs")
            self.assertEqual(filesystem_type("/mnt/my files/q"), "cifs")
            self.assertEqual(filesystem_type("/mnt/sharebut/q"), "ext4")
            self.assertEqual(filesystem_type("/home/q"), "ext4")


@unittest.skipIf(os.name == "nt", "POSIX permission bits")
class PermissionsTest(TempDirTestCase):
    def test_queue_files_and_directory_are_private_to_their_owner(self) -> None:
        for umask in (0o022, 0o000):
            old = os.umask(umask)
            try:
                directory = self.tmp / f"umask{umask:o}" / "q"
                clock = FakeClock()
                with nobroker.Queue(directory, clock=clock) as q:
                    q.enqueue({"secret": "hunter2"})
                    q.compact()
                    q.enqueue({"secret": "swordfish"})
                    size = q.stats().log_bytes
                # a torn tail makes a side file
                log = directory / "default.000001.log"
                with open(log, "r+b") as handle:
                    handle.seek(size)
                    handle.write(b"\x07" * 20)
                with nobroker.Queue(directory) as q:
                    self.assertIsNotNone(q.recovery.side_file)
            finally:
                os.umask(old)
            self.assertEqual(stat.S_IMODE(os.stat(directory).st_mode), 0o700)
            names = sorted(os.listdir(directory))
            self.assertIn("default.lock", names)
            self.assertIn("default.current", names)
            self.assertTrue(any(".torn-" in n for n in names), names)
            for name in names:
                mode = stat.S_IMODE(os.stat(directory / name).st_mode)
                self.assertEqual(mode, 0o600, f"{name} has mode {mode:o} under umask {umask:o}")


if __name__ == "__main__":
    unittest.main()
