"""Copying a queue between backends: `nobroker migrate --from SRC --to DST`.

What it copies: every job the source holds -- pending, leased (arriving
pending: its holder's lease does not move with it) and dead -- with its id,
payload, priority, attempts, max_attempts, last error and times, and its limit
keys and stored cap as the source exports them (JobExport.export_limits:
stored, never computed again, so a worker there that declares the task limits
the copies as it does new jobs); and the jobs waiting for prerequisites, after
those, with what they still wait for and their mode (Dependencies.wait_modes),
all in one enqueue_graph write, each under its id as a keyed enqueue: so a
chord half done on the source still waits on the target for the members left,
and runs after them. A waiting job whose prerequisite the target does not hold
(nor copies) is counted as not copied. What it does not copy: finished jobs and
the keys they leave behind and the acks count; but a cancelled dependent that a
requeue of its failed prerequisite would revive (Revival.export_dormant) is
copied as such into a target that imports and revives (PostgreSQL, memory://),
so that the requeue there revives it: counted as copied "cancelled". And,
first, every rate key's window with its latest starts
(window_copies.RateWindows: from and into any backend with
`capabilities.limits`), merged into the target's: right after the copy the
target refuses the starts the source would have refused. The times are the
queues' clocks' absolute seconds on every backend, copied as they are. A window
from PostgreSQL has no period (its rings keep only the starts; each leasing
process brings its declared one): it arrives with the time since its oldest
start, and a second, as its period, which only a process that does not declare
the key shows (Queue.limit_use); a worker that declares it leases by its own.

Idempotent: a job whose id the target already holds is skipped, so a second
run copies nothing twice; the counts say what happened. Run it with the
workers of both queues stopped, or jobs may move while it reads.

How, the backends' capabilities decide (backend.py). A source that exports
(`JobExport`: each job with whether its id is a caller's key) into a target
that imports (`JobImport`) copies everything above: a directory into
PostgreSQL, for one. Otherwise the copy goes through the ordinary enqueue (a
keyed enqueue per job, with the keys copied: Dependencies.enqueue's
`copied_limits`), which cannot set attempts or errors or create a dead job:
pending jobs are copied with a fresh attempt count, dead jobs are counted as
not copied.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import cast

from .backend import (
    Backend,
    CopiedLimits,
    Dependencies,
    DormantJob,
    GraphNode,
    JobExport,
    JobImport,
    Revival,
    Settings,
)
from .codec import encode_payload
from .dependencies import SUCCESS, checked_nodes
from .errors import JobNotFoundError
from .models import Job, JobState
from .opener import open_backend
from .window_copies import CopiedWindow, RateWindows

__all__ = ["TransferReport", "transfer"]

_BATCH = 1000


@dataclass(frozen=True)
class TransferReport:
    copied: dict[str, int]  # state -> jobs copied
    skipped: int  # already in the target
    not_copied: dict[str, int]  # state -> jobs the target cannot take
    windows: int = 0  # rate windows copied (merged into the target's); not described

    def describe(self) -> str:
        copied = ", ".join(f"{n} {state}" for state, n in self.copied.items()) or "nothing"
        line = f"copied {copied}; {self.skipped} already in the target"
        for state, n in self.not_copied.items():
            line += f"; {n} {state} not copied (the target cannot hold them that way)"
        return line


def transfer(source: str, target: str, name: str) -> TransferReport:
    """Copy queue `name` from the location `source` to `target` (see the module doc)."""
    reader = open_backend(source, name, Settings(readonly=True))
    try:
        keyed_jobs = (cast(JobExport, reader).export_jobs() if reader.capabilities.exports
                      else None)
        limits = cast(JobExport, reader).export_limits() if keyed_jobs is not None else None
        jobs = reader.list_jobs(None, None) if keyed_jobs is None else []
        waiting = [job for job in (jobs if keyed_jobs is None
                                   else (job for job, _ in keyed_jobs))
                   if job.state is JobState.WAITING]
        modes = cast(Dependencies, reader).wait_modes() if waiting else {}
        dormant = (cast(Revival, reader).export_dormant() if reader.capabilities.revival
                   else [])
        windows = (cast(RateWindows, reader).export_windows() if reader.capabilities.limits
                   else [])
    finally:
        reader.close()
    jobs = [job for job in jobs if job.state is not JobState.WAITING]
    if keyed_jobs is not None:
        keyed_jobs = [(job, keyed) for job, keyed in keyed_jobs
                      if job.state is not JobState.WAITING]
    writer = open_backend(target, name, Settings())
    try:
        copied_windows = _windows(writer, windows)
        if keyed_jobs is not None and writer.capabilities.imports:
            report = _imported(cast(JobImport, writer), keyed_jobs, limits or {})
        else:
            report = _enqueued(writer, jobs if keyed_jobs is None
                               else [job for job, _ in keyed_jobs], limits or {})
        if waiting:
            report = _waiting(writer, waiting, modes, report, limits)
        if dormant:
            report = _dormant(writer, dormant, report)
    finally:
        writer.close()
    return replace(report, windows=copied_windows)


def _windows(target: Backend, windows: list[CopiedWindow]) -> int:
    """The windows merged into the target's (first: its copied jobs find them), each
    with a period (see the module doc); how many, 0 if the target keeps none."""
    if not windows or not target.capabilities.limits:
        return 0
    assert target.settings.clock is not None  # a backend keeps Settings.filled()
    now = target.settings.clock()
    cast(RateWindows, target).import_windows([
        window if window.period is not None
        else replace(window, period=max(now - window.starts[0], 0.0) + 1.0)
        for window in windows])
    return len(windows)


def _imported(target: JobImport, keyed_jobs: list[tuple[Job, bool]],
              limits: dict[str, CopiedLimits]) -> TransferReport:
    """Every job as it was (its limit keys and cap too), through the target's
    import_jobs."""
    copied: dict[str, int] = {}
    for start in range(0, len(keyed_jobs), _BATCH):
        batch = keyed_jobs[start:start + _BATCH]
        for state in target.import_jobs([job for job, _ in batch],
                                        [keyed for _, keyed in batch], limits):
            copied[str(state)] = copied.get(str(state), 0) + 1
    return TransferReport(copied, len(keyed_jobs) - sum(copied.values()), {})


def _enqueued(target: Backend, jobs: list[Job],
              limits: dict[str, CopiedLimits]) -> TransferReport:
    """The pending and leased jobs, each enqueued under its id (with the limit keys and
    cap it had, into a target that takes them); the dead counted."""
    assert target.settings.clock is not None  # a backend keeps Settings.filled()
    copied: dict[str, int] = {}
    skipped = 0
    dead = 0
    for job in jobs:
        if job.state is JobState.DEAD:
            dead += 1
            continue
        if _holds(target, job.id):
            skipped += 1
            continue
        delay = max(0.0, job.available_at - target.settings.clock())
        if job.id in limits and target.capabilities.limits:  # as Dependencies declares it
            cast(Dependencies, target).enqueue(
                encode_payload(job.payload), job.payload, job_id=job.id,
                priority=job.priority, max_attempts=job.max_attempts, delay=delay,
                copied_limits=limits[job.id])
        else:
            target.enqueue(encode_payload(job.payload), job.payload, job_id=job.id,
                           priority=job.priority, max_attempts=job.max_attempts, delay=delay)
        copied["pending"] = copied.get("pending", 0) + 1
    return TransferReport(copied, skipped, {"dead": dead} if dead else {})


def _waiting(target: Backend, waiting: list[Job], modes: dict[str, str],
             report: TransferReport, limits: dict[str, CopiedLimits] | None) -> TransferReport:
    """`report` and the waiting jobs, enqueued with their prerequisites and modes (and the
    limit keys and caps of a source that exports them) in one graph, prerequisites
    first; those the target holds already skipped."""
    if not target.capabilities.dependencies:
        return replace(report, not_copied={**report.not_copied, "waiting": len(waiting)})
    skipped = {job.id for job in waiting if _holds(target, job.id)}
    left = [job for job in waiting if job.id not in skipped]
    left_ids = {job.id for job in left}
    index: dict[str, int] = {}
    nodes: list[GraphNode] = []
    assert target.settings.clock is not None  # a backend keeps Settings.filled()
    now = target.settings.clock()
    for job in left:  # in enqueue order: a job's prerequisites come before it
        if not all(p in index or (p not in left_ids and _holds(target, p))
                   for p in job.waiting_for):
            continue  # it waits for a job the target will not hold
        index[job.id] = len(nodes)
        nodes.append(GraphNode(job.payload, tuple(index.get(p, p) for p in job.waiting_for),
                               modes.get(job.id, SUCCESS), job.priority,
                               max(0.0, job.available_at - now), job.max_attempts, job.id))
    copied = dict(report.copied)
    if nodes:
        texts = [encode_payload(node.payload) for node in nodes]
        for job in cast(Dependencies, target).enqueue_graph(texts, checked_nodes(nodes),
                                                            limits):
            copied[str(job.state)] = copied.get(str(job.state), 0) + 1
    lost = len(waiting) - len(skipped) - len(nodes)
    return replace(report, copied=copied, skipped=report.skipped + len(skipped),
                   not_copied={**report.not_copied, "waiting": lost} if lost
                   else report.not_copied)


def _dormant(target: Backend, dormant: list[DormantJob],
             report: TransferReport) -> TransferReport:
    """`report` and the revivable cancelled dependents, copied as such into a target
    that imports them and revives (counted as copied "cancelled"); one whose
    prerequisites the target does not hold is not copied (it would wait for nothing)."""
    if not (target.capabilities.imports and target.capabilities.revival):
        return replace(report, not_copied={**report.not_copied, "cancelled": len(dormant)})
    ids = {copy.job.id for copy in dormant}
    whole = [copy for copy in dormant
             if all(p in ids or _holds(target, p) for p in (*copy.unmet, *copy.failed))]
    added = cast(JobImport, target).import_dormant(whole)
    lost = len(dormant) - len(whole)
    return replace(report, copied={**report.copied, "cancelled": len(added)} if added
                   else report.copied, skipped=report.skipped + len(whole) - len(added),
                   not_copied={**report.not_copied, "cancelled": lost} if lost
                   else report.not_copied)


def _holds(target: Backend, job_id: str) -> bool:
    try:
        target.get(job_id)
    except JobNotFoundError:
        return False
    return True
