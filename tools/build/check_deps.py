"""The dependency proof: show, without importing anything, what nobroker imports.

This tool owns the zero-dependency claim. It parses every ``.py`` file under
``src/``, ``tests/``, ``tools/`` and ``examples/`` plus ``make.py`` with
``ast`` -- never importing them, because importing runs a module's top-level
code -- and collects every import: ``import a.b``, ``from a import b``,
relative imports, imports nested inside functions, and ``__import__`` /
``importlib.import_module`` calls with a literal name. Each is reduced to its
top-level name and classified as standard library (``sys.stdlib_module_names``),
first-party (``nobroker`` and the repo's own top-level modules) or third-party.

The policy, checked here and nowhere else:

- ``src/nobroker`` imports nothing third-party, except the optional PostgreSQL
  backend: the subpackage ``src/nobroker/postgres/`` may import ``psycopg``
  anywhere in it, because the rest of the library imports that subpackage
  only inside a function (checked: a module-level import of it from outside
  is a violation); a single-file backend (``src/nobroker/postgres.py``) may
  import ``psycopg`` inside functions only. The extra that installs it is
  read from pyproject.toml and named in the report.
- Framework integrations (``INTEGRATIONS``: ``src/nobroker/django/``, ``celery/``,
  ``dramatiq/``, ``otel/``) may import their framework anywhere in their subpackage:
  only the framework's own processes load them (Django's INSTALLED_APPS and TASKS
  settings, kombu and Celery, a Dramatiq app's broker line; an application that calls
  ``nobroker.otel.instrument()``), and
  the rest of ``src/nobroker`` never imports them (checked). Their example
  projects (``examples/django_site/``) may import the framework too.
- Development tools under ``tools/`` (peer benchmarks) may import third-party
  packages inside functions only; tests may do the same with the optional
  extras. Examples and ``make.py`` use the standard library alone.
- No third-party import anywhere runs at module level.

The report is deterministic (sorted, repo-relative paths, Python as
major.minor only) so ``deps-proof.txt`` can be committed and compared.
"""

from __future__ import annotations

import argparse
import ast
import sys
import textwrap
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatch
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]  # tools/build/check_deps.py
SCAN_DIRS = ("src", "tests", "tools", "examples", "docsite")
SCAN_FILES = ("make.py",)
REQUIREMENTS_DEV = "requirements-dev.txt"
REQUIREMENTS_BENCH = "requirements-bench.txt"
# The Celery, Dramatiq and Django suites, the docs site (docsite/, MkDocs) and the browser tests:
# development only.
REQUIREMENTS_WEB_TOOLS = {"requirements-celery.txt": "Celery test venv .dev/celery-venv",
                          "requirements-dramatiq.txt": "Dramatiq test venv .dev/dramatiq-venv",
                          "requirements-django.txt": "Django suite venv .dev/django-venv",
                          "requirements-docs.txt": "docs venv .dev/docs-venv",
                          "requirements-web.txt": "browser-test venv .dev/web-venv"}

OPTIONAL_EXTRAS = frozenset({"psycopg"})
# tests may import these lazily, too (requirements-web.txt: the browser tests' venv)
BROWSER_TEST_TOOLS = frozenset({"playwright", "prometheus_client"})
OPTIONAL_BACKENDS = ("src/nobroker/postgres.py", "src/nobroker/backends/postgres*.py")
BACKEND_PACKAGE = "src/nobroker/postgres/"  # psycopg anywhere inside; imported lazily only
BACKEND_MODULE = "nobroker.postgres"

# Framework integrations: subpackage -> what it may import; the example projects
# that run under that framework may import the same.
INTEGRATIONS = {"src/nobroker/django/": frozenset({"django", "asgiref"}),
                # kombu finds it through the .pth hook (src/_nobroker_celery.py), Celery
                # through the celery.result_backends entry point
                "src/nobroker/celery/": frozenset({"kombu", "celery"}),
                # a Dramatiq application imports it (its one broker line)
                "src/nobroker/dramatiq/": frozenset({"dramatiq"}),
                # imported only when instrument() is called, by the application
                "src/nobroker/otel/": frozenset({"opentelemetry"})}
INTEGRATION_EXAMPLES = {"examples/django_site/": frozenset({"django"})}
FRAMEWORKS = frozenset().union(*INTEGRATIONS.values())  # tests may import them lazily
# The applications the tests' `celery worker` and `dramatiq` processes load import their
# framework at their top.
FRAMEWORK_APPS = frozenset({"tests/with_celery/celery_app.py",
                            "tests/with_dramatiq/dramatiq_app.py"})
# pytest plugins a suite tool copies into a peer's unpacked test suite, loaded only by
# pytest in that peer's venv: they may import the framework and pytest at their top.
SUITE_PLUGINS = {"tools/suites/dramatiq_fixtures.py": frozenset({"dramatiq", "pytest"})}

TOP_LEVEL = "module level"
IN_FUNCTION = "inside a function"
TYPE_ONLY = "type-checking only"

WIDTH = 100
NAME_COLUMN = 16


@dataclass(frozen=True, order=True)
class Import:
    """One import found in one file."""

    path: str  # repo-relative, with forward slashes
    line: int
    module: str  # top-level module name
    where: str  # TOP_LEVEL, IN_FUNCTION or TYPE_ONLY

    @property
    def lazy(self) -> bool:
        return self.where != TOP_LEVEL


# --------------------------------------------------------------------------
# collecting imports


def _is_type_checking(test: ast.expr) -> bool:
    """True for ``if TYPE_CHECKING:`` and ``if typing.TYPE_CHECKING:``."""
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def _literal_import_target(call: ast.Call) -> str | None:
    """The module named by ``__import__("x")`` or ``import_module("x")``, if literal."""
    func = call.func
    name = func.id if isinstance(func, ast.Name) else (
        func.attr if isinstance(func, ast.Attribute) else None)
    if name not in ("__import__", "import_module") or not call.args:
        return None
    first = call.args[0]
    if isinstance(first, ast.Constant) and isinstance(first.value, str):
        return first.value
    return None


class _Collector(ast.NodeVisitor):
    """Walks one module's tree and records each import with where it runs."""

    def __init__(self, path: str, package: str) -> None:
        self.path = path
        self.package = package  # what a relative import refers to
        self.found: list[Import] = []
        self.backend_refs: list[Import] = []
        self.integration_refs: list[Import] = []  # the core importing an integration
        self._scopes: list[str] = []

    def _where(self) -> str:
        if IN_FUNCTION in self._scopes:
            return IN_FUNCTION
        return TYPE_ONLY if self._scopes else TOP_LEVEL

    def _backend_ref(self, node: ast.AST, dotted: str, names: Sequence[str] = ()) -> None:
        """Note an import of the backend subpackage (nobroker.postgres, .postgres, ...)."""
        if self.path.startswith(BACKEND_PACKAGE) or not self.path.startswith("src/"):
            return
        parts = [p for p in dotted.split(".") if p]
        if "postgres" in parts or (parts in ([], ["nobroker"]) and "postgres" in names):
            self.backend_refs.append(Import(self.path, getattr(node, "lineno", 0),
                                            BACKEND_MODULE, self._where()))


    def _integration_ref(self, node: ast.AST, dotted: str, level: int,
                         names: Sequence[str] = ()) -> None:
        """Note the library importing a framework integration (nobroker.django, .django)."""
        if not self.path.startswith("src/"):
            return
        parts = [p for p in dotted.split(".") if p]
        if not level:
            if parts[:1] != ["nobroker"]:
                return
            parts = parts[1:]
        for package in INTEGRATIONS:
            name = package.rstrip("/").rpartition("/")[2]
            if not self.path.startswith(package) and (name in parts[:1]
                                                      or (not parts and name in names)):
                self.integration_refs.append(Import(self.path, getattr(node, "lineno", 0),
                                                    f"nobroker.{name}", self._where()))

    def _add(self, node: ast.AST, dotted: str) -> None:
        module = self.package if dotted.startswith(".") else dotted.split(".")[0]
        self.found.append(Import(self.path, getattr(node, "lineno", 0), module, self._where()))

    def _inside(self, scope: str, body: Iterable[ast.AST]) -> None:
        self._scopes.append(scope)
        for child in body:
            self.visit(child)
        self._scopes.pop()

    def _visit_function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        # Decorators, defaults and annotations run when the def runs; the body later.
        for decorator in node.decorator_list:
            self.visit(decorator)
        self.visit(node.args)
        if node.returns is not None:
            self.visit(node.returns)
        self._inside(IN_FUNCTION, node.body)

    visit_FunctionDef = _visit_function
    visit_AsyncFunctionDef = _visit_function

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self.visit(node.args)
        self._inside(IN_FUNCTION, [node.body])

    def visit_If(self, node: ast.If) -> None:
        if not _is_type_checking(node.test):
            self.generic_visit(node)
            return
        self._inside(TYPE_ONLY, node.body)
        for child in node.orelse:
            self.visit(child)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(node, alias.name)
            self._backend_ref(node, alias.name)
            self._integration_ref(node, alias.name, 0)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        self._add(node, "." if node.level else (node.module or ""))
        self._backend_ref(node, node.module or "", [a.name for a in node.names])
        self._integration_ref(node, node.module or "", node.level, [a.name for a in node.names])

    def visit_Call(self, node: ast.Call) -> None:
        target = _literal_import_target(node)
        if target:
            self._add(node, target)
        self.generic_visit(node)


def scanned_files(root: Path) -> list[Path]:
    """Every file the proof covers, sorted, skipping caches and hidden dirs."""
    files = [root / name for name in SCAN_FILES if (root / name).is_file()]
    for top in SCAN_DIRS:
        for path in (root / top).rglob("*.py"):
            parts = path.relative_to(root).parts
            if not any(p == "__pycache__" or p.startswith(".") for p in parts):
                files.append(path)
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


def owning_package(rel: str) -> str:
    """The top-level name a relative import in ``rel`` resolves to."""
    parts = rel.split("/")
    return parts[1] if parts[0] == "src" and len(parts) > 2 else parts[0]


def first_party_names(root: Path) -> set[str]:
    """Top-level names that belong to this repo, not to Python or to PyPI."""
    names = {Path(name).stem for name in SCAN_FILES}
    for top in SCAN_DIRS:
        base = root / top
        if not base.is_dir():
            continue
        if top != "src":
            names.add(top)  # e.g. ``from tests import support``
        if top == "tests":  # a test folder's own helpers (with_celery/celery_app.py)
            names.update(p.stem for p in base.rglob("*.py") if "__pycache__" not in p.parts)
        for child in base.iterdir():
            if child.suffix == ".py":
                names.add(child.stem)
            elif child.is_dir() and not child.name.startswith((".", "__")):
                names.add(child.name)
    for example in INTEGRATION_EXAMPLES:  # an example project's own apps (``shop``)
        base = root / example
        if base.is_dir():
            names.update(child.stem for child in base.iterdir()
                         if child.suffix == ".py" or (child / "__init__.py").is_file())
    return names


# --------------------------------------------------------------------------
# classifying and judging


def file_role(rel: str) -> str:
    """Which policy applies to a file: backend, library, tool, tests or other."""
    if rel.startswith(BACKEND_PACKAGE):
        return "backend-package"
    if any(rel.startswith(p) for p in (*INTEGRATIONS, *INTEGRATION_EXAMPLES)):
        return "integration"
    if any(fnmatch(rel, pattern) for pattern in OPTIONAL_BACKENDS):
        return "backend"
    for prefix, role in (("src/", "library"), ("tools/", "tool"), ("docsite/", "tool"),
                         ("tests/", "tests")):
        if rel.startswith(prefix):
            return role
    return "other"


def violation(imp: Import) -> str | None:
    """Why a third-party import breaks the policy, or None if it is allowed."""
    role = file_role(imp.path)
    if role == "integration":
        allowed = next(mods for prefix, mods in {**INTEGRATIONS, **INTEGRATION_EXAMPLES}.items()
                       if imp.path.startswith(prefix))
        if imp.module in allowed:
            return None
        return f"only {', '.join(sorted(allowed))} may be imported here"
    if role == "library":
        return "the core library must import only the standard library"
    if imp.path in FRAMEWORK_APPS and imp.module in FRAMEWORKS:
        return None  # an application loaded only by `celery worker` or `dramatiq` in the tests
    if imp.module in SUITE_PLUGINS.get(imp.path, ()):
        return None  # a pytest plugin of a peer's suite (tools/suites/)
    if role == "backend-package":
        if imp.module in OPTIONAL_EXTRAS:
            return None
        extras = ", ".join(sorted(OPTIONAL_EXTRAS))
        return f"only the optional extras ({extras}) may be imported here"
    if not imp.lazy:
        return "imported at module level; import it inside the function that needs it"
    if role == "tests" and imp.module in BROWSER_TEST_TOOLS | FRAMEWORKS:
        return None
    if role in ("backend", "tests") and imp.module not in OPTIONAL_EXTRAS:
        extras = ", ".join(sorted(OPTIONAL_EXTRAS))
        return f"only the optional extras ({extras}) may be imported here"
    if role == "other":
        return "examples and make.py must run on the standard library alone"
    return None


def dev_requirements(root: Path, name: str = REQUIREMENTS_DEV) -> list[str]:
    """The pinned packages of a requirements file (lint tools, peer queues), if it exists."""
    path = root / name
    if not path.is_file():
        return []
    lines = (line.split("#")[0].strip() for line in path.read_text().splitlines())
    return sorted(line for line in lines if line)


@dataclass
class Scan:
    """Everything the report needs, gathered from one tree."""

    files: list[str]
    imports: list[Import]
    unparsable: list[str]
    first_party: set[str]
    dev_requirements: list[str]
    bench_requirements: list[str]
    backend_refs: list[Import]
    extras: dict[str, list[str]]
    web_requirements: dict[str, list[str]] = field(default_factory=dict)
    integration_refs: list[Import] = field(default_factory=list)

    def kind(self, imp: Import) -> str:
        if imp.module in sys.stdlib_module_names:
            return "stdlib"
        return "first-party" if imp.module in self.first_party else "third-party"


def scan(root: Path) -> Scan:
    """Parse every covered file under ``root`` and collect its imports."""
    files = scanned_files(root)
    imports: list[Import] = []
    backend_refs: list[Import] = []
    integration_refs: list[Import] = []
    unparsable: list[str] = []
    for path in files:
        rel = path.relative_to(root).as_posix()
        try:
            tree = ast.parse(path.read_bytes(), filename=rel)
        except (SyntaxError, ValueError) as exc:
            unparsable.append(f"{rel}: cannot parse ({exc.__class__.__name__})")
            continue
        collector = _Collector(rel, owning_package(rel))
        collector.visit(tree)
        imports += collector.found
        backend_refs += collector.backend_refs
        integration_refs += collector.integration_refs
    rels = [p.relative_to(root).as_posix() for p in files]
    return Scan(rels, sorted(imports), unparsable, first_party_names(root),
                dev_requirements(root), dev_requirements(root, REQUIREMENTS_BENCH),
                sorted(backend_refs), optional_dependencies(root),
                {name: dev_requirements(root, name) for name in REQUIREMENTS_WEB_TOOLS},
                sorted(integration_refs))


def optional_dependencies(root: Path) -> dict[str, list[str]]:
    """pyproject.toml's [project.optional-dependencies]: extra name -> requirements."""
    import tomllib

    path = root / "pyproject.toml"
    if not path.is_file():
        return {}
    project = tomllib.loads(path.read_text(encoding="utf-8")).get("project", {})
    extras = project.get("optional-dependencies", {})
    return {name: list(reqs) for name, reqs in sorted(extras.items())}


# --------------------------------------------------------------------------
# the report


def _row(name: str, text: str) -> list[str]:
    """One ``name  text`` line, wrapped under the text column."""
    return textwrap.wrap(f"{name:<{NAME_COLUMN}} {text}", WIDTH, initial_indent="  ",
                         subsequent_indent=" " * (NAME_COLUMN + 3), break_on_hyphens=False)


def _files_by_module(imports: Iterable[Import]) -> dict[str, list[str]]:
    table: dict[str, set[str]] = defaultdict(set)
    for imp in imports:
        table[imp.module].add(imp.path)
    return {module: sorted(paths) for module, paths in sorted(table.items())}


def _lazy_rows(imports: list[Import]) -> list[str]:
    lines: list[str] = []
    for module, paths in _files_by_module(imports).items():
        lines += _row(module, "imported lazily in " + ", ".join(paths))
    return lines or ["  none"]


def report(result: Scan) -> tuple[str, bool]:
    """The proof's text, and whether the policy holds."""
    by_kind: dict[str, list[Import]] = defaultdict(list)
    for imp in result.imports:
        by_kind[result.kind(imp)].append(imp)
    third = by_kind["third-party"]
    problems = [f"{imp.path}:{imp.line}: {imp.module!r} ({imp.where}): {why}"
                for imp in third if (why := violation(imp))]
    problems += [f"{ref.path}:{ref.line}: {ref.module!r} ({ref.where}): the optional backend "
                 "must be imported inside the function that needs it"
                 for ref in result.backend_refs if not ref.lazy]
    problems += [f"{ref.path}:{ref.line}: {ref.module!r}: the library must not import a "
                 "framework integration (only the framework loads it)"
                 for ref in result.integration_refs]
    problems = sorted(set(problems)) + result.unparsable
    allowed = [imp for imp in third if violation(imp) is None]

    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    scanned = ", ".join([*SCAN_FILES, *(f"{d}/**/*.py" for d in SCAN_DIRS)])
    out = [
        "nobroker dependency proof (regenerate with: python make.py deps-proof)",
        "",
        f"python:   {version}",
        f"scanned:  {scanned} ({len(result.files)} files)",
        "method:   ast.parse of each file, nothing imported or executed; every import",
        "          statement (nested ones too) and every literal __import__/import_module",
        "          call, reduced to its top-level name and looked up in",
        "          sys.stdlib_module_names",
        "",
    ]
    stdlib = _files_by_module(by_kind["stdlib"])
    out.append(f"standard library modules imported ({len(stdlib)}):")
    for module, paths in stdlib.items():
        out += _row(module, ", ".join(paths))
    first = sorted({imp.module for imp in by_kind["first-party"]})
    out += ["", f"first-party modules ({len(first)}):"]
    out += [f"  {name}" for name in first] or ["  none"]

    core = sorted({imp.module for imp in third if file_role(imp.path) == "library"})
    out += ["", f"third-party modules imported by the core library (src/nobroker): {len(core)}"]
    out += ["", "optional extras (the core never imports them; only their backend does):"]
    single = [i for i in allowed if file_role(i.path) == "backend"]
    if single:
        out += _lazy_rows(single)
    packaged = _files_by_module(i for i in allowed if file_role(i.path) == "backend-package")
    for module, paths in packaged.items():
        out += _row(module, "imported in " + ", ".join(paths) + f" only: the subpackage "
                    f"{BACKEND_MODULE}, which the rest of src/nobroker imports only inside "
                    "a function (" + (", ".join(sorted({f"{r.path}:{r.line}" for r in
                                                         result.backend_refs})) or "nowhere")
                    + ")")
    if not single and not packaged:
        out.append("  none")
    for name, reqs in result.extras.items():
        out += _row(f"[{name}]", "pip install \"nobroker[" + name + "]\" installs "
                    + ", ".join(reqs) + " (pyproject.toml optional-dependencies)")
    out += ["", "framework integrations (loaded only by their framework; src/nobroker never "
                "imports them):"]
    integrated = _files_by_module(i for i in allowed if file_role(i.path) == "integration")
    for module, paths in integrated.items():
        out += _row(module, "imported in " + ", ".join(paths))
    if not integrated:
        out.append("  none")
    out += ["", "development tools (for working on nobroker, never needed to run it):"]
    for pin in result.dev_requirements:
        out += _row(pin, f"lint venv .dev/venv, pinned in {REQUIREMENTS_DEV}")
    # The peer queues are imported by name at run time (importlib), which no
    # static scan sees, so the pins are listed from the file that installs them.
    for pin in result.bench_requirements:
        out += _row(pin, f"bench venv .dev/bench-venv, pinned in {REQUIREMENTS_BENCH}; "
                         "imported by name in tools/bench/peers/ and by the generated "
                         "apps of tools/bench/realistic/")
    for name, pins in result.web_requirements.items():
        for pin in pins:
            out += _row(pin, f"{REQUIREMENTS_WEB_TOOLS[name]}, pinned in {name}")
    tools = [i for i in allowed if file_role(i.path) == "tool"]
    if tools or not result.dev_requirements:
        out += _lazy_rows(tools)
    tests = [i for i in allowed if file_role(i.path) == "tests"]
    if tests:
        out += ["", "test-only (optional extras, frameworks and browser tools, imported lazily "
                    "by tests):"]
        out += _lazy_rows(tests)

    out.append("")
    if problems:
        out.append(f"policy violations ({len(problems)}):")
        out += [f"  {p}" for p in problems]
        verdict = f"FAIL - {len(problems)} import(s) break the zero-dependency policy."
        out.append("")
    else:
        verdict = "PASS - the nobroker library runs on the Python standard library alone."
    out.append(f"VERDICT: {verdict}")
    return "\n".join(out) + "\n", not problems


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="check_deps.py",
        description="Prove from the source alone that nobroker needs only the stdlib.")
    parser.add_argument("--root", type=Path, default=REPO,
                        help="the tree to scan (default: this checkout)")
    parser.add_argument("--write", type=Path, metavar="FILE",
                        help="also write the report to FILE (e.g. deps-proof.txt)")
    args = parser.parse_args(argv)
    root: Path = args.root.resolve()
    if not root.is_dir():
        parser.error(f"--root {args.root} is not a directory")
    text, ok = report(scan(root))
    sys.stdout.write(text)
    if args.write is not None:
        args.write.write_text(text, encoding="utf-8")
        print(f"wrote {args.write}", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
