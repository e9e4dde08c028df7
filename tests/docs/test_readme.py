"""README.md and every page of docs/ run as written, and point at what exists.

Every block fenced as python runs as pasted, as its own script in a fresh
temporary directory, and must finish within BLOCK_SECONDS; every block fenced
as bash runs the same way under `bash -e`, with a `nobroker` command on PATH
that is this checkout's `python3 -m nobroker`. A block that cannot run so is
marked by an HTML comment on the line before its fence that starts with
"not run:" and gives a reason (the rule is written at the top of README.md's
source). So the manual cannot drift from the code: a changed signature, a
block that waits for a minute, a command that no longer exists fails here.

The text is checked too: every relative link names a file of this
repository (and a heading of it, for a Markdown anchor), every `make.py
TASK` it mentions is a task, and every make.py task is reachable as `make
TASK` through the Makefile, as the README promises.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import unittest
from dataclasses import dataclass
from pathlib import Path

from harness.support import REPO, child_env

README = REPO / "README.md"
PAGES = [README, *sorted((REPO / "docs").glob("*.md"))]  # the manual: the front door first
BLOCK_SECONDS = 30  # a hang guard, not a speed test: the blocks take about a second
RUNNABLE = {"python": "python", "py": "python", "bash": "bash", "sh": "bash",
            "shell": "bash", "console": None}
_MARK = re.compile(r"^<!--\s*not run:\s*(?P<reason>.*?)\s*-->\s*$")
_LINK = re.compile(r"\[[^\]]*\]\((?P<target>[^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6} +(?P<title>.+?) *#*$", re.M)
_MAKE_PY_TASK = re.compile(r"make\.py +(?P<task>[a-z][a-z-]*)")


def page_name(page: Path) -> str:
    return page.relative_to(REPO).as_posix()


@dataclass(frozen=True)
class Block:
    line: int  # of the opening fence, 1-based
    language: str
    code: str
    skip: str | None  # the reason given by a "not run:" comment, if any


def blocks(text: str) -> list[Block]:
    """The fenced blocks of a Markdown text, with the "not run:" mark before each."""
    found = []
    lines = text.splitlines()
    index = 0
    in_comment = False
    while index < len(lines):
        line = lines[index]
        if in_comment or line.lstrip().startswith("<!--"):
            in_comment = "-->" not in line  # fences inside a comment are no fences
            index += 1
            continue
        opening = re.match(r"^(`{3,}|~{3,})\s*([\w+-]*)", line)
        if not opening:
            index += 1
            continue
        fence, language = opening.group(1), opening.group(2).lower()
        body = []
        end = index + 1
        while end < len(lines) and not lines[end].startswith(fence):
            body.append(lines[end])
            end += 1
        previous = next((lines[i] for i in range(index - 1, -1, -1) if lines[i].strip()), "")
        mark = _MARK.match(previous.strip())
        found.append(Block(index + 1, language, "\n".join(body) + "\n",
                           mark.group("reason") if mark else None))
        index = end + 1
    return found


class BlockParserTest(unittest.TestCase):
    def test_marks_languages_and_comments_are_read_as_the_rule_says(self) -> None:
        text = ("<!--\n```python\nnot a block\n```\n-->\n"
                "```python\nprint(1)\n```\n\n"
                "<!-- not run: a signature -->\n```python\nf(x, *, y)\n```\n"
                "```text\nanything\n```\n")
        found = blocks(text)
        self.assertEqual([(b.line, b.language, b.skip) for b in found],
                         [(6, "python", None), (11, "python", "a signature"),
                          (14, "text", None)])
        self.assertEqual(found[0].code, "print(1)\n")


def outside_code(text: str) -> list[tuple[int, str]]:
    """Runs of a Markdown text's lines outside fenced blocks: (first line number, the
    lines joined), so that a link whose text wraps is one match."""
    runs: list[tuple[int, str]] = []
    fence, start, lines = "", 0, []
    for number, line in enumerate([*text.splitlines(), "```"], 1):
        opening = re.match(r"^(`{3,}|~{3,})", line)
        if fence:
            if line.startswith(fence):
                fence = ""
        elif opening:
            if lines:
                runs.append((start, "\n".join(lines)))
            fence, lines = opening.group(1), []
        else:
            if not lines:
                start = number
            lines.append(line)
    return runs


def github_anchor(title: str) -> str:
    """The anchor GitHub gives a heading (MkDocs' toc agrees for these pages)."""
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def broken_links(page: Path, root: Path = REPO) -> list[str]:
    """Each relative link of `page` whose file (or Markdown heading) `root` lacks."""
    broken = []
    for start, prose in outside_code(page.read_text(encoding="utf-8")):
        for match in _LINK.finditer(prose):
            number = start + prose.count("\n", 0, match.start())
            target = match.group("target")
            if re.match(r"^[a-z]+:", target):  # https:, mailto: ...
                continue
            path, _, anchor = target.partition("#")
            where = (page.parent / path).resolve() if path else page
            if root.resolve() not in (where, *where.parents) or not where.exists():
                broken.append(f"{page_name_in(page, root)}:{number}: {target} (no such file)")
            elif anchor and where.suffix == ".md":
                titles = [m.group("title") for _, prose in outside_code(
                    where.read_text(encoding="utf-8")) for m in _HEADING.finditer(prose)]
                if anchor not in {github_anchor(t) for t in titles}:
                    broken.append(f"{page_name_in(page, root)}:{number}: {target} "
                                  f"(no such heading)")
    return broken


def page_name_in(page: Path, root: Path) -> str:
    return page.resolve().relative_to(root.resolve()).as_posix()


def make_py_tasks() -> set[str]:
    """The task names make.py registers (it is imported, not run)."""
    spec = importlib.util.spec_from_file_location("nobroker_make", REPO / "make.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return set(module.TASKS)


def unreachable_through_make(directory: Path, tasks: set[str]) -> list[str]:
    """The tasks for which `make -n TASK` in `directory` does not run `make.py TASK`."""
    missing = []
    for name in sorted(tasks):
        done = subprocess.run(["make", "-n", "-C", str(directory), name], capture_output=True,
                              text=True, timeout=60, env=child_env())
        if done.returncode != 0 or not re.search(rf"make\.py {re.escape(name)}\b",
                                                  done.stdout):
            missing.append(f"{name}: {(done.stdout + done.stderr).strip()}")
    return missing


class ManualTest(unittest.TestCase):
    """The README and docs/*.md: blocks run, links resolve, commands exist."""

    def setUp(self) -> None:
        self.pages = {page: blocks(page.read_text(encoding="utf-8")) for page in PAGES}
        self.bin = tempfile.mkdtemp(prefix="nobroker-readme-bin-")
        shim = Path(self.bin, "nobroker")
        shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m nobroker "$@"\n')
        shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
        self.env = child_env()
        self.env["PATH"] = os.pathsep.join([self.bin, self.env.get("PATH", "")])
        self.env.pop("NOBROKER_DIR", None)

    def tearDown(self) -> None:
        for entry in Path(self.bin).iterdir():
            entry.unlink()
        os.rmdir(self.bin)

    def run_block(self, page: Path, block: Block) -> subprocess.CompletedProcess[str]:
        where = tempfile.mkdtemp(prefix="nobroker-readme-")
        self.addCleanup(subprocess.run, ["rm", "-rf", where], check=False)
        command = ([sys.executable, "-c", block.code] if RUNNABLE[block.language] == "python"
                   else ["bash", "-e", "-c", block.code])
        try:
            return subprocess.run(command, cwd=where, env=self.env, capture_output=True,
                                  text=True, timeout=BLOCK_SECONDS)
        except subprocess.TimeoutExpired:
            self.fail(f"{page_name(page)} line {block.line}: the {block.language} block did "
                      f"not finish within {BLOCK_SECONDS} s (mark it `not run:` if it cannot)")

    def test_every_code_block_runs_as_pasted_or_says_why_not(self) -> None:
        ran = dict.fromkeys(self.pages, 0)
        for page, found in self.pages.items():
            for block in found:
                if block.language not in RUNNABLE or RUNNABLE[block.language] is None:
                    continue
                with self.subTest(page=page_name(page), line=block.line):
                    if block.skip is not None:
                        self.assertTrue(block.skip, f"{page_name(page)} line {block.line}: "
                                                    f"`not run:` needs a reason")
                        continue
                    done = self.run_block(page, block)
                    self.assertEqual(done.returncode, 0,
                                     f"{page_name(page)} line {block.line} ({block.language}) "
                                     f"failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
                    ran[page] += 1
        self.assertGreaterEqual(ran[README], 3, "the README's runnable blocks went missing")
        self.assertGreaterEqual(ran[REPO / "docs" / "TASKS.md"], 1,
                                "docs/TASKS.md's runnable block went missing")

    def test_the_thirty_seconds_block_does_what_it_says(self) -> None:
        first = next(b for b in self.pages[README] if b.language == "python" and b.skip is None)
        done = self.run_block(README, first)
        self.assertEqual(done.returncode, 0, done.stderr)
        printed = [line for line in done.stdout.splitlines() if line.strip()]
        self.assertEqual(len(printed), 3, done.stdout)  # three jobs handled, then it returned
        self.assertIn("{'report': 'q3'}", done.stdout)

    def test_the_first_commands_are_demo_and_test(self) -> None:
        first = next(b for b in self.pages[README] if RUNNABLE.get(b.language) == "bash")
        commands = [line.split("#")[0].strip() for line in first.code.splitlines()]
        self.assertEqual(commands, ["python3 make.py demo", "python3 make.py test"])

    def test_the_readme_stays_a_front_door(self) -> None:
        lines = len(README.read_text(encoding="utf-8").splitlines())
        self.assertLessEqual(lines, 400, "README.md is the front door: move detail to docs/")

    def test_shell_blocks_say_python3(self) -> None:
        for page, found in self.pages.items():
            for block in found:
                if RUNNABLE.get(block.language) != "bash":
                    continue
                for number, line in enumerate(block.code.splitlines(), block.line + 1):
                    self.assertNotRegex(line, r"^\s*python\s",
                                        f"{page_name(page)} line {number}: python3")

    def test_signatures_are_not_fenced_as_python(self) -> None:
        for page, found in self.pages.items():
            for block in found:
                if block.language == "python" and block.skip is None:
                    # a SyntaxError here: a signature fenced as python, not as text
                    compile(block.code, f"{page_name(page)}:{block.line}", "exec")

    def test_links_name_files_and_headings_of_this_repository(self) -> None:
        broken = [link for page in PAGES for link in broken_links(page)]
        self.assertEqual(broken, [])

    def test_every_make_py_task_the_manual_names_exists(self) -> None:
        tasks = make_py_tasks()
        for page in PAGES:
            for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
                for match in _MAKE_PY_TASK.finditer(line):
                    self.assertIn(match.group("task"), tasks,
                                  f"{page_name(page)} line {number}: no make.py task "
                                  f"{match.group('task')!r}")

    def test_the_source_tour_names_every_package_module_and_tier(self) -> None:
        tour = (REPO / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
        package = REPO / "src" / "nobroker"
        names = [f"{entry.name}/" if entry.is_dir() else entry.name
                 for entry in package.iterdir() if entry.name not in
                 ("__init__.py", "__main__.py", "py.typed", "__pycache__")]
        for backend in ("file", "postgres"):  # their tiers (folders) too
            names += [f"{entry.name}/" for entry in (package / backend).iterdir()
                      if entry.is_dir() and entry.name != "__pycache__"]
        # named alone (`worker/`) or at the end of a path (`src/nobroker/postgres/`)
        unnamed = [name for name in sorted(names)
                   if f"`{name}`" not in tour and f"/{name}`" not in tour]
        self.assertEqual(unnamed, [], "docs/ARCHITECTURE.md's source tour does not name these")


class CheckerTest(unittest.TestCase):
    """The link and Makefile checks, shown failing on planted mistakes."""

    def test_a_missing_file_and_a_missing_heading_are_reported(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            (root / "docs").mkdir()
            (root / "docs" / "A.md").write_text("# A\n\n## What it guarantees\n")
            page = root / "README.md"
            page.write_text("[ok](docs/A.md#what-it-guarantees) [gone](docs/B.md)\n"
                            "[bad anchor](docs/A.md#nothing) [out](../elsewhere.md)\n"
                            "```\n[in code](nowhere.md)\n```\n[web](https://example.org)\n")
            self.assertEqual(broken_links(page, root),
                             ["README.md:1: docs/B.md (no such file)",
                              "README.md:2: docs/A.md#nothing (no such heading)",
                              "README.md:2: ../elsewhere.md (no such file)"])

    def test_a_makefile_without_the_forwarding_rule_is_caught(self) -> None:
        if shutil.which("make") is None:
            self.skipTest("SKIPPED LOUDLY: `make` is not on PATH, so the Makefile's "
                          "forwarding is not checked here")
        with tempfile.TemporaryDirectory() as tmp:
            Path(tmp, "Makefile").write_text("test: ; python3 make.py test $(ARGS)\n")
            self.assertEqual(len(unreachable_through_make(Path(tmp), {"test", "docs"})), 1)


class MakefileTest(unittest.TestCase):
    def test_every_make_py_task_is_a_make_target(self) -> None:
        if shutil.which("make") is None:
            self.skipTest("SKIPPED LOUDLY: `make` is not on PATH, so `make TARGET` "
                          "(which the README promises) is not checked here")
        tasks = make_py_tasks()
        self.assertIn("docs", tasks)  # a folder of that name exists: the rule must still run
        self.assertEqual(unreachable_through_make(REPO, tasks), [])


if __name__ == "__main__":
    unittest.main()
