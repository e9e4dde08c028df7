"""nobroker's task runner: ``python make.py TASK [ARGS...]``.

``python make.py`` alone lists the tasks. Each task is one small function
registered with ``@task``; the first line of its docstring is its help. Extra
arguments after the task name go straight to the script the task runs
(``python make.py bench --jobs 100``). The Makefile only forwards here.

Rules: stdlib only; run from any directory (every path is relative to this
file); every command is printed before it runs; library code always runs with
``src`` on PYTHONPATH, so nothing has to be installed. What this file installs
is development tooling, each into an ignored folder under ``.dev/``: the lint
toolchain (``.dev/venv``), and for the docs site and its browser test MkDocs
(``.dev/docs-venv``), Pyodide from npm (``.dev/npm``) and Playwright
(``.dev/web-venv``), Celery with nobroker installed beside it for the Celery
transport's tests (``.dev/celery-venv``), and Dramatiq for the Dramatiq broker's
tests (``.dev/dramatiq-venv``).
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent
SRC = REPO / "src"
DEV = REPO / ".dev"
VENV = DEV / "venv"
REQUIREMENTS_DEV = REPO / "requirements-dev.txt"
LINT_PATHS = ("src", "tests", "tools", "examples", "docsite", "make.py")

TaskFn = Callable[[list[str]], int]
TASKS: dict[str, TaskFn] = {}


def task(name: str) -> Callable[[TaskFn], TaskFn]:
    """Register ``fn`` as the task ``name``; its docstring's first line is the help."""

    def register(fn: TaskFn) -> TaskFn:
        TASKS[name] = fn
        return fn

    return register


def summary(fn: TaskFn) -> str:
    """The first line of a task's docstring."""
    lines = (fn.__doc__ or "").strip().splitlines()
    return lines[0] if lines else ""


# --------------------------------------------------------------------------
# running things


def env_with_src(**extra: str) -> dict[str, str]:
    """This process's environment with ``src`` first on PYTHONPATH."""
    env = dict(os.environ)
    parts = [str(SRC)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(parts))
    env.update(extra)
    return env


def show(cmd: Sequence[str], extra_env: dict[str, str] | None = None) -> None:
    """Print a command the way a person would type it from the repo root."""
    words = [os.path.relpath(w, REPO) if os.path.isabs(w) and w.startswith(str(REPO)) else w
             for w in cmd]
    if words and words[0] == sys.executable:
        words[0] = "python"
    prefix = "".join(f"{k}={shlex.quote(v)} " for k, v in (extra_env or {}).items())
    print(f"$ {prefix}{shlex.join(words)}", flush=True)


def run(cmd: Sequence[str], **extra_env: str) -> int:
    """Run ``cmd`` from the repo root with ``src`` on PYTHONPATH; return its exit code."""
    show(cmd, extra_env)
    try:
        proc = subprocess.run(list(cmd), cwd=REPO, env=env_with_src(**extra_env), check=False)
        return proc.returncode
    except KeyboardInterrupt:
        return 130


def python_script(script: str, args: Sequence[str], **extra_env: str) -> int:
    """Run a repo script with this interpreter, or explain that it is missing (exit 2)."""
    path = REPO / script
    if not path.exists():
        print(f"make.py: {script} does not exist yet; nothing to run", file=sys.stderr)
        return 2
    return run([sys.executable, str(path), *args], **extra_env)


def python_tool(script: str, args: Sequence[str], **extra_env: str) -> int:
    """Run a tool (``tools/bench/run.py``) as a module (``python -m tools.bench.run``).

    The tools are a package run from the repo root, so they import each other
    as ``tools.bench.common`` with no ``sys.path`` edits (tools/__init__.py).
    """
    if not (REPO / script).exists():
        print(f"make.py: {script} does not exist yet; nothing to run", file=sys.stderr)
        return 2
    module = script.removesuffix(".py").replace("/", ".")
    return run([sys.executable, "-m", module, *args], **extra_env)


# --------------------------------------------------------------------------
# tasks


@task("test")
def test(args: list[str]) -> int:
    """Run the whole unittest suite (tests/run.py; -j N, -k PATTERN, module names)."""
    return python_script("tests/run.py", args)


@task("test-quick")
def test_quick(args: list[str]) -> int:
    """Run the suite with NOBROKER_QUICK=1, skipping tests marked @slow."""
    return python_script("tests/run.py", args, NOBROKER_QUICK="1")


@task("demo")
def demo(args: list[str]) -> int:
    """Run the guided tour, examples/demo.py."""
    return python_script("examples/demo.py", args)


@task("video-demo")
def video_demo(args: list[str]) -> int:
    """Run the tour paced for screen recording (examples/video_demo.py; --scenes N)."""
    return python_script("examples/video_demo.py", args)


@task("build")
def build(args: list[str]) -> int:
    """Build dist/nobroker.pyz, one runnable file (tools/build/pyz.py)."""
    return python_tool("tools/build/pyz.py", args)


@task("check-deps")
def check_deps(args: list[str]) -> int:
    """Prove no third-party import exists; fail if one does (tools/build/check_deps.py)."""
    return python_tool("tools/build/check_deps.py", args)


@task("deps-proof")
def deps_proof(args: list[str]) -> int:
    """Regenerate deps-proof.txt, the committed output of check-deps."""
    return python_tool("tools/build/check_deps.py", ["--write", "deps-proof.txt", *args])


@task("bench")
def bench(args: list[str]) -> int:
    """Measure throughput on this machine (tools/bench/run.py)."""
    return python_tool("tools/bench/run.py", args)


@task("bench-md")
def bench_md(args: list[str]) -> int:
    """The benchmark, printed as a Markdown table (tools/bench/run.py --markdown)."""
    return python_tool("tools/bench/run.py", ["--markdown", *args])


@task("bench-salvage")
def bench_salvage(args: list[str]) -> int:
    """How long salvage takes next to a cold open (tools/bench/salvage.py; --jobs N)."""
    return python_tool("tools/bench/salvage.py", args)


@task("bench-dashboard")
def bench_dashboard(args: list[str]) -> int:
    """The dashboard's response times on a big queue (tools/bench/dashboard.py; --jobs N)."""
    return python_tool("tools/bench/dashboard.py", args)


@task("bench-wake")
def bench_wake(args: list[str]) -> int:
    """How fast a result wakes a waiter in another process (tools/bench/result_wake.py)."""
    return python_tool("tools/bench/result_wake.py", args)


@task("bench-multiqueue")
def bench_multiqueue(args: list[str]) -> int:
    """A Worker over 3 queues vs over 1: drain rate ratio (tools/bench/multiqueue.py)."""
    return python_tool("tools/bench/multiqueue.py", args)


@task("profile")
def profile(args: list[str]) -> int:
    """Where a call's time goes, layer by layer (tools/profile/calls.py)."""
    return python_tool("tools/profile/calls.py", args)


@task("profile-commit")
def profile_commit(args: list[str]) -> int:
    """A durable call's floor, and 1 vs 4 threads' commit path (tools/profile/commit.py)."""
    return python_tool("tools/profile/commit.py", args)


@task("profile-worker")
def profile_worker(args: list[str]) -> int:
    """A worker's CPU per job by phase: lease, ack, replay, fsync (tools/profile/worker.py)."""
    return python_tool("tools/profile/worker.py", args)


@task("bench-peers")
def bench_peers(args: list[str]) -> int:
    """Compare against other job queues (tools/bench/peers/run.py)."""
    return python_tool("tools/bench/peers/run.py", args)


@task("bench-realistic")
def bench_realistic(args: list[str]) -> int:
    """nobroker and its peers draining real-shaped jobs (tools/bench/realistic/run.py)."""
    return python_tool("tools/bench/realistic/run.py", args)


@task("torture")
def torture(args: list[str]) -> int:
    """Long crash-and-recover stress run (tools/torture/run.py)."""
    return python_tool("tools/torture/run.py", args)


@task("cli")
def cli(args: list[str]) -> int:
    """Run the command line from the tree (python -m nobroker; --help by default)."""
    return run([sys.executable, "-m", "nobroker", *(args or ["--help"])])


@task("lint")
def lint(args: list[str]) -> int:
    """Run ruff and mypy --strict from the pinned venv .dev/venv (created if missing)."""
    venv_python = ensure_lint_venv()
    if venv_python is None:
        return 1
    paths = [p for p in LINT_PATHS if (REPO / p).exists()]
    ruff = run([str(venv_python), "-m", "ruff", "check", "--output-format", "concise",
                "--cache-dir", str(DEV / "ruff_cache"), *paths, *args])
    mypy = run([str(venv_python), "-m", "mypy", "--strict",
                "--cache-dir", str(DEV / "mypy_cache"), "src/nobroker"])
    print(f"lint: ruff {'ok' if ruff == 0 else 'FAILED'}, mypy {'ok' if mypy == 0 else 'FAILED'}")
    return 0 if ruff == 0 and mypy == 0 else 1


# --------------------------------------------------------------------------
# the PostgreSQL backend: its tests and benchmark need a server and psycopg.
# tools/postgres/cluster.py makes a throwaway server; the driver goes into .dev/pg-venv.

PG_VENV = DEV / "pg-venv"
PG_BENCH_VENV = DEV / "pg-bench-venv"
PG_TESTS = ("test_postgres", "test_postgres_connections", "test_postgres_processes",
            "test_postgres_tasks", "test_postgres_dashboard", "test_postgres_multiqueue",
            "test_postgres_transactions", "test_postgres_dependencies",
            "test_postgres_revivals", "test_postgres_limits", "test_postgres_prefetch",
            "test_step_leasing")  # the last: on files, memory:// and PostgreSQL


@task("test-postgres")
def test_postgres(args: list[str]) -> int:
    """Run the PostgreSQL backend's tests on a throwaway server (tools/postgres/cluster.py)."""
    python = ensure_venv(PG_VENV, REPO / "requirements-postgres.txt")
    if python is None:
        return 1
    # One module at a time: the restart test takes the shared server down.
    return run([sys.executable, "-m", "tools.postgres.cluster", "run", "--",
                str(python), str(REPO / "tests/run.py"), "-j", "1", *(args or PG_TESTS)])


@task("bench-postgres")
def bench_postgres(args: list[str]) -> int:
    """nobroker on PostgreSQL vs procrastinate and PgQueuer (tools/bench/postgres/run.py)."""
    python = ensure_venv(PG_BENCH_VENV, REPO / "requirements-bench-postgres.txt")
    if python is None:
        return 1
    return run([sys.executable, "-m", "tools.postgres.cluster", "run", "--",
                str(python), "-m", "tools.bench.postgres.run", *args])


@task("bench-postgres-limits")
def bench_postgres_limits(args: list[str]) -> int:
    """A limited ack_and_lease vs an unlimited one, on PostgreSQL
    (tools/bench/postgres/limits.py)."""
    python = ensure_venv(PG_VENV, REPO / "requirements-postgres.txt")
    if python is None:
        return 1
    return run([sys.executable, "-m", "tools.postgres.cluster", "run", "--",
                str(python), "-m", "tools.bench.postgres.limits", *args])


# --------------------------------------------------------------------------
# Celery on nobroker (nobroker.celery, issue 26): Celery goes into .dev/celery-venv,
# with nobroker installed there as a user installs it (its .pth hook and entry point).

CELERY_VENV = DEV / "celery-venv"
OTEL_VENV = DEV / "otel-venv"
OTEL_TESTS = ("test_otel",)
# Celery's own suite needs pytest and its plugins: a venv of its own, so that the
# test-celery venv stays as a user's (Celery and nobroker only)
CELERY_SUITE_VENV = DEV / "celery-suite-venv"
CELERY_TESTS = ("test_celery_hook", "test_celery_app", "test_celery_control", "test_celery_crash")
# what installing nobroker puts in site-packages besides the code run from src/
CELERY_INSTALL_INPUTS = ("pyproject.toml", "setup.py", "src/nobroker-celery.pth",
                         "src/_nobroker_celery.py")


@task("test-otel")
def test_otel(args: list[str]) -> int:
    """Test nobroker.otel's spans with the OpenTelemetry SDK's in-memory exporter
    (tests/otel; installs requirements-otel.txt into .dev/otel-venv)."""
    python = ensure_venv(OTEL_VENV, REPO / "requirements-otel.txt")
    if python is None:
        return 1
    return run([str(python), "tests/run.py", "-j", "1", "-v", *(args or OTEL_TESTS)])


@task("test-celery")
def test_celery(args: list[str]) -> int:
    """Run Celery on nobroker: real `celery worker` processes (tests/with_celery)."""
    python = ensure_celery_venv()
    if python is None:
        return 1
    return run([str(python), "tests/run.py", "-j", "1", *(args or CELERY_TESTS)])


@task("test-celery-suite")
def test_celery_suite(args: list[str]) -> int:
    """Run Celery's own integration tests (tasks, canvas) on nobroker (tools/suites/)."""
    python = ensure_celery_venv(CELERY_SUITE_VENV, REPO / "requirements-celery-suite.txt")
    if python is None:
        return 1
    return python_tool("tools/suites/celery_suite.py", ["--python", str(python), *args])


CELERY_PG_VENV = DEV / "celery-pg-venv"


@task("test-celery-postgres")
def test_celery_postgres(args: list[str]) -> int:
    """Run Celery on nobroker+postgresql:// (a throwaway cluster, tools/postgres/cluster.py)."""
    python = ensure_celery_venv(CELERY_PG_VENV, REPO / "requirements-celery-postgres.txt")
    if python is None:
        return 1
    return run([sys.executable, "-m", "tools.postgres.cluster", "run", "--",
                str(python), str(REPO / "tests/run.py"), "-j", "1",
                *(args or ("test_celery_postgres",))])


def ensure_celery_venv(venv: Path = CELERY_VENV,
                       requirements: Path = REPO / "requirements-celery.txt") -> Path | None:
    """A Celery venv, with nobroker installed in it when its install inputs changed."""
    python = ensure_venv(venv, requirements)
    if python is None:
        return None
    digest = hashlib.sha256()
    for name in CELERY_INSTALL_INPUTS:
        digest.update((REPO / name).read_bytes())
    stamp = venv / "nobroker-install.sha256"
    if stamp.exists() and stamp.read_text().strip() == digest.hexdigest():
        return python
    code = run([str(python), "-m", "pip", "install", "--disable-pip-version-check", "--quiet",
                "--no-deps", "--force-reinstall", str(REPO)])
    if code != 0:
        print("make.py: installing nobroker into the Celery venv failed", file=sys.stderr)
        return None
    stamp.write_text(digest.hexdigest() + "\n")
    return python


# --------------------------------------------------------------------------
# Dramatiq on nobroker (nobroker.dramatiq, issue 26): Dramatiq goes into
# .dev/dramatiq-venv; nobroker runs from src/ (the app names its broker itself).

DRAMATIQ_VENV = DEV / "dramatiq-venv"
DRAMATIQ_TESTS = ("test_dramatiq_app", "test_dramatiq_crash")


@task("test-dramatiq")
def test_dramatiq(args: list[str]) -> int:
    """Run Dramatiq on nobroker: real `dramatiq` worker processes (tests/with_dramatiq)."""
    python = ensure_venv(DRAMATIQ_VENV, REPO / "requirements-dramatiq.txt")
    if python is None:
        return 1
    return run([str(python), "tests/run.py", "-j", "1", *(args or DRAMATIQ_TESTS)])


@task("test-dramatiq-suite")
def test_dramatiq_suite(args: list[str]) -> int:
    """Run Dramatiq's own tests (actors, results, composition, worker) on nobroker."""
    python = ensure_venv(DRAMATIQ_VENV, REPO / "requirements-dramatiq-suite.txt")
    if python is None:
        return 1
    return python_tool("tools/suites/dramatiq_suite.py", ["--python", str(python), *args])


@task("clean")
def clean(args: list[str]) -> int:
    """Remove caches, build output, the built site and benchmark scratch (--all: the venvs too)."""
    doomed: list[Path] = [REPO / "dist", REPO / "build", REPO / ".bench",
                          DEV / "ruff_cache", DEV / "mypy_cache", DEV / "site", DEV / "screenshots"]
    doomed += REPO.glob("*.egg-info")
    doomed += SRC.glob("*.egg-info")
    doomed += pycache_dirs(REPO)
    if "--all" in args:
        doomed += [VENV, DOCS_VENV, WEB_VENV, NPM_DIR, CELERY_VENV, CELERY_SUITE_VENV,
                   CELERY_PG_VENV, DRAMATIQ_VENV, OTEL_VENV]
    for path in sorted(set(doomed)):
        if path.is_dir():
            print(f"removing {path.relative_to(REPO)}/")
            shutil.rmtree(path)
        elif path.exists():
            print(f"removing {path.relative_to(REPO)}")
            path.unlink()
    return 0


def pycache_dirs(root: Path) -> list[Path]:
    """``__pycache__`` dirs under ``root``, never entering hidden dirs or venvs."""
    found: list[Path] = []
    for here, dirs, files in os.walk(root):
        if "pyvenv.cfg" in files and Path(here) != root:
            dirs.clear()  # someone's virtualenv: not ours to clean
            continue
        if "__pycache__" in dirs:
            found.append(Path(here) / "__pycache__")
        dirs[:] = [d for d in dirs if not d.startswith(".") and d != "__pycache__"]
    return found


# --------------------------------------------------------------------------
# the docs site and the playground (docsite/, issue 12): development tools only

DOCS_VENV = DEV / "docs-venv"
WEB_VENV = DEV / "web-venv"
NPM_DIR = DEV / "npm"  # docsite/package.json's packages (Pyodide) are installed here
CHROMIUM = Path("/usr/bin/chromium")


@task("docs")
def docs(args: list[str]) -> int:
    """Build the docs site and the playground, strictly, into .dev/site (docsite/mkdocs.yml)."""
    python = ensure_venv(DOCS_VENV, REPO / "requirements-docs.txt")
    if python is None or ensure_npm_packages() != 0:
        return 1
    return run([str(python), "-m", "mkdocs", "build", "--strict", "-f", "docsite/mkdocs.yml",
                *args], NO_MKDOCS_2_WARNING="1")


@task("test-playground")
def test_playground(args: list[str]) -> int:
    """Build the site, then test the playground in headless Chromium (tests/docs/)."""
    if docs([]) != 0:
        return 1
    python = ensure_venv(WEB_VENV, REPO / "requirements-web.txt")
    if python is None or ensure_chromium() != 0:
        return 1
    return run([str(python), "tests/run.py", "-j", "1", "-v", "test_playground", *args],
               NOBROKER_REQUIRE_BROWSER="1")


def ensure_npm_packages() -> int:
    """Install docsite/package-lock.json's packages into .dev/npm (npm ci) when it changed."""
    lock = REPO / "docsite" / "package-lock.json"
    wanted = hashlib.sha256(lock.read_bytes()).hexdigest()
    stamp = NPM_DIR / "package-lock.sha256"
    if stamp.exists() and stamp.read_text().strip() == wanted:
        return 0
    if shutil.which("npm") is None:
        print("make.py: npm is missing (apt-get install -y npm)", file=sys.stderr)
        return 1
    NPM_DIR.mkdir(parents=True, exist_ok=True)
    for name in ("package.json", "package-lock.json"):
        shutil.copyfile(REPO / "docsite" / name, NPM_DIR / name)
    code = run(["npm", "ci", "--no-audit", "--no-fund", "--prefix", str(NPM_DIR)])
    if code == 0:
        stamp.write_text(wanted + "\n")
    return code


def ensure_chromium() -> int:
    """Debian's chromium, installed with apt-get when missing (CI runs as root)."""
    if CHROMIUM.exists():
        return 0
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        print(f"make.py: {CHROMIUM} is missing; install Debian's chromium package",
              file=sys.stderr)
        return 1
    install = ["apt-get", "install", "-y", "chromium"]
    if run(install) != 0 and (run(["apt-get", "update"]) != 0 or run(install) != 0):
        return 1
    return 0 if CHROMIUM.exists() else 1


# the dashboard's browser tests (issue 12, first half): the same venv and Chromium.
WEB_TESTS = ("test_dashboard_browser",)


@task("test-web")
def test_web(args: list[str]) -> int:
    """Test the dashboard in headless Chromium (tests/dashboard/test_dashboard_browser.py)."""
    python = ensure_venv(WEB_VENV, REPO / "requirements-web.txt")
    if python is None or ensure_chromium() != 0:
        return 1
    return run([str(python), "tests/run.py", "-j", "1", "-v", *(args or WEB_TESTS)],
               NOBROKER_REQUIRE_BROWSER="1")


# the Django integration (nobroker.django): Django 6 needs Python 3.12 or newer, so
# its suite runs in .dev/django-venv, made with the first such interpreter found.
DJANGO_VENV = DEV / "django-venv"
DJANGO_TESTS = ("test_django",)
DJANGO_PG_TESTS = ("test_django_postgres",)  # on a server from tools/postgres/cluster.py


def django_python() -> str | None:
    """A Python 3.12+ for Django 6: $NOBROKER_DJANGO_PYTHON, this one, python3.13/3.12
    on PATH, or pyenv's installs (newest first)."""
    wanted = os.environ.get("NOBROKER_DJANGO_PYTHON")
    if wanted:
        return wanted
    if sys.version_info >= (3, 12):
        return sys.executable
    candidates = [shutil.which(f"python3.{minor}") for minor in (14, 13, 12)]
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    candidates += sorted((str(p) for p in pyenv.glob("3.1[2-9]*/bin/python")), reverse=True)
    for candidate in candidates:
        if candidate and subprocess.run(
                [candidate, "-c", "import sys; sys.exit(sys.version_info < (3, 12))"],
                capture_output=True).returncode == 0:
            return candidate
    return None


@task("test-django")
def test_django(args: list[str]) -> int:
    """Run the Django integration's suite (Django 6, a Python 3.12+ found for it), on
    files and SQLite, then on a throwaway PostgreSQL server (tools/postgres/cluster.py)."""
    python = django_python()
    if python is None:
        print("!!! make.py test-django: no Python 3.12+ found for Django 6; set "
              "NOBROKER_DJANGO_PYTHON=/path/to/python3.12 (suite NOT RUN)", file=sys.stderr)
        return 1
    venv_python = ensure_venv(DJANGO_VENV, REPO / "requirements-django.txt", base=python)
    if venv_python is None:
        return 1
    tests = [str(venv_python), "tests/run.py", "-j", "1"]
    on_server = [sys.executable, "-m", "tools.postgres.cluster", "run", "--"]
    from tools.postgres.cluster import bindir
    if bindir() is None:
        print("!!! make.py test-django: PostgreSQL is not installed (no initdb): the "
              "Django suite on PostgreSQL NOT RUN (`make.py test-postgres` installs it)",
              file=sys.stderr)
        return run([*tests, *(args or DJANGO_TESTS)])
    if args:
        return run([*on_server, *tests, *args])
    # The files suite, then again on a throwaway server: the jobs in Django's
    # database (OPTIONS "database"), written in its transactions.
    on_files = run([*tests, *DJANGO_TESTS])
    return on_files or run([*on_server, *tests, *DJANGO_PG_TESTS])


@task("help")
def help_(args: list[str]) -> int:
    """List the tasks."""
    print("usage: python make.py TASK [ARGS...]    (or: make TASK ARGS='...')\n")
    print("tasks:")
    width = max(len(name) for name in TASKS)
    for name, fn in TASKS.items():
        print(f"  {name:<{width}}  {summary(fn)}")
    return 0


# --------------------------------------------------------------------------
# the lint venv


def ensure_lint_venv() -> Path | None:
    """Create .dev/venv if missing and install requirements-dev.txt when it changed."""
    return ensure_venv(VENV, REQUIREMENTS_DEV)


def ensure_venv(venv: Path, requirements: Path, base: str = sys.executable) -> Path | None:
    """Create `venv` (with the interpreter `base`) if missing and install
    `requirements` into it when the file changed."""
    python = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    if not python.exists():
        print(f"creating the venv {venv.relative_to(REPO)}")
        if run([base, "-m", "venv", str(venv)]) != 0:
            return None
    wanted = hashlib.sha256(requirements.read_bytes()).hexdigest()
    stamp = venv / f"{requirements.stem}.sha256"
    if stamp.exists() and stamp.read_text().strip() == wanted:
        print(f"{venv.relative_to(REPO)} is up to date with {requirements.name}")
        return python
    code = run([str(python), "-m", "pip", "install", "--disable-pip-version-check",
                "--quiet", "-r", str(requirements)])
    if code != 0:
        print(f"make.py: installing {requirements.name} failed", file=sys.stderr)
        return None
    stamp.write_text(wanted + "\n")
    return python


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        return help_([])
    name, args = argv[0], argv[1:]
    fn = TASKS.get(name)
    if fn is None:
        print(f"make.py: unknown task {name!r}; `python make.py` lists them", file=sys.stderr)
        return 2
    return fn(args)


if __name__ == "__main__":
    sys.exit(main())
