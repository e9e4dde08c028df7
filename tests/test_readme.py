"""README.md runs as written.

Every block fenced as python runs as pasted, as its own script in a fresh
temporary directory, and must finish within BLOCK_SECONDS; every block fenced
as bash runs the same way under `bash -e`, with a `nobroker` command on PATH
that is this checkout's `python3 -m nobroker`. A block that cannot run so is
marked by an HTML comment on the line before its fence that starts with
"not run:" and gives a reason (the rule is written at the top of README.md's
source). So the README cannot drift from the code: a changed signature, a
block that waits for a minute, a command that no longer exists fails here.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
import tempfile
import unittest
from dataclasses import dataclass
from pathlib import Path

from support import REPO, child_env

README = REPO / "README.md"
BLOCK_SECONDS = 30  # a hang guard, not a speed test: the blocks take about a second
RUNNABLE = {"python": "python", "py": "python", "bash": "bash", "sh": "bash",
            "shell": "bash", "console": None}
_MARK = re.compile(r"^<!--\s*not run:\s*(?P<reason>.*?)\s*-->\s*$")


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


class ReadmeTest(unittest.TestCase):
    def setUp(self) -> None:
        self.blocks = blocks(README.read_text(encoding="utf-8"))
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

    def run_block(self, block: Block) -> subprocess.CompletedProcess[str]:
        where = tempfile.mkdtemp(prefix="nobroker-readme-")
        self.addCleanup(subprocess.run, ["rm", "-rf", where], check=False)
        command = ([sys.executable, "-c", block.code] if RUNNABLE[block.language] == "python"
                   else ["bash", "-e", "-c", block.code])
        try:
            return subprocess.run(command, cwd=where, env=self.env, capture_output=True,
                                  text=True, timeout=BLOCK_SECONDS)
        except subprocess.TimeoutExpired:
            self.fail(f"README.md line {block.line}: the {block.language} block did not "
                      f"finish within {BLOCK_SECONDS} s (mark it `not run:` if it cannot)")

    def test_every_code_block_runs_as_pasted_or_says_why_not(self) -> None:
        ran = 0
        for block in self.blocks:
            if block.language not in RUNNABLE or RUNNABLE[block.language] is None:
                continue
            with self.subTest(line=block.line):
                if block.skip is not None:
                    self.assertTrue(block.skip, f"line {block.line}: `not run:` needs a reason")
                    continue
                done = self.run_block(block)
                self.assertEqual(done.returncode, 0,
                                 f"README.md line {block.line} ({block.language}) failed:\n"
                                 f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
                ran += 1
        self.assertGreaterEqual(ran, 3, "the README's runnable blocks went missing")

    def test_the_thirty_seconds_block_does_what_it_says(self) -> None:
        first = next(b for b in self.blocks if b.language == "python" and b.skip is None)
        done = self.run_block(first)
        self.assertEqual(done.returncode, 0, done.stderr)
        printed = [line for line in done.stdout.splitlines() if line.strip()]
        self.assertEqual(len(printed), 3, done.stdout)  # three jobs handled, then it returned
        self.assertIn("{'report': 'q3'}", done.stdout)

    def test_shell_blocks_say_python3(self) -> None:
        for block in self.blocks:
            if RUNNABLE.get(block.language) != "bash":
                continue
            for number, line in enumerate(block.code.splitlines(), block.line + 1):
                self.assertNotRegex(line, r"^\s*python\s", f"README.md line {number}: python3")

    def test_signatures_are_not_fenced_as_python(self) -> None:
        for block in self.blocks:
            if block.language == "python" and block.skip is None:
                compile(block.code, f"README.md:{block.line}", "exec")  # SyntaxError: a signature


if __name__ == "__main__":
    unittest.main()
