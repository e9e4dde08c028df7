"""Read-only views are read-only, and honest (`stats`, `list`).

Claims: a user who may only read a queue's files (another user's queue, or
files made read-only) gets `stats` and `list`, with one line on stderr saying
what could not be done, and nothing changes; a torn tail that a read-only look
leaves alone is reported on stderr and in `--json`; a lease past its deadline
that no write has reclaimed yet is shown and counted as expired, without
writing.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import textwrap
import time
import unittest
from pathlib import Path

from harness.support import SRC, TempDirTestCase, child_env, tree_digest

from nobroker import Queue
from nobroker.file.disk.fs import FileSystem
from nobroker.file.disk.lock import SharedLock

NOBODY = 65534
# Runs the CLI as another user when we are root (permissions do not bind root), or
# as ourselves on files we made read-only otherwise. Everything it imports is loaded
# before the switch: the interpreter's own files need not be readable by that user.
AS_READER = textwrap.dedent(f"""
    import contextlib, io, os, sys
    sys.path.insert(0, {str(SRC)!r})
    from nobroker.cli import main
    import nobroker.file.backend  # noqa: F401  (the Queue imports its backend lazily)
    with contextlib.redirect_stdout(io.StringIO()):
        main(["stats", "--help"])
    import locale, encodings.idna  # noqa: F401
    if os.geteuid() == 0:
        os.setgid({NOBODY})
        os.setuid({NOBODY})
    sys.exit(main(sys.argv[1:]))
""")


class ReadOnlyFilesTest(TempDirTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.dir = self.tmp / "q"
        with Queue(str(self.dir)) as q:
            for i in range(3):
                q.enqueue({"i": i})
        self.tmp.chmod(0o755)
        self.readable()

    def readable(self) -> None:
        """Readable by everyone, writable by nobody but root."""
        self.dir.chmod(0o555)
        for path in self.dir.iterdir():
            path.chmod(0o444)
        self.addCleanup(self.dir.chmod, 0o700)

    def reader(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", AS_READER, "--dir", str(self.dir),
                               *args], capture_output=True, text=True, env=child_env(),
                              timeout=60)

    def test_stats_and_list_work_for_a_user_who_may_only_read(self) -> None:
        before = tree_digest(self.dir)
        stats = self.reader("stats", "--json")
        self.assertEqual(stats.returncode, 0, stats.stderr)
        self.assertEqual(json.loads(stats.stdout)["pending"], 3)
        self.assertIn("lock file is not writable", stats.stderr)
        self.assertIn("locked it read-only", stats.stderr)
        listed = self.reader("list")
        self.assertEqual(listed.returncode, 0, listed.stderr)
        self.assertEqual(listed.stdout.count("pending"), 3)
        self.assertEqual(tree_digest(self.dir), before)

    def test_without_a_lock_file_it_reads_unlocked_and_says_so(self) -> None:
        self.dir.chmod(0o755)
        (self.dir / "default.lock").unlink()
        self.dir.chmod(0o555)
        before = tree_digest(self.dir)
        stats = self.reader("stats")
        self.assertEqual(stats.returncode, 0, stats.stderr)
        self.assertIn("reading without the lock", stats.stderr)
        self.assertRegex(stats.stdout, r"pending +3")
        self.assertEqual(tree_digest(self.dir), before)

    def test_writing_still_fails_with_one_line(self) -> None:
        before = tree_digest(self.dir)
        done = self.reader("enqueue", "{}")
        self.assertEqual(done.returncode, 1)
        self.assertEqual(len(done.stderr.strip().splitlines()), 1, done.stderr)
        self.assertEqual(tree_digest(self.dir), before)


class Refusing(FileSystem):
    """Opening anything for writing fails with `code`, as an immutable file (EPERM)
    or a read-only mount (EROFS) does, even for root."""

    def __init__(self, code: int) -> None:
        self.code = code

    def open(self, path: str, flags: int, mode: int = 0o600) -> int:
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            raise OSError(self.code, os.strerror(self.code), path)
        return super().open(path, flags, mode)


class ReadOnlyLockTest(TempDirTestCase):
    def test_immutable_files_and_read_only_mounts_get_a_read_only_lock(self) -> None:
        path = str(self.tmp / "q.lock")
        Path(path).touch()
        for code in (errno.EPERM, errno.EROFS, errno.EACCES):
            lock = SharedLock(Refusing(code), path, readonly=True)
            try:
                self.assertIn("locked it read-only", lock.degraded or "")
                lock.acquire(1.0)  # flock on a read-only descriptor
                lock.release()
            finally:
                lock.close()
            with self.assertRaises(OSError):  # a writer is never degraded
                SharedLock(Refusing(code), path)

    def test_no_lock_file_and_no_right_to_create_it_reads_unlocked(self) -> None:
        lock = SharedLock(Refusing(errno.EROFS), str(self.tmp / "missing.lock"), readonly=True)
        self.assertIn("reading without the lock", lock.degraded or "")
        lock.acquire(1.0)
        self.assertEqual(lock.stamp, -1)  # so every call re-reads NAME.current
        lock.release()
        lock.close()


class HonestViewsTest(TempDirTestCase):
    def nb(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "nobroker", "--dir", str(self.tmp / "q"),
                               *args], capture_output=True, text=True, env=child_env(),
                              timeout=60)

    def test_stats_reports_a_torn_tail_it_leaves_alone(self) -> None:
        with Queue(str(self.tmp / "q")) as q:
            for i in range(5):
                q.enqueue({"i": i})
            end = q.stats().log_bytes
            q.enqueue({"i": "torn"})
            torn = q.stats().log_bytes - end
        log = self.tmp / "q" / "default.000000.log"
        data = bytearray(log.read_bytes())
        data[end + 12] ^= 1
        log.write_bytes(data)
        before = tree_digest(self.tmp / "q")
        text = self.nb("stats")
        self.assertEqual(text.returncode, 0)
        self.assertIn(f"torn tail of {torn} bytes at offset {end}", text.stderr)
        self.assertIn("the next write", text.stderr)
        report = json.loads(self.nb("stats", "--json").stdout)
        self.assertEqual(report["torn_tail"], {"offset": end, "bytes": torn,
                                               "reason": "crc mismatch"})
        self.assertEqual(report["pending"], 5)
        self.assertEqual(tree_digest(self.tmp / "q"), before)
        self.assertEqual(self.nb("recover").returncode, 0)
        self.assertIsNone(json.loads(self.nb("stats", "--json").stdout)["torn_tail"])

    def test_an_expired_lease_is_shown_and_counted_as_expired_without_writing(self) -> None:
        with Queue(str(self.tmp / "q")) as q:
            for i in range(3):
                q.enqueue({"i": i})
            held = q.lease(2, visibility_timeout=0.2)
            self.assertEqual(len(held), 2)
        deadline = max(job.lease_expires_at or 0.0 for job in held)
        while time.time() <= deadline:  # wall clock: the CLI reads time.time()
            time.sleep(0.05)
        before = tree_digest(self.tmp / "q")
        report = json.loads(self.nb("stats", "--json").stdout)
        self.assertEqual((report["pending"], report["leased"], report["expired"]), (1, 0, 2))
        text = self.nb("stats").stdout
        self.assertRegex(text, r"expired +2")
        self.assertIn("2 lease(s) ran out", text)
        listed = self.nb("list").stdout
        self.assertEqual(listed.count("lease expired"), 2, listed)
        self.assertNotIn("lease ends in", listed)
        self.assertEqual(tree_digest(self.tmp / "q"), before)

    def test_a_live_lease_is_not_called_expired(self) -> None:
        with Queue(str(self.tmp / "q")) as q:
            q.enqueue({"i": 0})
            q.lease(1, visibility_timeout=600)
        report = json.loads(self.nb("stats", "--json").stdout)
        self.assertEqual((report["leased"], report["expired"]), (1, 0))
        self.assertIn("lease ends in", self.nb("list").stdout)


if __name__ == "__main__":
    unittest.main()
