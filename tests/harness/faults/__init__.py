"""Fault injection: FaultFS (fs) and the I/O-error loop over it (loop).

Shared by tests/file/test_faults.py (the bounded loop and the fsync, write and
lock tests) and tools/torture/run.py (`run_fault_matrix` with more seeds).
"""

from __future__ import annotations

from .fs import ERRNOS, MODES, FaultFS
from .loop import FaultOutcome, count_mutating_calls, run_fault_case, run_fault_matrix

__all__ = ["ERRNOS", "MODES", "FaultFS", "FaultOutcome", "run_fault_case", "run_fault_matrix",
           "count_mutating_calls"]
