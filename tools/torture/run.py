"""nobroker's long torture run: `python make.py torture [--minutes M] [--seed S] [--only ...]`.

Four phases share the time budget (default 10 minutes), each the unbounded
version of a bounded test in the normal suite:

    explorer  tests/harness/explorer/: every named workload, ACE-style workloads of
              three calls, then random 50-call workloads, under every disk
              profile with the torture bounds (byte-exhaustive cuts, 64
              random subsets per crash point, compound crashes);
    faults    tests/harness/faults/: the SQLite-style I/O-error loop (every
              mutating call x EIO/ENOSPC/EDQUOT x once/persist/short/drop)
              over random workloads;
    fuzz      tests/harness/fuzz/: tens of thousands of damaged queues;
    soak      tests/harness/soak/: producers, workers and a compactor under kill -9,
              audited like Jepsen's queue checker.

It prints each phase's figures as it goes and ends with a summary table in
Markdown that the README can quote. Exit status 0 only if nothing broke.
Use --only to run some phases (the budget is split among them).
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import platform
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field

PHASES = ("explorer", "faults", "fuzz", "soak")
SHARES = {"explorer": 0.3, "faults": 0.15, "fuzz": 0.2, "soak": 0.35}


@dataclass
class Phase:
    name: str
    seconds: float = 0.0
    rows: list[tuple[str, str]] = field(default_factory=list)  # (figure, value)
    failures: list[str] = field(default_factory=list)
    skipped: str | None = None


def say(text: str) -> None:
    print(text, flush=True)


# --------------------------------------------------------------------------
# phases


def run_explorer(budget: float, seed: int) -> Phase:
    phase = Phase("explorer")
    try:
        from harness import explorer
    except ImportError as exc:  # pragma: no cover - the explorer is another engineer's
        phase.skipped = f"tests/harness/explorer not importable: {exc}"
        return phase
    deadline = time.monotonic() + budget
    bounds = explorer.Bounds.torture(seed)
    total = explorer.Report()
    queue: list[tuple[str, object]] = [(name, name) for name in explorer.WORKLOADS]
    try:
        ace = explorer.ace_workloads(3)
        rng = random.Random(seed)
        names = sorted(ace)
        rng.shuffle(names)
        queue += [(f"ace:{name}", ace[name]) for name in names]
    except Exception as exc:
        phase.failures.append(f"ace_workloads(3) failed: {exc!r}")
    random_seed = seed * 1000
    done = 0
    while time.monotonic() < deadline:
        if queue:
            label, workload = queue.pop(0)
        else:
            random_seed += 1
            label, workload = f"random:{random_seed}", explorer.random_workload(random_seed, 50)
        try:
            report = explorer.explore(workload, explorer.PROFILES, bounds, name=label)
        except Exception as exc:
            phase.failures.append(f"{label}: explore raised {type(exc).__name__}: {exc}")
            continue
        total.merge(report)
        done += 1
        if not report.ok:
            phase.failures += [f"{label}: {v}" for v in report.violations[:5]]
        if done % 25 == 0:
            say(f"  explorer: {done} workloads, "
                f"{sum(s.states for s in total.stats.values())} states checked")
    states = sum(s.states for s in total.stats.values())
    unique = sum(s.unique for s in total.stats.values())
    points = sum(s.crash_points for s in total.stats.values())
    phase.rows = [
        ("workloads explored", f"{done}"),
        ("crash points", f"{points}"),
        ("crash states checked", f"{states}"),
        ("unique crash states opened", f"{unique}"),
        ("compound / continued / rot states",
         f"{total.compound_states} / {total.continued_states} / {total.rot_states}"),
        ("violations", f"{total.total_violations}"),
    ]
    for name, stats in total.stats.items():
        phase.rows.append((f"  {name} states", f"{stats.states}"))
    say(f"  explorer: {done} workloads, {states} crash states checked, {unique} unique, "
        f"{total.total_violations} violations")
    return phase


def run_faults(budget: float, seed: int, scratch: str) -> Phase:
    phase = Phase("faults")
    from harness import support
    from harness.faults import run_fault_matrix

    deadline = time.monotonic() + budget
    errnos = (errno.EIO, errno.ENOSPC, errno.EDQUOT)
    runs = injected = workloads = 0
    workload_seed = 0
    while time.monotonic() < deadline:
        directory = tempfile.mkdtemp(prefix="faults-", dir=support.scratch_root() or scratch)
        try:
            n, inj, bad = run_fault_matrix(directory, workload_seed, errnos=errnos)
        finally:
            shutil.rmtree(directory, ignore_errors=True)
        runs += n
        injected += inj
        workloads += 1
        for outcome in bad[:5]:
            phase.failures.append(f"{outcome.label}: {outcome.violations[:3]}")
        # seeds 0 and 1 are the fixed scripts; then random workloads from this run's seed
        workload_seed = workload_seed + 1 if workload_seed < 1 else 2 + seed * 100_000 + workloads
    phase.rows = [
        ("workloads", f"{workloads}"),
        ("fault runs (call x errno x mode)", f"{runs}"),
        ("faults injected", f"{injected}"),
        ("runs that broke a promise", f"{len(phase.failures)}"),
    ]
    say(f"  faults: {workloads} workloads, {runs} runs, {injected} faults injected, "
        f"{len(phase.failures)} violations")
    return phase


def run_fuzz(budget: float, seed: int) -> Phase:
    phase = Phase("fuzz")
    from harness.fuzz import fuzz

    deadline = time.monotonic() + budget
    report = fuzz(10**9, seed=10_000 + seed, deadline=deadline)
    phase.failures = list(report.failures)
    outcomes = report.outcomes
    phase.rows = [
        ("fuzz cases", f"{report.cases}"),
        ("refused (CorruptLogError, nothing touched)", f"{outcomes['corrupt']}"),
        ("opened clean / repaired a torn tail",
         f"{outcomes['clean']} / {outcomes['repaired']}"),
        ("opened, then a typed error while used",
         f"{sum(v for k, v in outcomes.items() if k.startswith('used-then'))}"),
        ("crashes / hangs", f"{outcomes['crash']} / {outcomes['hang']}"),
        ("peak traced memory (sampled)", f"{report.peak_memory / 1e6:.1f} MB"),
    ]
    say("  " + report.summary())
    return phase


def run_soaks(budget: float, seed: int, scratch: str) -> Phase:
    phase = Phase("soak")
    from harness import soak

    deadline = time.monotonic() + budget
    rng = random.Random(seed)
    totals: dict[str, int] = {}
    kills: dict[str, int] = {}
    soaks = 0
    while True:
        left = deadline - time.monotonic()
        if left < 20:
            break
        length = min(left - 15, rng.choice((60.0, 90.0, 120.0)))
        cfg = soak.SoakConfig(seconds=length, producers=rng.choice((2, 3, 4)),
                              workers=rng.choice((2, 3, 4)), kill_every=(0.2, 1.0),
                              seed=rng.randrange(1 << 30),
                              visibility_timeout=rng.choice((1.0, 2.0)))
        say(f"  soak {soaks + 1}: {cfg.seconds:.0f}s, {cfg.producers} producers, "
            f"{cfg.workers} workers, seed {cfg.seed}")
        root = tempfile.mkdtemp(prefix="soak-", dir=scratch)
        report = soak.run_soak(cfg, root)
        soaks += 1
        say("    " + report.summary())
        if report.problems:
            phase.failures += [f"soak seed {cfg.seed}: {p}" for p in report.problems[:10]]
            kept = tempfile.mkdtemp(prefix="nobroker-soak-failed-")
            shutil.move(root, kept)
            say(f"    queue and event logs kept for inspection in {kept}")
        else:
            shutil.rmtree(root, ignore_errors=True)
        for attr in ("enqueued", "tried", "recovered", "deliveries", "acked", "dead",
                     "duplicates", "compactions", "stale", "lost", "double_acked",
                     "resurrected", "unexpected", "overlaps", "unexplained"):
            totals[attr] = totals.get(attr, 0) + getattr(report, attr)
        for role, n in report.kills.items():
            kills[role] = kills.get(role, 0) + n
    if not soaks:
        phase.skipped = "less than 20 s of budget"
        return phase
    phase.rows = [
        ("soaks run", f"{soaks}"),
        ("jobs enqueued (returned) / recovered", f"{totals['enqueued']} / {totals['recovered']}"),
        ("deliveries / acked / dead", f"{totals['deliveries']} / {totals['acked']} / "
                                      f"{totals['dead']}"),
        ("kill -9", f"{sum(kills.values())} (" + ", ".join(
            f"{r} {n}" for r, n in sorted(kills.items())) + ")"),
        ("compactions", f"{totals['compactions']}"),
        ("duplicate deliveries (all explained)", f"{totals['duplicates']}"),
        ("lost", f"{totals['lost']}"),
        ("double-acked", f"{totals['double_acked']}"),
        ("resurrected / unexpected", f"{totals['resurrected']} / {totals['unexpected']}"),
        ("lease overlaps / unexplained duplicates",
         f"{totals['overlaps']} / {totals['unexplained']}"),
    ]
    return phase


# --------------------------------------------------------------------------
# the run


def filesystem_of(path: str) -> str:
    try:
        from nobroker.file.disk.fs import filesystem_type
        return filesystem_type(path) or "unknown"
    except Exception:
        return "unknown"


def table(phases: list[Phase], minutes: float, seed: int, scratch: str) -> str:
    lines = [f"nobroker torture run: {minutes:g} min budget, seed {seed}, "
             f"Python {platform.python_version()}, {platform.system()} {platform.release()}, "
             f"{os.cpu_count()} CPUs, scratch on {filesystem_of(scratch)}",
             "",
             "| phase | figure | value |",
             "|---|---|---|"]
    for phase in phases:
        if phase.skipped:
            lines.append(f"| {phase.name} | skipped | {phase.skipped} |")
            continue
        for figure, value in phase.rows:
            lines.append(f"| {phase.name} | {figure.strip()} | {value} |")
        lines.append(f"| {phase.name} | time | {phase.seconds:.0f} s |")
    broken = sum(len(p.failures) for p in phases)
    lines.append("")
    lines.append("RESULT: " + ("OK, nothing broke" if not broken
                               else f"FAILED, {broken} findings"))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="torture.py", description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0,
                        help="total time budget (default 10)")
    parser.add_argument("--seed", type=int, default=None,
                        help="seed for every phase (default: random, printed)")
    parser.add_argument("--only", default=",".join(PHASES),
                        help=f"comma-separated phases to run (default {','.join(PHASES)})")
    args = parser.parse_args(argv)
    chosen = [p.strip() for p in args.only.split(",") if p.strip()]
    for name in chosen:
        if name not in PHASES:
            parser.error(f"unknown phase {name!r}; choose from {', '.join(PHASES)}")
    seed = args.seed if args.seed is not None else random.randrange(1 << 20)
    budget = args.minutes * 60
    logging.getLogger("nobroker").disabled = True  # repairs are the point; keep stdout legible
    scratch_dir = os.environ.get("NOBROKER_TORTURE_DIR") or None
    scratch = tempfile.mkdtemp(prefix="nobroker-torture-", dir=scratch_dir)
    say(f"torture: {args.minutes:g} minutes, seed {seed}, phases {', '.join(chosen)}, "
        f"scratch {scratch}")
    runners: dict[str, Callable[[float], Phase]] = {
        "explorer": lambda b: run_explorer(b, seed),
        "faults": lambda b: run_faults(b, seed, scratch),
        "fuzz": lambda b: run_fuzz(b, seed),
        "soak": lambda b: run_soaks(b, seed, scratch),
    }
    phases: list[Phase] = []
    started = time.monotonic()
    try:
        for index, name in enumerate(chosen):
            remaining = budget - (time.monotonic() - started)
            later = sum(SHARES[p] for p in chosen[index + 1:])
            slice_ = max(5.0, remaining * SHARES[name] / (SHARES[name] + later))
            say(f"\n== {name}: {slice_:.0f} s")
            t0 = time.monotonic()
            phase = runners[name](slice_)
            phase.seconds = time.monotonic() - t0
            for failure in phase.failures[:20]:
                say(f"  FINDING: {failure}")
            phases.append(phase)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    say("")
    say(table(phases, args.minutes, seed, scratch))
    return 1 if any(p.failures for p in phases) else 0


if __name__ == "__main__":
    sys.exit(main())
