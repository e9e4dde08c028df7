"""docs/flow-control.md runs as written: its python blocks, as test_readme.py runs
the README's (a block marked `not run:` says why on the line before its fence)."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import unittest

from support import REPO, child_env
from test_readme import BLOCK_SECONDS, blocks

DOC = REPO / "docs" / "flow-control.md"


class FlowDocsTest(unittest.TestCase):
    def test_every_python_block_runs_as_pasted_or_says_why_not(self) -> None:
        ran = 0
        for block in blocks(DOC.read_text(encoding="utf-8")):
            if block.language != "python":
                continue
            with self.subTest(line=block.line):
                if block.skip is not None:
                    self.assertTrue(block.skip, f"line {block.line}: `not run:` needs a reason")
                    continue
                with tempfile.TemporaryDirectory() as where:
                    done = subprocess.run([sys.executable, "-c", block.code], cwd=where,
                                          env=child_env(), capture_output=True, text=True,
                                          timeout=BLOCK_SECONDS)
                self.assertEqual(done.returncode, 0, f"{DOC.name} line {block.line}:\n"
                                 f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
                ran += 1
        self.assertGreaterEqual(ran, 2, "the runnable blocks went missing")


if __name__ == "__main__":
    unittest.main()
