"""tools/bench/realistic/run.py's table: one column per system, the rows of issue
25 (W-io share of the ideal, the queue's CPU per job beside a CPU-bound job,
W-noop, the producer's durable enqueue), lost and duplicated jobs, and what
each system guarantees."""

from __future__ import annotations

from dataclasses import dataclass, field

from tools.bench.common import fmt_ratio, median
from tools.bench.realistic.drain import DrainResult
from tools.bench.realistic.jobs import CPU_SECONDS, IO_SECONDS


@dataclass(frozen=True)
class Config:
    """One workload shape: the job kind, P worker processes of T threads each."""

    kind: str
    processes: int
    threads: int

    @property
    def label(self) -> str:
        return f"{self.kind} {self.processes}x{self.threads}"


CONFIGS = (Config("io", 1, 16), Config("io", 2, 8), Config("cpu", 1, 1), Config("cpu", 2, 1),
           Config("noop", 1, 1), Config("noop", 2, 1))


@dataclass
class Results:
    """Every drain, by system and config, in round order; and why a cell has none."""

    runs: dict[str, dict[Config, list[DrainResult]]] = field(default_factory=dict)
    skipped: dict[tuple[str, Config], str] = field(default_factory=dict)

    def add(self, system: str, config: Config, result: DrainResult) -> None:
        self.runs.setdefault(system, {}).setdefault(config, []).append(result)

    def rate(self, system: str, config: Config) -> float | None:
        runs = self.runs.get(system, {}).get(config)
        return median([r.outcome.rate for r in runs]) if runs else None

    def cpu(self, system: str, config: Config) -> float | None:
        runs = self.runs.get(system, {}).get(config, [])
        values = [r.queue_cpu_per_job for r in runs if r.queue_cpu_per_job is not None]
        return median(values) if values else None

    def enqueue_rate(self, system: str) -> float | None:
        rates = [r.enqueue_rate for runs in self.runs.get(system, {}).values() for r in runs]
        return median(rates) if rates else None

    def lost_duplicated(self, system: str) -> tuple[int, int]:
        runs = [r for rs in self.runs.get(system, {}).values() for r in rs]
        return (sum(r.outcome.lost for r in runs), sum(r.outcome.duplicated for r in runs))


def _cell(results: Results, system: str, config: Config, text: str | None) -> str:
    """The figure, or why there is none, cut short (notes() has the whole reason)."""
    if text is not None:
        return text
    why = results.skipped.get((system, config), "—")
    return why if len(why) <= 20 else why[:18] + " *"


def notes(results: Results) -> list[str]:
    """Each long reason a cell is empty, once: "system (configs): reason"."""
    where: dict[tuple[str, str], list[str]] = {}
    for (system, config), why in results.skipped.items():
        if len(why) > 20:
            where.setdefault((system, why), []).append(config.label)
    return [f"{system} ({', '.join(labels)}): {why}" for (system, why), labels in where.items()]


def rows(results: Results, systems: list[str]) -> tuple[list[str], list[list[str]]]:
    """The table: a row per figure, a column per system."""
    io1, io2, cpu1, cpu2, noop1, noop2 = CONFIGS

    def share(s: str, c: Config) -> str | None:
        rate = results.rate(s, c)
        return None if rate is None else f"{rate / (c.processes * c.threads / IO_SECONDS):.2f}"

    def cpu_us(s: str, c: Config) -> str | None:
        cpu = results.cpu(s, c)
        return None if cpu is None else f"{cpu * 1e6:,.0f} us"

    def both(s: str, a: Config, b: Config, fmt: str) -> str:
        ra, rb = results.rate(s, a), results.rate(s, b)
        left = fmt.format(ra) if ra is not None else _cell(results, s, a, None)
        right = fmt.format(rb) if rb is not None else _cell(results, s, b, None)
        ratio = f" ({fmt_ratio(rb / ra)})" if ra and rb else ""
        return f"{left} / {right}{ratio}"

    def enqueue(s: str) -> str:
        rate = results.enqueue_rate(s)
        return "—" if rate is None else f"{rate:,.0f}/s"

    def lost(s: str) -> str:
        lost_jobs, duplicated = results.lost_duplicated(s)
        return f"{lost_jobs} / {duplicated}"

    ideal1 = io1.processes * io1.threads / IO_SECONDS
    table = [
        [f"W-io, 1 process x 16 threads, share of the ideal {ideal1:,.0f}/s",
         *(_cell(results, s, io1, share(s, io1)) for s in systems)],
        ["W-io, 2 processes x 8 threads, share of the ideal",
         *(_cell(results, s, io2, share(s, io2)) for s in systems)],
        [f"queue CPU per job beside a {CPU_SECONDS * 1e3:.1f} ms CPU job, 1 process",
         *(_cell(results, s, cpu1, cpu_us(s, cpu1)) for s in systems)],
        ["the same, 2 processes", *(_cell(results, s, cpu2, cpu_us(s, cpu2)) for s in systems)],
        ["W-cpu jobs/s, 1 process / 2 processes (2/1)",
         *(both(s, cpu1, cpu2, "{:,.0f}") for s in systems)],
        ["W-noop jobs/s, 1 process / 2 processes (2/1)",
         *(both(s, noop1, noop2, "{:,.0f}") for s in systems)],
        ["one producer's durable enqueue", *(enqueue(s) for s in systems)],
        ["lost / duplicated jobs, all drains", *(lost(s) for s in systems)],
    ]
    return ["", *systems], table
