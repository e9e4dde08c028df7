"""The public names: `nobroker.__all__` against the code and the documented API (Trio's
`_tests/test_exports.py`).

Every name in `__all__` exists and is documented (the API reference: the
README's, or a page of docs/); nothing public is left out of it: every
error of `errors.__all__`, every value the API hands out, every name a
documented `from nobroker import ...` line uses. Each check is shown failing
on a planted case first.
"""

from __future__ import annotations

import re
import types
import unittest
from collections.abc import Iterable

from harness.support import REPO

import nobroker
from nobroker import errors, models

# The values of models.py the API hands out (new_pending_jobs is a backend helper).
API_VALUES = frozenset(models.__all__) - {"new_pending_jobs"}


def documented_text() -> str:
    """The README's API reference section and every page under docs/."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    start = readme.find("## API reference")
    section = readme[start:] if start >= 0 else ""
    pages = sorted((REPO / "docs").rglob("*.md")) if (REPO / "docs").is_dir() else []
    return "\n".join([section, *(page.read_text(encoding="utf-8") for page in pages)])


def imported_in_docs() -> set[str]:
    """The names `from nobroker import ...` lines in the README and docs/ use."""
    texts = [(REPO / "README.md").read_text(encoding="utf-8")]
    if (REPO / "docs").is_dir():
        texts += [page.read_text(encoding="utf-8") for page in (REPO / "docs").rglob("*.md")]
    names: set[str] = set()
    for text in texts:
        for match in re.finditer(r"^\s*from nobroker import \(?([\w, ]+)", text, re.M):
            names.update(name.strip() for name in match.group(1).split(",") if name.strip())
    return names


def missing(names: Iterable[str], module: types.ModuleType) -> list[str]:
    return sorted(name for name in names if not hasattr(module, name))


def undocumented(names: Iterable[str], text: str) -> list[str]:
    return sorted(name for name in names
                  if not name.startswith("__") and not re.search(rf"\b{name}\b", text))


def left_out(exported: Iterable[str], module: types.ModuleType) -> list[str]:
    """Public names of `module` (not submodules) that are not exported."""
    public = {name for name in dir(module) if not name.startswith("_")
              and not isinstance(getattr(module, name), types.ModuleType)}
    return sorted(public - set(exported))


class ExportsTest(unittest.TestCase):
    def test_every_exported_name_exists(self) -> None:
        self.assertEqual(missing(nobroker.__all__, nobroker), [])
        self.assertEqual(len(set(nobroker.__all__)), len(nobroker.__all__), "a name twice")

    def test_every_exported_name_is_documented_in_the_api_reference(self) -> None:
        self.assertEqual(undocumented(nobroker.__all__, documented_text()), [])

    def test_nothing_public_is_left_out(self) -> None:
        self.assertEqual(left_out(nobroker.__all__, nobroker), [])
        self.assertEqual(sorted(set(errors.__all__) - set(nobroker.__all__)), [],
                         "every error of errors.__all__ is importable from nobroker")
        self.assertEqual(sorted(API_VALUES - set(nobroker.__all__)), [])
        self.assertEqual(sorted(imported_in_docs() - set(nobroker.__all__)), [],
                         "the docs import a name nobroker does not export")

    def test_each_check_fails_on_a_planted_case(self) -> None:
        fake = types.ModuleType("fake")
        fake.Queue = object  # type: ignore[attr-defined]
        fake.Hidden = object  # type: ignore[attr-defined]
        self.assertEqual(missing(["Queue", "Ghost"], fake), ["Ghost"])
        self.assertEqual(undocumented(["Queue", "Ghost", "__version__"], "Queue(path)"),
                         ["Ghost"])
        self.assertEqual(left_out(["Queue"], fake), ["Hidden"])


if __name__ == "__main__":
    unittest.main()
