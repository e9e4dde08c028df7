"""nobroker's development tools, each run from the repository root as a module.

``python -m tools.bench.run --quick`` and the like; make.py has a task for
every tool, and tools/README.md says which folder holds what.

This is the one path setup the tools share, so no tool edits ``sys.path``
itself: importing the package (which ``python -m tools.x.y`` does first)
puts ``src/`` first on ``sys.path`` (the library straight from the tree,
nothing installed) and ``tests/`` last (the test harness that the torture
run drives, without shadowing any installed package).
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

if str(REPO / "src") not in sys.path:
    sys.path.insert(0, str(REPO / "src"))
if str(REPO / "tests") not in sys.path:
    sys.path.append(str(REPO / "tests"))
