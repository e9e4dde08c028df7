"""The soak's configuration, its report, and the audit of the children's event logs.

The theory (what the audit checks) is in harness/soak/__init__.py.
"""

from __future__ import annotations

import itertools
import os
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

import harness.support  # noqa: F401  (puts src/ on sys.path)
import nobroker
from nobroker import Queue

from .roles import RATE, RATED

EPSILON = 1e-6


@dataclass
class SoakConfig:
    seconds: float = 15.0
    producers: int = 2
    workers: int = 2
    compactor: bool = True
    kill_every: tuple[float, float] = (0.4, 1.2)  # seconds between kills, uniform
    seed: int = 0
    visibility_timeout: float = 1.5
    max_attempts: int = 8
    drain_timeout: float = 60.0


@dataclass
class SoakReport:
    seconds: float = 0.0
    kills: Counter[str] = field(default_factory=Counter)
    tried: int = 0
    enqueued: int = 0  # enqueue calls that returned, in jobs
    recovered: int = 0  # tried, not logged as returned, yet the job exists
    jobs: int = 0  # distinct jobs that existed
    deliveries: int = 0
    duplicates: int = 0  # deliveries after the first, all explained
    acked: int = 0
    dead: int = 0
    compactions: int = 0
    stale: int = 0
    results: int = 0  # acks with a result that returned (each must be kept)
    cancelled: int = 0  # jobs kept as cancelled at the end
    lost: int = 0
    double_acked: int = 0
    resurrected: int = 0
    unexpected: int = 0
    overlaps: int = 0
    unexplained: int = 0
    graphs: int = 0  # enqueue_graph calls that returned (chords and chains)
    early: int = 0  # deliveries of a dependent before a prerequisite's ack
    problems: list[str] = field(default_factory=list)
    stats: Any = None

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        kills = ", ".join(f"{role} {n}" for role, n in sorted(self.kills.items()))
        return (f"soak {self.seconds:.0f}s: {self.enqueued} jobs enqueued ({self.tried} tried, "
                f"{self.recovered} recovered), {self.deliveries} deliveries, {self.acked} acked, "
                f"{self.dead} dead, {self.results} results kept, {self.cancelled} cancelled, "
                f"{self.duplicates} justified duplicates, "
                f"{self.compactions} compactions, kills: {sum(self.kills.values())} ({kills}); "
                f"lost {self.lost}, double-acked {self.double_acked}, resurrected "
                f"{self.resurrected}, unexpected {self.unexpected}, lease overlaps "
                f"{self.overlaps}, unexplained duplicates {self.unexplained}, "
                f"{self.graphs} graphs, early {self.early}; "
                f"problems: {len(self.problems)}")


# --------------------------------------------------------------------------
# the audit


@dataclass
class _Delivery:
    job: str
    token: int
    tag: str
    pid: int
    expires: float


def _read_logs(logdir: str) -> tuple[list[tuple[int, list[str]]], int]:
    events: list[tuple[int, list[str]]] = []
    broken = 0
    for name in sorted(os.listdir(logdir)):
        if not name.endswith(".log"):
            continue
        pid = int(name.rsplit("-", 1)[1][:-4])
        with open(os.path.join(logdir, name), "rb") as handle:
            data = handle.read().decode("utf-8", "replace")
        for line in data.split("\n"):
            if line:
                events.append((pid, line.split("\t")))
        if data and not data.endswith("\n"):
            broken += 1
    return events, broken


def _audit_rate(deliveries: dict[str, list[_Delivery]], cfg: SoakConfig,
                problems: list[str]) -> None:
    """The rated task's starts (a lease's time is its deadline less the visibility
    timeout) never hold more than the limit in any window of its period, whichever
    worker was killed when: a start whose "start" line a kill lost is not counted."""
    count, period = RATE
    starts = sorted(d.expires - cfg.visibility_timeout for runs in deliveries.values()
                    for d in runs if d.tag.endswith(RATED))
    for first, last in zip(starts, starts[count:], strict=False):
        if last - first < period - 1e-6:
            problems.append(f"rate limit broken: {count + 1} starts between {first:.6f} "
                            f"and {last:.6f}, within {period}s")
            return


def audit(directory: str, logdir: str, killed: set[int], cfg: SoakConfig) -> SoakReport:
    report = SoakReport()
    problems = report.problems
    events, broken = _read_logs(logdir)
    if broken:
        problems.append(f"{broken} event logs end in a torn line (single writes should not tear)")
    tried: set[str] = set()
    ok: dict[str, str] = {}  # tag -> job id, for enqueues that returned
    tag_of: dict[str, str] = {}  # job id -> tag
    deliveries: dict[str, list[_Delivery]] = defaultdict(list)
    acked: dict[str, list[int]] = defaultdict(list)
    acking: dict[str, set[int]] = defaultdict(set)
    settled: set[tuple[str, int]] = set()  # (job, token) nacked or found stale
    with_result: set[str] = set()  # jobs whose ack with a result returned
    cancel_tried: set[str] = set()
    cancelled: set[str] = set()  # jobs whose cancel returned True
    stale_tokens: dict[str, set[int]] = defaultdict(set)
    nacking: set[tuple[str, int]] = set()  # a nack was begun (it may have landed)
    graphs: list[list[str]] = []  # the tags of each enqueue_graph tried
    after: dict[str, list[str]] = {}  # a graph's dependent tag -> its prerequisites' tags
    for pid, fields in events:
        kind, rest = fields[0], fields[1:]
        if kind == "try":
            tried.add(rest[0])
        elif kind in ("trymany", "trygraph"):
            tried.update(rest)
            if kind == "trygraph":
                graphs.append(rest)
        elif kind == "after":
            after[rest[0]] = rest[1:]
        elif kind == "ok":
            ok[rest[0]] = rest[1]
            tag_of[rest[1]] = rest[0]
        elif kind in ("okmany", "okgraph"):
            report.graphs += kind == "okgraph"
            for pair in rest:
                tag, job_id = pair.split("=", 1)
                ok[tag] = job_id
                tag_of[job_id] = tag
        elif kind == "start":
            job_id, token, tag, expires = rest[0], int(rest[1]), rest[2], float(rest[3])
            deliveries[job_id].append(_Delivery(job_id, token, tag, pid, expires))
            tag_of.setdefault(job_id, tag)
        elif kind == "acking":
            acking[rest[0]].add(int(rest[1]))
        elif kind == "nacking":
            nacking.add((rest[0], int(rest[1])))
        elif kind == "acked":
            acked[rest[0]].append(int(rest[1]))
            if rest[2:] == ["result"]:
                with_result.add(rest[0])
        elif kind == "cancelling":
            cancel_tried.add(rest[0])
        elif kind == "cancelled" and rest[1] == "yes":
            cancelled.add(rest[0])
        elif kind in ("nacked", "stale"):
            settled.add((rest[0], int(rest[1])))
            if kind == "stale":
                report.stale += 1
                stale_tokens[rest[0]].add(int(rest[1]))
        elif kind == "compacted":
            report.compactions += 1
    with Queue(directory, readonly=True) as q:
        present = {job.id: job for job in q.list_jobs()}
        kept = {job.id: job for state in (nobroker.JobState.DONE, nobroker.JobState.CANCELLED)
                for job in q.list_jobs(state)}
        stats = q.stats()
    report.stats = stats
    for job in present.values():
        tag_of.setdefault(job.id, job.payload.get("tag", "?") if isinstance(job.payload, dict)
                          else "?")
    existed = set(ok.values()) | set(deliveries) | set(present)
    report.tried = len(tried)
    report.enqueued = len(ok)
    report.jobs = len(existed)
    report.recovered = len({tag_of[j] for j in existed} - set(ok))
    report.dead = sum(1 for job in present.values() if job.state is nobroker.JobState.DEAD)
    report.acked = sum(1 for j in acked if acked[j])
    for job_id in existed:
        tag = tag_of.get(job_id, "?")
        if tag not in tried:
            report.unexpected += 1
            problems.append(f"unexpected: job {job_id} ({tag}) was never tried")
    for job_id, tokens in acked.items():
        if len(tokens) > 1:
            report.double_acked += 1
            problems.append(f"double-acked: {job_id} acked with tokens {tokens}")
        if job_id in present:
            report.resurrected += 1
            problems.append(f"resurrected: {job_id} acked, yet {present[job_id].state} at the end")
        later = [d.token for d in deliveries[job_id] if d.token > min(tokens)]
        if later:
            report.resurrected += 1
            problems.append(f"resurrected: {job_id} delivered with tokens {later} after its "
                            f"ack with token {min(tokens)}")
    ended_cancelled = {j for j, job in kept.items()
                       if job.state is nobroker.JobState.CANCELLED}
    report.cancelled = len(ended_cancelled)
    report.results = len(with_result)
    for job_id in sorted(with_result):
        got = kept.get(job_id)
        if got is None or got.state is not nobroker.JobState.DONE \
                or got.result != {"tag": tag_of.get(job_id)}:
            problems.append(f"result lost: {job_id}'s ack with a result returned, yet the "
                            f"queue holds {got}")
    for job_id in sorted(cancelled):
        if job_id not in ended_cancelled:
            problems.append(f"cancel lost: {job_id}'s cancel returned True, yet it is "
                            f"{kept.get(job_id) or present.get(job_id)}")
        if acked.get(job_id):
            problems.append(f"acked after a cancel: {job_id}")
    for job_id in sorted(ended_cancelled - cancel_tried):
        problems.append(f"cancelled, yet nobody cancelled {job_id}")
    returned = set(ok.values())
    for job_id in sorted(existed - set(present) - ended_cancelled):
        if not acking.get(job_id):  # gone, and nobody even tried to ack it
            report.lost += 1
            how = "its enqueue returned" if job_id in returned else "it was delivered"
            problems.append(f"lost: {job_id} ({tag_of.get(job_id)}): {how}, yet it is not "
                            f"in the queue and was never acked")
    for job_id, seen in deliveries.items():
        seen.sort(key=lambda d: d.token)
        report.deliveries += len(seen)
        for first, second in itertools.pairwise(seen):
            report.duplicates += 1
            settled_early = (job_id, first.token) in settled  # nacked, or found stale
            if first.pid not in killed and not settled_early:
                report.unexplained += 1
                problems.append(f"unexplained duplicate: {job_id} token {first.token} "
                                f"(pid {first.pid}, not killed, never nacked) then token "
                                f"{second.token}")
            began = second.expires - cfg.visibility_timeout
            nacked = settled_early and first.token not in stale_tokens.get(job_id, ())
            # Killed between nack's write and its "nacked" line: the nack may have landed,
            # and with delay 0 the job is at once leasable by another worker.
            nacked = nacked or (first.pid in killed and (job_id, first.token) in nacking)
            if not nacked and began < first.expires - 1e-3:
                report.overlaps += 1
                problems.append(f"lease overlap: {job_id} token {second.token} began at "
                                f"{began:.6f}, before token {first.token}'s lease ran out "
                                f"at {first.expires:.6f}")
    _audit_graphs(report, graphs, after, existed, tag_of, deliveries, acking)
    _audit_rate(deliveries, cfg, problems)
    if stats.pending or stats.leased:
        problems.append(f"not drained: {stats}")
    if stats.dead != report.dead:
        problems.append(f"stats.dead {stats.dead} != {report.dead} dead jobs listed")
    expected_done = len(existed - set(present) - ended_cancelled)
    if stats.done != expected_done:
        problems.append(f"stats.done {stats.done} != {expected_done} jobs that existed and "
                        f"are gone")
    if stats.total != len(present):
        problems.append(f"stats.total {stats.total} != {len(present)} listed")
    return report


def _audit_graphs(report: SoakReport, graphs: list[list[str]], after: dict[str, list[str]],
                  existed: set[str], tag_of: dict[str, str],
                  deliveries: dict[str, list[_Delivery]], acking: dict[str, set[int]]) -> None:
    """A graph is all or nothing; no dependent (a chord's callback, a chain's later
    step) is delivered before each of its prerequisites was acked. Fencing tokens
    rise with every lease, so a delivery of a dependent must carry a token above
    the one its prerequisite's ack was made under (the smallest that tried to ack
    it, since a killed worker may ack without logging it); that every job ran to
    its one ack is the main audit's (lost, double-acked, resurrected)."""
    id_of = {tag: job_id for job_id, tag in tag_of.items() if job_id in existed}
    for tags in graphs:
        there = [tag for tag in tags if tag in id_of]
        if there and len(there) != len(tags):
            report.problems.append(f"graph torn: {there} of {tags} exist")
    for tag, prerequisites in after.items():
        job_id = id_of.get(tag)
        if job_id is None:
            continue
        for prerequisite in prerequisites:
            tokens = acking.get(id_of.get(prerequisite, ""), set())
            for delivery in deliveries.get(job_id, []):
                if not tokens or delivery.token <= min(tokens):
                    report.early += 1
                    report.problems.append(
                        f"early: {tag} delivered (token {delivery.token}) before its "
                        f"prerequisite {prerequisite} was acked (tokens {sorted(tokens)})")
