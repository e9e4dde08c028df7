"""The fuzzers: damaged logs (corpus, mutations, cases) and damaged NAME.sync files (sync).

A case is numbered (seed, index) and replays from those two numbers alone.
tests/file/test_fuzz.py and tests/file/test_fuzz_sync.py run bounded numbers
of cases and hold the theory; tools/torture/run.py runs tens of thousands.
"""

from __future__ import annotations

from .cases import FuzzReport, digest, exercise, fuzz, fuzz_root, materialise, run_case
from .corpus import (
    CURRENT,
    LOG0,
    LOG1,
    MEMORY_LIMIT,
    NAME,
    REGRESSIONS,
    Corpus,
    _trim,
    build_corpus,
    frames,
)
from .mutations import make_case
from .sync import SyncFuzzReport, fuzz_sync, run_sync_case

__all__ = ["CURRENT", "LOG0", "LOG1", "MEMORY_LIMIT", "NAME", "REGRESSIONS", "Corpus",
           "FuzzReport", "build_corpus", "digest", "exercise", "frames", "fuzz", "fuzz_root",
           "make_case", "materialise", "run_case", "_trim", "SyncFuzzReport", "fuzz_sync",
           "run_sync_case"]
