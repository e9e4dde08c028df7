"""What a run found: violations, per-profile figures and the report.

Part of the crash-state explorer; the theory is in harness/explorer/__init__.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Violation:
    """One broken invariant, with enough to reproduce and to find the source line."""

    check: str
    workload: str
    profile: str
    crash_point: int
    strategy: str
    message: str
    state: str = ""
    sources: tuple[str, ...] = ()
    context: tuple[str, ...] = ()
    files: dict[str, bytes] = field(default_factory=dict, repr=False)

    def __str__(self) -> str:
        lines = [f"[{self.check}] {self.workload}/{self.profile} crash point "
                 f"{self.crash_point} ({self.strategy}): {self.message}"]
        if self.state:
            lines.append(f"    state: {self.state}")
        lines.extend(f"    {line}" for line in self.context)
        lines.extend(f"    dropped {line}" for line in self.sources)
        return "\n".join(lines)


@dataclass
class _Outcome:
    """What opening one state gave."""

    error: str | None = None
    corrupt: bool = False
    modified_on_error: bool = False
    fingerprint: tuple[object, ...] | None = None
    last_batch: int = -1
    generation: int = 0
    repaired: bool = False
    problems: list[tuple[str, str]] = field(default_factory=list)
    jobs: dict[str, tuple[str, int, float]] = field(default_factory=dict)


@dataclass
class ProfileStats:
    crash_points: int = 0
    states: int = 0  # (crash point, state) pairs checked
    unique: int = 0  # states opened
    violations: int = 0
    seconds: float = 0.0


@dataclass
class Report:
    """What one explore() call found."""

    workloads: list[str] = field(default_factory=list)
    calls: int = 0
    events: int = 0
    stats: dict[str, ProfileStats] = field(default_factory=dict)
    violations: list[Violation] = field(default_factory=list)
    compound_states: int = 0
    continued_states: int = 0
    rot_states: int = 0
    seconds: float = 0.0
    total_violations: int = 0

    @property
    def ok(self) -> bool:
        return self.total_violations == 0

    def merge(self, other: Report) -> Report:
        self.workloads += other.workloads
        self.calls += other.calls
        self.events += other.events
        for name, stats in other.stats.items():
            mine = self.stats.setdefault(name, ProfileStats())
            for attr in ("crash_points", "states", "unique", "violations", "seconds"):
                setattr(mine, attr, getattr(mine, attr) + getattr(stats, attr))
        self.violations += other.violations[:max(0, 50 - len(self.violations))]
        self.compound_states += other.compound_states
        self.continued_states += other.continued_states
        self.rot_states += other.rot_states
        self.seconds += other.seconds
        self.total_violations += other.total_violations
        return self

    def summary(self) -> str:
        lines = [f"explored {len(self.workloads)} workload(s), {self.calls} calls, "
                 f"{self.events} recorded events in {self.seconds:.1f}s"]
        for name, s in self.stats.items():
            lines.append(f"  {name:<8} {s.crash_points:6d} crash points  {s.states:7d} states "
                         f"checked  {s.unique:6d} unique opened  {s.violations:4d} violations"
                         f"  {s.seconds:6.1f}s")
        lines.append(f"  compound (I8) states {self.compound_states}, continued (I9) "
                     f"{self.continued_states}, rot (E8) {self.rot_states}; "
                     f"violations: {self.total_violations}")
        for violation in self.violations[:10]:
            lines.append(str(violation))
        return "\n".join(lines)
