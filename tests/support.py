"""Shared helpers for nobroker's test suite.

This module owns the few things every test file needs:

- ``REPO`` and ``SRC``: where the checkout and its ``src/`` directory are.
  Importing this module puts ``SRC`` on ``sys.path``, so tests import the
  library straight from the tree; nothing has to be installed.
- ``slow``: marks a test that the quick run (``NOBROKER_QUICK=1``, used by
  ``python make.py test-quick``) skips.
- ``TempDirTestCase``: a ``unittest.TestCase`` that gives every test its own
  fresh directory in ``self.tmp`` and deletes it afterwards.

Rules: stdlib only, no nobroker imports here (a broken library must not break
the helpers), and helpers never touch anything outside their own temp dirs.
Append new helpers below the existing ones.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import unittest
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

__all__ = ["QUICK_ENV", "REPO", "SRC", "TempDirTestCase", "quick_run", "slow"]

REPO: Path = Path(__file__).resolve().parent.parent
SRC: Path = REPO / "src"

if str(SRC) not in sys.path:
    sys.path.insert(0, str(SRC))

QUICK_ENV = "NOBROKER_QUICK"

_Test = TypeVar("_Test", bound=Callable[..., object])


def quick_run() -> bool:
    """True when the environment asks for the quick run (``NOBROKER_QUICK=1``)."""
    return os.environ.get(QUICK_ENV, "") not in ("", "0")


def slow(test: _Test) -> _Test:
    """Skip ``test`` (a method or a TestCase class) during the quick run."""
    return unittest.skipIf(quick_run(), "quick run: slow test")(test)


class TempDirTestCase(unittest.TestCase):
    """A TestCase with a private, fresh directory ``self.tmp`` for each test.

    The directory is removed by a cleanup registered in ``setUp``, so it goes
    away even when the test (or a subclass's ``setUp``) fails.
    """

    tmp: Path

    def setUp(self) -> None:
        super().setUp()
        self.tmp = Path(tempfile.mkdtemp(prefix=f"nobroker-{self._testMethodName}-"))
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)
