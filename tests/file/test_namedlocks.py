"""Named locks on files (`Queue.lock`): where their files are, and who they exclude.

The contract suite checks what every backend must do (one run at a time,
let go at the end of the block); tests/task_layer checks a killed holder.
Here: the files themselves (private, inside the queue's directory whatever
the key, never deleted), that the same key on two queues is two locks, and
that a folder that cannot be made is a StorageError, not an OSError.
"""

from __future__ import annotations

import os
import stat
import unittest

from harness.support import TempDirTestCase

from nobroker import Queue, StorageError, TaskLockedError
from nobroker.file.disk.namedlocks import lock_path


class NamedLockFileTest(TempDirTestCase):
    def open(self, name: str = "default") -> Queue:
        q = Queue(self.tmp / "q", name)
        self.addCleanup(q.close)
        return q

    def test_any_key_makes_one_private_file_in_the_queues_lock_folder(self) -> None:
        q = self.open()
        folder = self.tmp / "q" / "default.locks"
        keys = ["report", "../../escape", "/etc/passwd", "ключ", "a" * 200]
        for key in keys:
            with q.lock(key):
                path = lock_path(str(self.tmp / "q"), "default", key)
                self.assertEqual(os.path.dirname(path), str(folder))
                self.assertTrue(os.path.exists(path), key)
        self.assertEqual(len(os.listdir(folder)), len(keys))  # kept, one per key
        self.assertEqual(stat.S_IMODE(folder.stat().st_mode), 0o700)
        for entry in folder.iterdir():
            self.assertEqual(stat.S_IMODE(entry.stat().st_mode), 0o600, entry)
        self.assertEqual(sorted(os.listdir(self.tmp)), ["q"], "nothing outside the queue")

    def test_the_same_key_on_two_queues_is_two_locks(self) -> None:
        a, b = self.open("a"), self.open("b")
        with a.lock("k"), b.lock("k"):
            with self.assertRaises(TaskLockedError), self.open("a").lock("k"):
                pass

    def test_a_lock_folder_that_cannot_be_made_is_a_storage_error_naming_it(self) -> None:
        q = self.open()
        (self.tmp / "q" / "default.locks").write_text("in the way")
        with self.assertRaises(StorageError) as caught, q.lock("k"):
            pass
        self.assertIn("default.locks", str(caught.exception))
        self.assertIn("opening the lock file failed", str(caught.exception))
        q.enqueue("still usable")


if __name__ == "__main__":
    unittest.main()
