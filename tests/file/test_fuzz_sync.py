"""A seeded fuzzer for `NAME.sync`, the shared-fsync slots (FileOptions(share_fsyncs=True)).

Theory. test_fuzz.py damages the logs; this damages the other file a
sharing handle reads before it skips an fdatasync. A slot is trusted only
if its CRC holds and it names this log (generation, device, inode) in this
boot, so a slot copied from the corpus would be ignored for the wrong
reason. Each case therefore first writes the slots a real last writer would
have left -- `written` and `durable` at the log's end, naming the log just
materialised, in this boot -- encoded from docs/FORMAT.md's layout, not by
the code under test; then damages them. Case `i` of seed `s` draws from
`random.Random(f"sync:{s}:{i}")`:

    the log: as written, or cut at a record boundary (the bytes after it
    gone: claims now reach past the end), or cut inside a record (a torn
    tail the open repairs);
    NAME.sync: left valid (the control), torn (half of one slot from another
    write), foreign (another boot, generation, device, inode, slot kind,
    version or magic, CRC fixed), bit flips, truncated, garbage, slots
    swapped, CRC-valid claims far past the end, missing, or not a file
    (a directory, a FIFO);
    then, in half the cases, once the queue is open: damaged again (the
    same kinds, less the CRC-valid claims past the end that a live peer
    could really have made, plus a flipped bit in the durable offset).

Each case opens the queue with share_fsyncs=True on a FileSystem that counts
fdatasyncs, and must:

- open as the same log opens without NAME.sync (same state, same repairs):
  the slots never change what is durable data;
- issue, in every durable call (enqueue, lease, ack), an fdatasync of the log
  of its own: one process alone has no peer whose fdatasync could cover its
  write, so a call that skipped one trusted a claim nothing proved;
- raise nothing, or a NobrokerError that names NAME.sync;
- reopen with the same state.

It found one: a log cut below a CRC-valid claim kept the claim, so the first
call after the open published it and the next returned with no fdatasync
(seed 1, cases 33 and 75 among 20 of 300); every open now lowers the slots
to the log's end (file/syncing.py, bound_shared). The test's 300 cases of
seed 1 include those. tools/torture/run.py runs `fuzz_sync(count=...)` with many
more cases.
"""

from __future__ import annotations

import unittest

from harness.fuzz.sync import fuzz_sync

from nobroker.file.disk.fs import FileSystem


class SyncFuzzTest(unittest.TestCase):
    def setUp(self) -> None:
        if FileSystem().boot_id() is None:
            self.skipTest("no flock or boot id here: NAME.sync is never used")

    def test_a_damaged_sync_file_never_changes_the_data_or_spares_an_fdatasync(self
                                                                              ) -> None:
        report = fuzz_sync(300, seed=1)
        self.assertEqual(report.failures, [], report.summary())
        self.assertGreaterEqual(report.cases, 250, report.summary())
        self.assertGreater(report.outcomes["ok"], 200, report.summary())


if __name__ == "__main__":
    unittest.main()
