"""The old name of harness/support.py, kept for the top-level test modules not yet moved.

test_layers, test_readme, test_web, test_dashboard_browser and test_playground
still say ``from support import ...``; when they move into folders their
imports become ``from harness.support import ...`` and this file goes.
New code imports ``harness.support``.
"""

from harness.support import (
    QUICK_ENV,
    REPO,
    SRC,
    FakeClock,
    TempDirTestCase,
    WorkerProcessCase,
    child_env,
    file_queue,
    quick_run,
    scratch_root,
    slow,
    spawn_python,
    store_of,
    tree_digest,
    wait_until,
)

__all__ = ["QUICK_ENV", "REPO", "SRC", "FakeClock", "TempDirTestCase", "WorkerProcessCase",
           "child_env", "file_queue", "quick_run", "scratch_root", "slow", "spawn_python",
           "store_of", "tree_digest", "wait_until"]
