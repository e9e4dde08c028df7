"""The entry points: explore() one workload, long_run() for make.py torture.

Part of the crash-state explorer; the theory is in harness/explorer/__init__.py.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence

from .checks import _Explorer
from .driver import Workload, record
from .generated import ace_workloads, random_workload
from .recording import PROFILES
from .report import Report, Violation
from .strategies import Bounds
from .workloads import WORKLOADS


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """No log lines for the thousands of repairs, and no network-FS probe per open.

    The probe (nobroker.file.opening.filesystem_type) reads /proc/self/mountinfo on every
    open and has nothing to do with crash states; the scratch is tmpfs anyway.
    """
    from unittest import mock
    logger = logging.getLogger("nobroker")
    disabled = logger.disabled
    logger.disabled = True
    try:
        with mock.patch("nobroker.file.opening.filesystem_type", lambda path: "tmpfs"):
            yield
    finally:
        logger.disabled = disabled


def scratch_root() -> str | None:
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None


def explore(workload: str | Workload, profile: str | Sequence[str] = "weak",
            bounds: Bounds | None = None, *, name: str | None = None) -> Report:
    """Record `workload` once, then build and check its crash states under each profile."""
    bounds = bounds or Bounds()
    profiles = (profile,) if isinstance(profile, str) else tuple(profile)
    for p in profiles:
        if p not in PROFILES:
            raise ValueError(f"unknown profile {p!r}; choose from {PROFILES}")
    if isinstance(workload, str):
        name = name or workload
        workload = WORKLOADS[workload]
    label = name or str(getattr(workload, "__name__", "workload"))
    report = Report(workloads=[label])
    started = time.perf_counter()
    root = tempfile.mkdtemp(prefix="nobroker-explorer-", dir=scratch_root())
    try:
        with _quiet():
            trace = record(workload, os.path.join(root, "live"), seed=bounds.seed, name=label)
            report.calls, report.events = len(trace.calls), len(trace.events)
            for problem in trace.problems:
                report.total_violations += 1
                report.violations.append(Violation("shadow", label, "-", -1, "recording",
                                                   problem))
            explorer = _Explorer(trace, root, bounds, report)
            explorer._compound_budget = bounds.compound
            for p in profiles:
                explorer.run_profile(p)
            if bounds.rot:
                explorer.run_rot()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    report.seconds = time.perf_counter() - started
    return report



def long_run(*, seed: int = 0, ace_length: int = 3, random_workloads: int = 8,
             random_length: int = 300, profiles: Sequence[str] = PROFILES,
             deadline: float | None = None,
             progress: Callable[[str], None] | None = print) -> Report:
    """The long run (research gate G2), for tools/torture/run.py.

    Every scenario of the library under Bounds.torture (byte-exhaustive
    process crashes, 64 random subsets per crash point, more compound and
    continued states), then every ACE sequence up to `ace_length` ops on two
    handles (Bounds.quick, profiles ext4ish and weak), then `random_workloads`
    random workloads of `random_length` calls. Stops early (and says so in
    the report's workload list) once time.monotonic() passes `deadline`.
    Returns the merged Report; `progress` gets one line per workload.
    """
    total = Report()
    plan: list[tuple[str, Workload, Sequence[str], Bounds]] = []
    for name, fn in WORKLOADS.items():
        plan.append((name, fn, profiles, Bounds.torture(seed)))
    for name, fn in ace_workloads(ace_length).items():
        plan.append((name, fn, ("ext4ish", "weak"), Bounds.quick(seed)))
    for k in range(random_workloads):
        fn = random_workload(seed * 1000 + k, random_length)
        plan.append((fn.__name__, fn, profiles, Bounds(random_subsets=16, seed=seed + k)))
    for name, fn, chosen, bounds in plan:
        if deadline is not None and time.monotonic() > deadline:
            total.workloads.append(f"(stopped at the deadline, {len(plan)} planned)")
            break
        report = explore(fn, chosen, bounds, name=name)
        total.merge(report)
        if progress is not None:
            progress(f"{name}: {sum(s.states for s in report.stats.values())} states, "
                     f"{sum(s.unique for s in report.stats.values())} unique, "
                     f"{report.total_violations} violations ({report.seconds:.1f}s)")
    return total
