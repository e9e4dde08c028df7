"""The fuzzer of damaged logs (corpus, mutations, cases).

A case is numbered (seed, index) and replays from those two numbers alone.
tests/file/test_fuzz.py runs a bounded number of cases and holds the theory;
tools/torture/run.py runs tens of thousands.
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

__all__ = ["CURRENT", "LOG0", "LOG1", "MEMORY_LIMIT", "NAME", "REGRESSIONS", "Corpus",
           "FuzzReport", "build_corpus", "digest", "exercise", "frames", "fuzz", "fuzz_root",
           "make_case", "materialise", "run_case", "_trim"]
