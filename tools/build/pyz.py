"""Build ``dist/nobroker.pyz``: the whole library as one runnable file.

This tool owns the zipapp bundle. It copies ``src/nobroker`` into a temporary
staging directory, adds a generated ``__main__.py`` that runs
``nobroker.cli:main`` and exits with its return code, and packs the directory
with the stdlib ``zipapp`` (compressed, ``#!/usr/bin/env python3``). Nothing is
installed and nothing outside the staging directory and the output file is
written.

The bundle must be able to ``work`` handler modules that live in the caller's
current directory, so the generated entry point puts ``os.getcwd()`` on
``sys.path`` -- right after the archive itself, so the bundled ``nobroker``
always wins over any ``nobroker`` directory the caller happens to stand in.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import zipapp
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]  # tools/build/pyz.py
DEFAULT_SOURCE = REPO / "src" / "nobroker"
DEFAULT_OUTPUT = REPO / "dist" / "nobroker.pyz"
INTERPRETER = "/usr/bin/env python3"

MAIN_PY = '''\
"""Entry point of nobroker.pyz: run the nobroker CLI and exit with its code."""

import os
import sys

# sys.path[0] is this archive, so nobroker is imported from inside it. The
# caller's directory goes right after it: handler modules named on the command
# line are found there, and they cannot shadow the bundled package.
_archive = os.path.abspath(os.path.dirname(__file__))
_at = next((i for i, p in enumerate(sys.path) if os.path.abspath(p) == _archive), 0)
sys.path.insert(_at + 1, os.getcwd())

from nobroker.cli import main  # noqa: E402  (must follow the sys.path change)

sys.exit(main())
'''


def stage(source: Path, staging: Path) -> None:
    """Lay out the archive's contents: the package plus the entry point."""
    shutil.copytree(source, staging / "nobroker",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.pyo"))
    (staging / "__main__.py").write_text(MAIN_PY, encoding="utf-8")


def build(source: Path, output: Path) -> Path:
    """Build the zipapp at ``output`` from the package directory ``source``."""
    if not ((source / "cli" / "__init__.py").is_file() or (source / "cli.py").is_file()):
        raise FileNotFoundError(f"{source / 'cli'}/ (or cli.py) not found: the bundle needs "
                                "a CLI to run")
    output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="nobroker-pyz-") as tmp:
        staging = Path(tmp) / "app"
        stage(source, staging)
        partial = output.with_name(output.name + ".partial")
        zipapp.create_archive(staging, partial, interpreter=INTERPRETER, compressed=True)
        os.replace(partial, output)  # never leave a half-written bundle under the real name
    return output


def display(path: Path) -> str:
    """``path`` relative to the current directory when it is below it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="build_pyz.py",
                                     description="Build nobroker.pyz with zipapp.")
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE,
                        help="the nobroker package directory (default: src/nobroker)")
    parser.add_argument("--output", "-o", type=Path, default=DEFAULT_OUTPUT,
                        help="where to write the bundle (default: dist/nobroker.pyz)")
    args = parser.parse_args(argv)
    try:
        output = build(args.source, args.output)
    except OSError as exc:  # includes the missing-CLI FileNotFoundError
        print(f"build_pyz.py: {exc}", file=sys.stderr)
        return 1
    print(f"built {display(output)} ({output.stat().st_size:,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
