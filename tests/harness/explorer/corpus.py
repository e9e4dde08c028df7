"""The regression corpus (tests/crash_corpus/*.json): save, load and check fixtures.

Part of the crash-state explorer; the theory is in harness/explorer/__init__.py.
"""

from __future__ import annotations

import json
import os
import zlib
from collections.abc import Iterable
from typing import Any

from .disk_model import _State
from .opener import _Opener
from .report import Violation
from .run import _quiet, explore
from .strategies import Bounds


def save_fixture(path: str, violation: Violation, *, bug: str, expect: dict[str, Any]) -> None:
    """Keep a failing state (and how it was found) as a JSON regression fixture."""
    import base64
    fixture = {
        "bug": bug, "check": violation.check, "workload": violation.workload,
        "profile": violation.profile, "crash_point": violation.crash_point,
        "strategy": violation.strategy, "message": violation.message,
        "files": {name: base64.b64encode(zlib.compress(data, 9)).decode()
                  for name, data in violation.files.items()},
        "encoding": "zlib+base64",
        "expect": expect,
    }
    with open(path, "w", encoding="utf-8") as f:
        json.dump(fixture, f, indent=1, sort_keys=True)
        f.write("\n")


def load_fixture(path: str) -> dict[str, Any]:
    import base64
    with open(path, encoding="utf-8") as f:
        fixture: dict[str, Any] = json.load(f)
    if fixture.get("kind") == "workload":  # a trace regression: re-explore the workload
        return fixture
    fixture["files"] = {name: zlib.decompress(base64.b64decode(text)) for name, text in
                        fixture["files"].items()}
    return fixture


def check_fixture(fixture: dict[str, Any], directory: str) -> list[str]:
    """The problems a fixture shows now (empty when its fix holds).

    A state fixture's files are opened and checked (I6, I7, I9, the expected
    batch and job count); a workload fixture ("kind": "workload") is explored
    again under its profiles.
    """
    if fixture.get("kind") == "workload":
        report = explore(fixture["workload"], fixture["profile"], Bounds(rot=False))
        return [str(v) for v in report.violations[:5]] if not report.ok else []
    os.makedirs(directory, exist_ok=True)
    opener = _Opener(os.path.dirname(directory) or ".", {})
    opener.dir = directory
    state = _State.make({n: i for i, n in enumerate(fixture["files"])},
                        {i: d for i, d in enumerate(fixture["files"].values())})
    with _quiet():
        outcome = opener.open(state, 1_700_000_100.0, True)
    problems = [f"{check}: {message}" for check, message in outcome.problems]
    expect = fixture["expect"]
    if outcome.error is not None:
        problems.append(f"opening raised {outcome.error}")
        return problems
    if "last_batch" in expect and outcome.last_batch not in expect["last_batch"]:
        problems.append(f"recovered batch {outcome.last_batch}, expected one of "
                        f"{expect['last_batch']}")
    for job_id in expect.get("present", []):
        if not any(j.startswith(job_id) for j in outcome.jobs):
            problems.append(f"job {job_id} is missing")
    if "jobs" in expect and len(outcome.jobs) != expect["jobs"]:
        problems.append(f"{len(outcome.jobs)} jobs, expected {expect['jobs']}")
    return problems


def iter_fixtures(directory: str) -> Iterable[str]:
    if os.path.isdir(directory):
        for name in sorted(os.listdir(directory)):
            if name.endswith(".json"):
                yield os.path.join(directory, name)
