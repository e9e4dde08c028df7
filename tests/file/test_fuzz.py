"""A seeded, reproducible fuzzer that damages real queue files and opens them.

Theory. `build_corpus` runs a few real workloads (fake clock, seeded job
ids) and keeps their files: a generation-0 log, a compacted generation with
`NAME.current` and its checkpoint, and a second log to splice with. Case
number `i` of seed `s` draws one to three mutations from its own
`random.Random(f"{s}:{i}")`, so any case can be replayed alone:

    bit flips; truncation (with or without a zero tail); zeroed ranges;
    garbage tails; splices of two logs at record boundaries or anywhere;
    huge or zero length fields (CRC fixed or not); CRC-valid records whose
    JSON is invalid or wrongly shaped (missing keys, wrong types, NaN,
    1e400, 5000-digit ints, lone surrogates, duplicate keys, 100 000-deep
    nesting, other batch numbers, other jobs' ids); unknown record types and
    file-format versions; duplicated, dropped and swapped records; garbage,
    odd or missing `NAME.current`; damaged or forged checkpoints.

Each case is opened (under a watchdog) and must end in one of:

- a clean open -- then the queue must work: stats, list (every payload is
  read), lease and ack, enqueue, compact, close; and it must reopen with
  the same state and nothing left to repair;
- `CorruptLogError` naming a path and offset, with no file changed.

Anything else -- another exception type at any step, a hang, a file
changed by a refused open, tracemalloc peak beyond MAX_RECORD on the
sampled cases -- is a failure, reported with the case's id. Every case that
ever failed is kept in REGRESSIONS and replayed on every run.

The machinery lives in tests/harness/fuzz/; tools/torture/run.py calls `fuzz(count=...)`
with tens of thousands of cases.
"""

from __future__ import annotations

import os
import tempfile
import unittest

from harness.fuzz import (
    MEMORY_LIMIT,
    FuzzReport,
    _trim,
    build_corpus,
    digest,
    exercise,
    frames,
    fuzz,
    make_case,
    materialise,
    run_case,
)
from harness.fuzz.corpus import CKPT1, CURRENT, LOG0, LOG1
from harness.support import FakeClock, TempDirTestCase

from nobroker import Queue
from nobroker.errors import CorruptLogError
from nobroker.file.log.framing import FILE_HEADER

# --------------------------------------------------------------------------
# the tests


class CorpusTest(TempDirTestCase):
    def test_corpus_is_deterministic_and_opens_clean(self) -> None:
        one = build_corpus(str(self.tmp / "a"))
        two = build_corpus(str(self.tmp / "b"))
        self.assertEqual(one.seeds, two.seeds)
        self.assertIn(CURRENT, one.seeds["compacted"])
        self.assertIn(CKPT1, one.seeds["compacted"])
        for label, files in one.seeds.items():
            directory = str(self.tmp / "open" / label)
            materialise(directory, files)
            report = FuzzReport()
            outcome, problem = exercise(directory, FakeClock(2_000_000.0))
            self.assertEqual((outcome, problem), ("clean", None), label)
            self.assertFalse(report.failures)

    def test_a_zeroed_durable_sector_is_refused_however_many_zeros_follow(self) -> None:
        # The corpus is written by one handle with fsync on, so each batch was on disk
        # before the next was written: zeroing a sector that a whole later batch
        # follows loses acknowledged jobs. Opening must refuse and change nothing,
        # never cut the rest as a torn tail (a lost or misdirected write looks so).
        corpus = build_corpus(str(self.tmp / "z"))
        probed = 0
        for label, files in corpus.seeds.items():
            name = LOG1 if CURRENT in files else LOG0
            data = _trim(files[name])
            starts = [f.offset for f in frames(data)]
            for sector in range(0, len(data), 512):
                if sector + 512 > starts[-1] or sector + 512 <= FILE_HEADER.size:
                    continue  # no whole record after it, or only the file header in it
                damaged = {n: d for n, d in files.items() if not n.endswith(".ckpt")}
                zeroed = bytearray(files[name])
                zeroed[max(sector, FILE_HEADER.size):sector + 512] = bytes(
                    sector + 512 - max(sector, FILE_HEADER.size))
                damaged[name] = bytes(zeroed)
                directory = str(self.tmp / "zopen" / f"{label}-{sector}")
                materialise(directory, damaged)
                before = digest(directory)
                outcome, problem = exercise(directory, FakeClock(2_000_000.0))
                self.assertEqual((outcome, problem), ("corrupt", None),
                                 f"{label}: {name} with sector {sector} zeroed")
                self.assertEqual(digest(directory), before)
                probed += 1
        self.assertGreater(probed, 0)

    def test_cases_are_reproducible_one_by_one(self) -> None:
        corpus = build_corpus(str(self.tmp / "c"))
        for index in (0, 7, 123):
            self.assertEqual(make_case(corpus, 5, index), make_case(corpus, 5, index))


class FuzzTest(unittest.TestCase):
    def test_a_fixed_sample_of_damaged_queues_opens_clean_or_is_refused(self) -> None:
        report = fuzz(400, seed=1)
        self.assertEqual(report.failures, [], report.summary())
        self.assertGreaterEqual(report.cases, 400)
        self.assertGreater(report.outcomes["corrupt"], 20, report.summary())
        self.assertGreater(report.outcomes["clean"] + report.outcomes["repaired"], 20,
                           report.summary())
        self.assertLess(report.peak_memory, MEMORY_LIMIT)

    def test_a_batch_that_lost_the_release_it_owed_is_refused(self) -> None:
        # Found by `make.py torture` (corpus seed 933986): a record dropped from the
        # batch that acked a prerequisite took the dependent's RELEASE with it. The
        # log opened "clean" with a job waiting for nothing, and the next compaction
        # raised ValueError. Now the open refuses the batch, naming it.
        with tempfile.TemporaryDirectory() as root:
            corpus = build_corpus(os.path.join(root, "corpus"), 933986)
            files, steps = make_case(corpus, 943986, 7016)
            self.assertIn("records drop at 33 in default.000001.log", steps)
            report = FuzzReport()
            run_case(corpus, 943986, 7016, root, report)
            self.assertEqual(report.failures, [])
            self.assertEqual(dict(report.outcomes), {"corrupt": 1})
            directory = os.path.join(root, "again")
            materialise(directory, files)
            with self.assertRaisesRegex(CorruptLogError, "waiting although its "
                                        "prerequisites settle it"):
                Queue(directory, auto_compact=None)


if __name__ == "__main__":
    unittest.main()
