"""The layer order of src/nobroker, read from the imports (ast: nothing is imported).

The allowed direction is written once, in PACKAGE_LAYERS and FILE_TIERS
below: a module may import its own layer and the layers below it, never one
above. The backends (file/, postgres/) never import each other; the replay
state imports no os, time, random or threading, and nothing of the file
engine outside itself. Imports only for type checking count too: a
back-arrow in a type is still a back-arrow.

`violations(root)` is the checker; the tests run it on the real tree, and on
small synthetic trees with a planted back-arrow, to show that it can fail.
"""

from __future__ import annotations

import ast
import tempfile
import textwrap
import unittest
from pathlib import Path

from support import SRC

# The package's layers, top first. A module of one layer may import its own layer
# and any layer after it. A subpackage (file/, postgres/, tasks/, web/) is one name.
PACKAGE_LAYERS: list[tuple[str, frozenset[str]]] = [
    ("entry points", frozenset({"__init__", "__main__", "cli", "worker", "pool", "tasks",
                                "web", "transfer",  # transfer: `nobroker migrate`
                                "celery"})),  # loaded by kombu and Celery, never by the core
    ("facade", frozenset({"queue"})),
    ("backends", frozenset({"file", "postgres"})),
    ("shared", frozenset({"errors", "models", "validation", "codec", "backoff", "backend"})),
]
BACKENDS = frozenset({"file", "postgres"})  # never import each other
# Upward imports allowed only inside a function, run when it is called: the facade's
# @q.task and @q.periodic hand the function to the task layer; importing queue.py
# still imports nothing above it.
DEFERRED = frozenset({("queue", "tasks")})

# Inside the file engine, top first: each tier imports its own and the tiers after it.
# A tier is a folder of file/ (disk/, log/, ...), or modules at file/'s top level.
FILE_TIERS: list[tuple[str, frozenset[str]]] = [
    ("the backend", frozenset({"__init__", "backend"})),
    ("a live handle", frozenset({"store", "opening", "following", "checkpointing",
                                 "compacting", "inspection", "options", "syncing", "counters",
                                 "commit"})),
    ("repair", frozenset({"repair"})),
    ("generations", frozenset({"generations"})),
    ("the replay state", frozenset({"state"})),
    ("one log file", frozenset({"log"})),
    ("bytes and the OS", frozenset({"disk"})),
]
# The replay state is pure: it imports only itself (and the shared layer), and so do
# the parts of the log tier it reads records with.
PURE = frozenset({"state", "log.records", "log.framing", "log.recovery"})
IMPURE_STDLIB = frozenset({"os", "time", "random", "threading"})


def _rank(layers: list[tuple[str, frozenset[str]]], name: str) -> int | None:
    for index, (_, members) in enumerate(layers):
        if name in members:
            return index
    return None


def module_name(root: Path, path: Path) -> str:
    """`root`/nobroker/file/state.py -> "nobroker.file.state.state"."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(root: Path, path: Path) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in one file, relative ones
    resolved, `from package import module` counted as the module."""
    here = module_name(root, path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                is_module = any((root / Path(*candidate.split("."))).with_suffix(suffix).exists()
                                for suffix in (".py", "")) and candidate.startswith("nobroker")
                found.append((node.lineno, candidate if is_module else base))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "import_module" and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            found.append((node.lineno, node.args[0].value))
    return found


def deferred_lines(path: Path) -> set[int]:
    """Lines of the imports in one file that sit inside a function body."""
    lines: set[int] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines.update(inner.lineno for inner in ast.walk(node)
                         if isinstance(inner, (ast.Import, ast.ImportFrom)))
    return lines


def _where(name: str) -> tuple[str, str | None]:
    """("file", "state.jobtable") for nobroker.file.state.jobtable; ("queue", None) for
    nobroker.queue: a backend's modules are named from inside the backend."""
    parts = name.split(".")[1:] or ["__init__"]
    if parts[0] not in BACKENDS:
        return parts[0], None
    return parts[0], ".".join(parts[1:]) or "__init__"


def _tier(inner: str) -> str:
    """The FILE_TIERS name a module of file/ is placed by: its folder, or its own name."""
    return inner.split(".")[0]


def _pure(inner: str) -> bool:
    return inner in PURE or _tier(inner) in PURE


def violations(root: Path) -> list[str]:
    """Every import under `root`/nobroker that breaks the layer order, one line each."""
    problems: list[str] = []
    for path in sorted((root / "nobroker").rglob("*.py")):
        importer = module_name(root, path)
        top, inner = _where(importer if path.name != "__init__.py"
                            else importer + ".__init__")
        rel = path.relative_to(root)
        for line, target in imports(root, path):
            first = target.split(".")[0]
            if top == "file" and inner is not None and _pure(inner) and first in IMPURE_STDLIB:
                problems.append(f"{rel}:{line}: the replay state imports {first}")
            if first != "nobroker":
                continue
            their_top, their_inner = _where(target)
            if top in BACKENDS and their_top in BACKENDS and their_top != top:
                problems.append(f"{rel}:{line}: backend {top} imports backend {their_top}")
                continue
            mine, theirs = _rank(PACKAGE_LAYERS, top), _rank(PACKAGE_LAYERS, their_top)
            if mine is None:
                problems.append(f"{rel}:{line}: {top} is in no layer of PACKAGE_LAYERS")
                continue
            if theirs is None:
                problems.append(f"{rel}:{line}: imports {target}, in no layer")
                continue
            if theirs < mine and not ((top, their_top) in DEFERRED
                                      and line in deferred_lines(path)):
                problems.append(f"{rel}:{line}: {PACKAGE_LAYERS[mine][0]} ({top}) imports "
                                f"{PACKAGE_LAYERS[theirs][0]} ({target})")
                continue
            if top == "file" and their_top == "file":
                assert inner is not None and their_inner is not None
                low, high = _rank(FILE_TIERS, _tier(inner)), _rank(FILE_TIERS, _tier(their_inner))
                if low is None or high is None:
                    problems.append(f"{rel}:{line}: file/{inner if low is None else their_inner}"
                                    f" is in no tier of FILE_TIERS")
                elif high < low:
                    problems.append(f"{rel}:{line}: {FILE_TIERS[low][0]} ({inner}) imports "
                                    f"{FILE_TIERS[high][0]} ({their_inner})")
                elif _pure(inner) and not _pure(their_inner):
                    problems.append(f"{rel}:{line}: the replay state ({inner}) imports "
                                    f"{their_inner}")
    return problems


class LayerOrderTest(unittest.TestCase):
    def test_the_source_tree_keeps_the_layer_order(self) -> None:
        self.assertEqual(violations(SRC), [])

    def test_every_module_is_placed_in_a_layer(self) -> None:
        modules = {p.stem if p.parent.name == "nobroker" else p.parent.name
                   for p in (SRC / "nobroker").glob("**/*.py")
                   if p.parent.name == "nobroker" or p.parent.parent.name == "nobroker"}
        placed = set().union(*(members for _, members in PACKAGE_LAYERS))
        self.assertEqual(modules - placed, set())
        engine = ({p.stem for p in (SRC / "nobroker" / "file").glob("*.py")}
                  | {p.parent.name for p in (SRC / "nobroker" / "file").glob("*/__init__.py")})
        self.assertEqual(engine - set().union(*(m for _, m in FILE_TIERS)), set())


class PlantedBackArrowTest(unittest.TestCase):
    """The checker on small synthetic trees: each planted arrow must be reported."""

    def tree(self, files: dict[str, str]) -> Path:
        root = Path(self.enterContext(tempfile.TemporaryDirectory()))
        for name, text in {"nobroker/__init__.py": "", "nobroker/file/__init__.py": "",
                           **files}.items():
            path = root / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(textwrap.dedent(text), encoding="utf-8")
        return root

    def test_a_log_file_importing_the_replay_state_is_reported(self) -> None:
        root = self.tree({"nobroker/file/state/state.py": "X = 1\n",
                          "nobroker/file/log/logfile.py": "from ..state.state import X\n"})
        self.assertEqual(violations(root), ["nobroker/file/log/logfile.py:1: one log file "
                                            "(log.logfile) imports the replay state "
                                            "(state.state)"])

    def test_the_replay_state_importing_the_clock_is_reported(self) -> None:
        root = self.tree({"nobroker/file/state/state.py": "import time\nfrom os import path\n"})
        self.assertEqual(violations(root), ["nobroker/file/state/state.py:1: the replay state "
                                            "imports time",
                                            "nobroker/file/state/state.py:2: the replay state "
                                            "imports os"])

    def test_one_backend_importing_another_is_reported(self) -> None:
        root = self.tree({"nobroker/postgres/__init__.py": "",
                          "nobroker/file/log/records.py": "from ...postgres import backend\n"})
        self.assertEqual(violations(root), ["nobroker/file/log/records.py:1: backend file "
                                            "imports backend postgres"])

    def test_the_shared_layer_importing_the_facade_is_reported(self) -> None:
        root = self.tree({"nobroker/queue.py": "",
                          "nobroker/models.py": "if True:\n    from . import queue\n"})
        self.assertEqual(violations(root), ["nobroker/models.py:2: shared (models) imports "
                                            "facade (nobroker.queue)"])

    def test_the_facade_may_reach_the_task_layer_only_inside_a_function(self) -> None:
        root = self.tree({"nobroker/tasks/__init__.py": "",
                          "nobroker/queue.py": "def task():\n    from . import tasks\n"})
        self.assertEqual(violations(root), [])
        root = self.tree({"nobroker/tasks/__init__.py": "",
                          "nobroker/queue.py": "from . import tasks\n"})
        self.assertEqual(violations(root), ["nobroker/queue.py:1: facade (queue) imports "
                                            "entry points (nobroker.tasks)"])

    def test_an_allowed_import_is_not_reported(self) -> None:
        root = self.tree({"nobroker/errors.py": "", "nobroker/file/log/framing.py": "",
                          "nobroker/file/log/logfile.py": "from ...errors import E\n"
                                                          "from . import framing\n",
                          "nobroker/queue.py": "import importlib\n"
                                               "importlib.import_module('nobroker.file')\n"})
        self.assertEqual(violations(root), [])


if __name__ == "__main__":
    unittest.main()
