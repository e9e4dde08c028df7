"""What running a peer's own test suite against nobroker takes, whichever the peer:
fetching its pinned sdist, and judging the run against the failures already explained.
Standard library only. Used by celery_suite.py and dramatiq_suite.py.
"""

from __future__ import annotations

import subprocess
import tarfile
import time
from collections.abc import Callable
from pathlib import Path

OUTCOMES = ("passed", "failed", "error", "skipped")


def pinned(requirements: Path, package: str) -> str:
    """The version `requirements` pins `package` to (PACKAGE==VERSION)."""
    for line in requirements.read_text().splitlines():
        name, _, version = line.split("#")[0].strip().partition("==")
        if name == package and version:
            return version
    raise SystemExit(f"no {package}==VERSION pin in {requirements.name}")


def unpack_sdist(python: str, package: str, version: str, work: Path, folder: str) -> Path:
    """Download PACKAGE-VERSION's sdist into `work` (once) and unpack only its `folder`
    (the installed package is the one under test); returns work/PACKAGE-VERSION."""
    root = work / f"{package}-{version}"
    if (root / folder).is_dir():
        return root
    work.mkdir(parents=True, exist_ok=True)
    sdist = work / f"{package}-{version}.tar.gz"
    if not sdist.exists():
        cmd = [python, "-m", "pip", "download", "--disable-pip-version-check", "--quiet",
               "--no-binary", ":all:", "--no-deps", f"{package}=={version}", "-d", str(work)]
        print("$", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
    prefix = f"{package}-{version}/{folder}/"
    with tarfile.open(sdist) as archive:
        members = [m for m in archive.getmembers() if m.name.startswith(prefix)]
        archive.extractall(work, members=members, filter="data")
    return root


def run_capped(cmd: list[str], cwd: Path, env: dict[str, str],
               cap: float) -> tuple[float, bool]:
    """Run the suite's command for at most `cap` seconds: (seconds taken, whether it was
    stopped at the cap)."""
    started = time.monotonic()
    try:
        subprocess.run(cmd, cwd=cwd, env=env, timeout=cap, check=False)
        capped = False
    except subprocess.TimeoutExpired:
        capped = True
    return time.monotonic() - started, capped


def judge(title: str, results: dict[str, str], known: Callable[[str], str | None],
          took: float, capped: bool, cap: float) -> int:
    """Print the counts, each known failure with its reason, each listed test that now
    passes, and each unexplained failure; 0 only if every failure is explained, the run
    was not capped and something passed."""
    counts = {kind: list(results.values()).count(kind) for kind in OUTCOMES}
    print(f"\n{title} on nobroker: {counts['passed']} passed, {counts['failed']} failed, "
          f"{counts['error']} errors, {counts['skipped']} skipped in {took:.0f}s")
    unexplained = []
    for name, kind in sorted(results.items()):
        reason = known(name)
        if kind in ("failed", "error"):
            if reason is None:
                unexplained.append(name)
            else:
                print(f"  known: {name}: {reason}")
        elif kind == "passed" and reason is not None:
            print(f"  now passes (remove it from the known failures): {name}")
    for name in unexplained:
        print(f"  UNEXPLAINED {results[name]}: {name}")
    if capped:
        print(f"the run was stopped at its cap of {cap:g}s")
    ok = not unexplained and not capped and counts["passed"] > 0
    print(f"{title}: " + ("ok" if ok else "FAILED"))
    return 0 if ok else 1
