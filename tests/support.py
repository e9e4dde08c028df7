"""The old name of harness/support.py, kept for the top-level test modules not yet moved.

test_layers, test_readme, test_web, test_dashboard_browser and test_playground
still say ``from support import ...``; they move into folders in a later step,
their imports become ``from harness.support import ...``, and this file goes.
New code imports ``harness.support``.
"""

from harness.support import REPO, SRC, TempDirTestCase, child_env, tree_digest, wait_until

__all__ = ["REPO", "SRC", "TempDirTestCase", "child_env", "tree_digest", "wait_until"]
