"""MkDocs hooks for the nobroker site: the manual included, the playground added.

Two jobs, both at build time, so that nothing on the site is a second copy
that could drift:

- **Includes.** The manual is README.md and docs/*.md. A page line
  `<!-- include: docs/WORKER.md -->` is replaced by that whole file, its
  own `# title` dropped (the page has one). Links inside the included text
  are rewritten to wherever the site shows their target: `docs/WORKER.md`
  or `../README.md#limits` to the page that includes that file (with the
  anchor); a link to a file of the repository that the site does not show
  (LICENSE, STDLIB.md) becomes its text. A missing file, or a link to a
  file the repository does not hold, stops the build; a link to a heading
  that does not exist is caught by `mkdocs build --strict`.
- **The playground.** `docsite/playground/` is copied to `playground/`, with the
  Pyodide runtime (from the npm package `make.py docs` installs into
  `.dev/npm`) under `playground/pyodide/`, and `playground/nobroker.zip`, the
  package's sources from `src/nobroker`, zipped fresh at every build. The
  page fetches only these files, from its own site.

This file is development tooling, run by MkDocs; it is not part of nobroker.
"""

from __future__ import annotations

import io
import posixpath
import re
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # MkDocs is imported lazily: this module is scanned by check-deps
    from mkdocs.config.defaults import MkDocsConfig
    from mkdocs.structure.files import Files
    from mkdocs.structure.pages import Page

DOCSITE = Path(__file__).resolve().parent
REPO = DOCSITE.parent
PLAYGROUND = DOCSITE / "playground"
PYODIDE = REPO / ".dev" / "npm" / "node_modules" / "pyodide"
# What loadPyodide() fetches from its indexURL for a stdlib-only program.
PYODIDE_FILES = ("pyodide.mjs", "pyodide.asm.mjs", "pyodide.asm.wasm", "python_stdlib.zip",
                 "pyodide-lock.json")
PLAYGROUND_FILES = ("index.html", "playground.js", "playground.css", "playground.py")

INCLUDE = re.compile(r"^<!-- include: (?P<path>\S+) -->$", re.M)
TITLE = re.compile(r"^# +.+$")
LINK = re.compile(r"\[(?P<text>[^\]]*)\]\((?P<target>[^)\s]+)\)")

# Filled by on_files: the page that includes each repository file, by its repo path.
_file_pages: dict[str, str] = {}


def _lines_outside_code(text: str) -> list[tuple[str, bool]]:
    """Each line with whether it is inside a fenced code block."""
    out, fenced = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
            out.append((line, True))
        else:
            out.append((line, fenced))
    return out


def fail(message: str) -> Exception:
    """The error that stops a MkDocs build with `message`."""
    from mkdocs.exceptions import PluginError

    return PluginError(message)


def read(path: str) -> str:
    try:
        return (REPO / path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise fail(f"a page includes {path}, which does not exist") from None


def without_title(text: str) -> str:
    """`text` without its first line if that line is its `# title` (README.md's
    comes after an HTML comment: the first line outside it counts)."""
    lines = text.splitlines()
    in_comment = False
    for index, line in enumerate(lines):
        if in_comment or line.startswith("<!--"):
            in_comment = "-->" not in line
            continue
        if line.strip():
            if TITLE.match(line):
                del lines[index]
            break
    return "\n".join(lines)


def rewrite_links(text: str, source: str, page_uri: str) -> str:
    """Point the links of text included from `source` at their pages on the site."""
    def replace(match: re.Match[str]) -> str:
        link = match.group("target")
        if "://" in link or link.startswith("mailto:"):
            return match.group(0)
        path, _, anchor = link.partition("#")
        path = posixpath.normpath(posixpath.join(posixpath.dirname(source), path or
                                                 posixpath.basename(source)))
        if path not in _file_pages:
            if not (REPO / path).exists():
                raise fail(f"{source} links to {link}, which the repository does not hold")
            return match.group("text")  # a repository file the site does not show
        relative = posixpath.relpath(_file_pages[path], posixpath.dirname(page_uri) or ".")
        return f"[{match.group('text')}]({relative}{'#' + anchor if anchor else ''})"

    out: list[str] = []
    prose: list[str] = []  # a run of lines outside code: a link's text may wrap
    for line, code in [*_lines_outside_code(text), ("", True)]:
        if not code:
            prose.append(line)
            continue
        if prose:
            out.append(LINK.sub(replace, "\n".join(prose)))
            prose = []
        out.append(line)
    return "\n".join(out[:-1])


def on_files(files: Files, config: MkDocsConfig) -> Files:
    _file_pages.clear()
    for file in files.documentation_pages():
        for match in INCLUDE.finditer(Path(file.abs_src_path or "").read_text(encoding="utf-8")):
            _file_pages[match.group("path")] = file.src_uri
    add_playground(files, config)
    return files


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    def expand(match: re.Match[str]) -> str:
        path = match.group("path")
        return rewrite_links(without_title(read(path)), path, page.file.src_uri)

    return INCLUDE.sub(expand, markdown)


def add_playground(files: Files, config: MkDocsConfig) -> None:
    from mkdocs.structure.files import File

    missing = [name for name in PYODIDE_FILES if not (PYODIDE / name).exists()]
    if missing:
        raise fail(f"Pyodide is not installed in {PYODIDE} (missing {', '.join(missing)});"
                          f" python3 make.py docs installs it")
    for name in PLAYGROUND_FILES:
        files.append(File.generated(config, f"playground/{name}",
                                    abs_src_path=str(PLAYGROUND / name)))
    for name in PYODIDE_FILES:
        files.append(File.generated(config, f"playground/pyodide/{name}",
                                    abs_src_path=str(PYODIDE / name)))
    files.append(File.generated(config, "playground/nobroker.zip", content=package_zip()))


def package_zip() -> bytes:
    """src/nobroker's Python files as a zip, entries sorted and dated 1980 (reproducible)."""
    buffer = io.BytesIO()
    source = REPO / "src"
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted((source / "nobroker").rglob("*")):
            if path.suffix in (".py", ".typed") and "__pycache__" not in path.parts:
                info = zipfile.ZipInfo(path.relative_to(source).as_posix(), (1980, 1, 1, 0, 0, 0))
                info.compress_type = zipfile.ZIP_DEFLATED
                archive.writestr(info, path.read_bytes())
    return buffer.getvalue()
