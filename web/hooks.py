"""MkDocs hooks for the nobroker site: shared text included, the playground added.

Two jobs, both at build time, so that nothing on the site is a second copy
that could drift:

- **Includes.** A page line `<!-- include: README.md "The Worker" -->` is
  replaced by the body of that README section (its heading dropped, its
  subsections kept, up to the next heading of the same level or higher);
  `<!-- include: docs/FORMAT.md -->` by the whole file. Links inside the
  included text are rewritten to wherever the site shows their target: a
  README anchor goes to the page that includes that section, `docs/FORMAT.md`
  to the page that includes it. A missing file or section stops the build;
  any link left unresolved is caught by `mkdocs build --strict`.
- **The playground.** `web/playground/` is copied to `playground/`, with the
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

WEB = Path(__file__).resolve().parent
REPO = WEB.parent
PLAYGROUND = WEB / "playground"
PYODIDE = REPO / ".dev" / "npm" / "node_modules" / "pyodide"
# What loadPyodide() fetches from its indexURL for a stdlib-only program.
PYODIDE_FILES = ("pyodide.mjs", "pyodide.asm.mjs", "pyodide.asm.wasm", "python_stdlib.zip",
                 "pyodide-lock.json")
PLAYGROUND_FILES = ("index.html", "playground.js", "playground.css", "playground.py")

INCLUDE = re.compile(r'^<!-- include: (?P<path>\S+)(?: "(?P<section>[^"]+)")? -->$', re.M)
HEADING = re.compile(r"^(#{1,6}) +(.+?) *#*$")
LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")

# Filled by on_files: where each included thing lives on the site.
_section_pages: dict[str, str] = {}  # README slug -> page src_uri (the section's own page)
_anchor_pages: dict[str, str] = {}  # README slug of a subsection -> page src_uri
_file_pages: dict[str, str] = {}  # repo path of a wholly included file -> page src_uri


def slugify(title: str) -> str:
    """The anchor GitHub and MkDocs' toc both derive from a heading."""
    text = re.sub(r"[^\w\s-]", "", title.replace("`", "")).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


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


def headings(text: str) -> list[tuple[int, int, str]]:
    """(line number, level, title) of every Markdown heading outside code."""
    found = []
    for number, (line, code) in enumerate(_lines_outside_code(text)):
        match = None if code else HEADING.match(line)
        if match:
            found.append((number, len(match.group(1)), match.group(2)))
    return found


def fail(message: str) -> Exception:
    """The error that stops a MkDocs build with `message`."""
    from mkdocs.exceptions import PluginError

    return PluginError(message)


def section(path: str, title: str) -> str:
    """The body of `title`'s section in the repo file `path` (heading excluded)."""
    text = read(path)
    lines = text.splitlines()
    marks = headings(text)
    for index, (number, level, name) in enumerate(marks):
        if name == title:
            end = next((n for n, lvl, _ in marks[index + 1:] if lvl <= level), len(lines))
            return "\n".join(lines[number + 1:end]).strip("\n")
    raise fail(f"{path} has no section {title!r} (a page includes it)")


def read(path: str) -> str:
    try:
        return (REPO / path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise fail(f"a page includes {path}, which does not exist") from None


def rewrite_links(text: str, source: str, page_uri: str) -> str:
    """Point the links of text included from `source` at their pages on the site."""
    def target_for(link: str) -> str | None:
        if "://" in link or link.startswith("mailto:"):
            return None
        path, _, anchor = link.partition("#")
        if not path:  # an anchor in the source file itself
            path = source
        path = posixpath.normpath(posixpath.join(posixpath.dirname(source), path))
        if path == "README.md" and anchor:
            if anchor in _section_pages:
                return _section_pages[anchor]
            if anchor in _anchor_pages:
                return f"{_anchor_pages[anchor]}#{anchor}"
            return None
        if path in _file_pages:
            return _file_pages[path] + (f"#{anchor}" if anchor else "")
        return None

    def replace(match: re.Match[str]) -> str:
        new = target_for(match.group("target"))
        if new is None:
            return match.group(0)
        uri, _, anchor = new.partition("#")
        relative = posixpath.relpath(uri, posixpath.dirname(page_uri) or ".")
        return f"]({relative}{'#' + anchor if anchor else ''})"

    out = []
    for line, code in _lines_outside_code(text):
        out.append(line if code else LINK.sub(replace, line))
    return "\n".join(out)


def on_files(files: Files, config: MkDocsConfig) -> Files:
    _section_pages.clear()
    _anchor_pages.clear()
    _file_pages.clear()
    for file in files.documentation_pages():
        for match in INCLUDE.finditer(Path(file.abs_src_path or "").read_text(encoding="utf-8")):
            path, title = match.group("path"), match.group("section")
            if title is None:
                _file_pages[path] = file.src_uri
                continue
            if path == "README.md":
                _section_pages[slugify(title)] = file.src_uri
                for _, _, sub in headings(section(path, title)):
                    _anchor_pages[slugify(sub)] = file.src_uri
    add_playground(files, config)
    return files


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    def expand(match: re.Match[str]) -> str:
        path, title = match.group("path"), match.group("section")
        body = section(path, title) if title else read(path)
        if title is None:  # a whole file: its own title would repeat the page's
            body = re.sub(r"\A# .*\n", "", body)
        return rewrite_links(body, path, page.file.src_uri)

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
