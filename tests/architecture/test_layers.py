"""The layer order of src/nobroker, read from the imports (ast: nothing is imported).

The allowed direction is written once, in PACKAGE_LAYERS and FILE_TIERS
below: a module may import its own layer and the layers below it, never one
above. The backends (file/, postgres/, memory/) never import each other; the replay
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

from harness.support import SRC

# The package's layers, top first. A module of one layer may import its own layer
# and any layer after it. A subpackage (file/, postgres/, tasks/, dashboard/) is one name.
PACKAGE_LAYERS: list[tuple[str, frozenset[str]]] = [
    ("entry points", frozenset({"__init__", "__main__", "cli", "worker", "tasks",
                                "dashboard", "transfer", "django", "testing", "celery",
                                "dramatiq", "otel", "stored_values"})),
    # transfer: `nobroker migrate`; django, celery, dramatiq: loaded by Django, kombu and
    # Celery, a Dramatiq app; otel: by an application calling nobroker.otel.instrument();
    # stored_values: what the Celery and Dramatiq result backends share, over the facade
    ("facade", frozenset({"queue", "opener"})),  # opener: which backend a location names
    ("backends", frozenset({"file", "postgres", "memory"})),
    ("shared", frozenset({"errors", "models", "validation", "codec", "backoff", "backend",
                          "hooks", "results", "transactions", "dependencies", "limits",
                          "limit_parking", "revivals", "result_deadlines",
                          "window_copies"})),
]
BACKENDS = frozenset({"file", "postgres", "memory"})  # never import each other
# Upward imports allowed only inside a function, run when it is called: the facade's
# @q.task and @q.periodic hand the function to the task layer; importing queue.py
# still imports nothing above it.
# A task call on an eager Queue (nobroker.testing) runs the job with the Worker's code.
DEFERRED = frozenset({("queue", "tasks"), ("tasks", "testing")})

# Inside the file engine, top first: each tier imports its own and the tiers after it.
# A tier is a folder of file/ (disk/, log/, ...), or modules at file/'s top level.
FILE_TIERS: list[tuple[str, frozenset[str]]] = [
    ("the backend", frozenset({"__init__", "backend", "views", "blocking"})),
    ("a live handle", frozenset({"handle", "opening", "following", "checkpointer",
                                 "compactor", "inspection", "options", "syncing", "counters",
                                 "commit", "handleapi"})),
    ("repair", frozenset({"repair"})),
    ("generations", frozenset({"generations"})),
    ("the replay state", frozenset({"state"})),
    ("one log file", frozenset({"log"})),
    ("bytes and the OS", frozenset({"disk"})),
]
# The replay state is pure: it imports only itself (and the shared layer), and so do
# the parts of the log tier it reads records with.
PURE = frozenset({"state", "log.records", "log.framing", "log.tail"})
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


def cycles(root: Path) -> list[str]:
    """Every import cycle among the modules under `root`/nobroker, one line each.
    Imports for type checking count; an import inside a function counts unless it
    is one of the DEFERRED hand-overs, the only late bindings the package allows."""
    graph: dict[str, set[str]] = {}
    for path in sorted((root / "nobroker").rglob("*.py")):
        here = module_name(root, path)
        late = deferred_lines(path)
        top = _where(here if path.name != "__init__.py" else here + ".__init__")[0]
        graph.setdefault(here, set()).update(
            target for line, target in imports(root, path)
            if target.startswith("nobroker.") and target != here
            and not ((top, _where(target)[0]) in DEFERRED and line in late))
    # Tarjan's strongly connected components, iteratively.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[str] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    members = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        members.append(member)
                        if member == node:
                            break
                    if len(members) > 1:
                        found.append("import cycle: " + " <-> ".join(sorted(members)))
    return sorted(found)


# Underscore names that are public API of the standard library.
PUBLIC_UNDERSCORED = frozenset({"_exit", "_getframe", "_replace", "_asdict", "_fields",
                                "_make"})


def reach_ins(root: Path) -> list[str]:
    """Every use under `root`/nobroker of another object's underscore attribute:
    only `self`, `cls` and `super()` may name a private attribute."""
    found: list[str] = []
    for path in sorted((root / "nobroker").rglob("*.py")):
        rel = path.relative_to(root)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if (not isinstance(node, ast.Attribute) or not node.attr.startswith("_")
                    or node.attr.startswith("__") or node.attr in PUBLIC_UNDERSCORED):
                continue
            owner = node.value
            if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
                continue
            if (isinstance(owner, ast.Call) and isinstance(owner.func, ast.Name)
                    and owner.func.id == "super"):
                continue
            found.append(f"{rel}:{node.lineno}: reaches into {ast.unparse(node)}")
    return found


class LayerOrderTest(unittest.TestCase):
    def test_the_source_tree_keeps_the_layer_order(self) -> None:
        self.assertEqual(violations(SRC), [])

    def test_the_source_tree_has_no_import_cycle(self) -> None:
        self.assertEqual(cycles(SRC), [])

    def test_no_module_reaches_into_another_objects_private_attributes(self) -> None:
        self.assertEqual(reach_ins(SRC), [])

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

    def test_the_memory_backend_importing_the_file_engine_is_reported(self) -> None:
        root = self.tree({"nobroker/memory/__init__.py": "",
                          "nobroker/memory/table.py": "from ..file import state\n"})
        self.assertEqual(violations(root), ["nobroker/memory/table.py:1: backend memory "
                                            "imports backend file"])

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

    def test_an_import_cycle_is_reported(self) -> None:
        root = self.tree({"nobroker/file/log/__init__.py": "",
                          "nobroker/file/log/logwriter.py": "from . import syncfile\n",
                          "nobroker/file/log/syncfile.py": "if 0:\n    from .logwriter import W\n",
                          "nobroker/file/log/framing.py": "from . import logwriter\n"})
        self.assertEqual(cycles(root), ["import cycle: nobroker.file.log.logwriter <-> "
                                        "nobroker.file.log.syncfile"])
        root = self.tree({"nobroker/tasks/__init__.py": "from .. import queue\n",
                          "nobroker/queue.py": "def task():\n    from . import tasks\n"})
        self.assertEqual(cycles(root), [])  # the facade's declared hand-over
        root = self.tree({"nobroker/tasks/__init__.py": "from .. import queue\n",
                          "nobroker/queue.py": "from . import tasks\n"})
        self.assertEqual(cycles(root), ["import cycle: nobroker.queue <-> nobroker.tasks"])

    def test_reaching_into_another_objects_private_attribute_is_reported(self) -> None:
        root = self.tree({"nobroker/file/commit.py": """\
            def commit(store):
                store._log.append(1)
            class Handle:
                def go(self, other):
                    self._log = super()._log
                    os._exit(other._state)
            """})
        self.assertEqual(reach_ins(root), [
            "nobroker/file/commit.py:2: reaches into store._log",
            "nobroker/file/commit.py:6: reaches into other._state"])

    def test_an_allowed_import_is_not_reported(self) -> None:
        root = self.tree({"nobroker/errors.py": "", "nobroker/file/log/framing.py": "",
                          "nobroker/file/log/logfile.py": "from ...errors import E\n"
                                                          "from . import framing\n",
                          "nobroker/queue.py": "import importlib\n"
                                               "importlib.import_module('nobroker.file')\n"})
        self.assertEqual(violations(root), [])


MAX_MODULE_LINES = 400  # STYLE.md: small modules; past this one has grown two jobs


def long_modules(root: Path) -> list[str]:
    """The modules under `root` longer than MAX_MODULE_LINES, with their length."""
    found = []
    for path in sorted(root.rglob("*.py")):
        with path.open(encoding="utf-8") as handle:
            lines = sum(1 for _ in handle)
        if lines > MAX_MODULE_LINES:
            found.append(f"{path.relative_to(root)}: {lines} lines")
    return found


class ModuleSizeTest(unittest.TestCase):
    def test_no_module_is_longer_than_400_lines(self) -> None:
        self.assertEqual(long_modules(SRC), [], "split it: a module with two jobs")

    def test_a_long_module_is_reported(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            (root / "short.py").write_text("x = 1\n" * MAX_MODULE_LINES)
            (root / "long.py").write_text("x = 1\n" * (MAX_MODULE_LINES + 1))
            self.assertEqual(long_modules(root), ["long.py: 401 lines"])


if __name__ == "__main__":
    unittest.main()
