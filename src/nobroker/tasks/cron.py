"""Cron expressions: the five standard fields, and the next or previous matching minute.

What it owns: parsing `minute hour day-of-month month day-of-week` (each a
`*`, a number, a range `a-b`, a step `*/n`, `a-b/n` or `a/n`, or a comma list
of those; months `jan`-`dec` and weekdays `sun`-`sat` by name; weekday 7 is
Sunday too; the aliases `@hourly`, `@daily`, `@midnight`, `@weekly`,
`@monthly`, `@yearly`, `@annually`) and finding matching times.

The day rule is Vixie cron's: when both day fields are restricted (neither
starts with `*`), a day matches if EITHER matches, so `0 0 1 * mon` runs on
the 1st and on every Monday; when one of them starts with `*`, a day must
match both (so `0 0 */2 * mon` is a Monday with an odd date).

Times are seconds since the epoch. The fields are read on a wall clock:
UTC by default, or a time zone's (`Cron.parse(expr, tz="Europe/Paris")`),
where a minute the clocks skip or repeat follows Vixie cron's rule
(zones.py says it). In a zone the search walks the local wall clock and
maps each matching minute to its instants, starting `MAX_SHIFT` before the
wall time asked about, since after the clocks go back the next instant can
sit at an earlier wall time. Pure functions: no clock is read; the caller
says "after when".
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from .zones import MAX_SHIFT, instants, zone

__all__ = ["Cron"]

_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
_ALIASES = {"@hourly": "0 * * * *", "@daily": "0 0 * * *", "@midnight": "0 0 * * *",
            "@weekly": "0 0 * * 0", "@monthly": "0 0 1 * *", "@yearly": "0 0 1 1 *",
            "@annually": "0 0 1 1 *"}
# (name, lowest, highest, names for lowest.. in order)
_FIELDS: tuple[tuple[str, int, int, tuple[str, ...]], ...] = (
    ("minute", 0, 59, ()), ("hour", 0, 23, ()), ("day of month", 1, 31, ()),
    ("month", 1, 12, _MONTHS), ("day of week", 0, 7, _DAYS))
_SEARCH_YEARS = 30  # a schedule that matches at all matches within 28 years (leap cycle)


@dataclass(frozen=True, slots=True)
class Cron:
    """A parsed cron expression; `Cron.parse("*/5 * * * *").next_after(t)`."""

    expression: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]  # of the month, 1-31
    months: frozenset[int]  # 1-12
    weekdays: frozenset[int]  # 0-6, Sunday is 0
    days_restricted: bool  # the day-of-month field does not start with '*'
    weekdays_restricted: bool
    # Neither the minute nor the hour field starts with '*': a job "at a particular
    # time", which fires once for a local time skipped or repeated (zones.py).
    fixed_time: bool = False
    zone: ZoneInfo | None = None  # the wall clock the fields are read on; None: UTC

    @classmethod
    def parse(cls, expression: str, tz: str | ZoneInfo | None = None) -> Cron:
        """Parse `expression`, read in time zone `tz` (a tz database name; None: UTC);
        ValueError (naming the field, or the zone) if either is not valid."""
        if not isinstance(expression, str):
            raise TypeError(f"cron must be a string, not {type(expression).__name__}")
        text = _ALIASES.get(expression.strip().lower(), expression)
        parts = text.split()
        if len(parts) != 5:
            raise ValueError(f"cron {expression!r} must have 5 fields (minute hour "
                             f"day-of-month month day-of-week), not {len(parts)}")
        sets = [_parse_field(expression, part, *spec)
                for part, spec in zip(parts, _FIELDS, strict=True)]
        weekdays = frozenset(d % 7 for d in sets[4])
        where = None if tz is None else zone(tz)
        cron = cls(expression, frozenset(sets[0]), frozenset(sets[1]), frozenset(sets[2]),
                   frozenset(sets[3]), weekdays, not parts[2].startswith("*"),
                   not parts[4].startswith("*"),
                   not parts[0].startswith("*") and not parts[1].startswith("*"), where)
        if cron.next_after(0.0) is None:
            raise ValueError(f"cron {expression!r} never matches (no month has those days)")
        return cron

    def matches(self, when: datetime) -> bool:
        """True when the wall-clock minute `when` (UTC, or the schedule's zone) is one
        of the schedule's."""
        return (when.minute in self.minutes and when.hour in self.hours
                and when.month in self.months and self._day_matches(when))

    def next_after(self, t: float) -> float | None:
        """The first matching minute strictly after `t` (None: the schedule never matches)."""
        if self.zone is None:
            start = _minute(datetime.fromtimestamp(t, UTC)) + timedelta(minutes=1)
            return next((_utc(w) for w in self._walk(start, forward=True)), None)
        quick = self._quick(t, self._wall(t) + timedelta(minutes=1), forward=True)
        if quick is not None:
            return quick
        best: float | None = None
        wall_limit: datetime | None = None
        for wall in self._walk(self._wall(t) - MAX_SHIFT, forward=True):
            if wall_limit is not None and wall > wall_limit:
                break  # every later wall minute names a later instant
            for instant in instants(self.zone, wall, self.fixed_time):
                if instant > t and (best is None or instant < best):
                    best, wall_limit = instant, wall + MAX_SHIFT
        return best

    def latest_at_or_before(self, t: float) -> float | None:
        """The last matching minute at or before `t` (None: none within the search span)."""
        if self.zone is None:
            start = _minute(datetime.fromtimestamp(t, UTC))  # `t` itself counts
            return next((_utc(w) for w in self._walk(start, forward=False)), None)
        quick = self._quick(t, self._wall(t), forward=False)
        if quick is not None:
            return quick
        best: float | None = None
        wall_limit: datetime | None = None
        for wall in self._walk(self._wall(t) + MAX_SHIFT, forward=False):
            if wall_limit is not None and wall < wall_limit:
                break
            for instant in instants(self.zone, wall, self.fixed_time):
                if instant <= t and (best is None or instant > best):
                    best, wall_limit = instant, wall - MAX_SHIFT
        return best

    # -- the search ---------------------------------------------------------

    def _day_matches(self, when: datetime) -> bool:
        dom = when.day in self.days
        dow = (when.isoweekday() % 7) in self.weekdays
        if self.days_restricted and self.weekdays_restricted:
            return dom or dow
        return dom and dow  # a field starting with '*' may still step: '*/2' is odd days

    def _quick(self, t: float, start: datetime, *, forward: bool) -> float | None:
        """The answer when no clock change lies within MAX_SHIFT of `t`, so that no
        wall minute on the far side of `t`'s names an instant on this side: then the
        first match from `start` is it, unless it is a repeated minute of a `*`
        schedule (two instants: the later pass may be the one). Later wall minutes
        name later instants except in such a repeat. None: ask the full search."""
        assert self.zone is not None
        wall = next(self._walk(start, forward=forward), None)
        if wall is None or not self._steady(t):
            return None
        found = instants(self.zone, wall, self.fixed_time)
        return found[0] if len(found) == 1 else None

    def _steady(self, t: float) -> bool:
        """No change of the zone's UTC offset within MAX_SHIFT either side of `t`."""
        span = MAX_SHIFT.total_seconds()
        return (datetime.fromtimestamp(t - span, self.zone).utcoffset()
                == datetime.fromtimestamp(t + span, self.zone).utcoffset())

    def _wall(self, t: float) -> datetime:
        """The naive local minute that `t` falls in."""
        return _minute(datetime.fromtimestamp(t, self.zone)).replace(tzinfo=None)

    def _walk(self, start: datetime, *, forward: bool) -> Iterator[datetime]:
        """The matching wall minutes from `start` on (itself included), in order,
        for at most _SEARCH_YEARS; jumping over whole units that cannot match."""
        when = start
        limit = when.year + (_SEARCH_YEARS if forward else -_SEARCH_YEARS)
        step = timedelta(minutes=1 if forward else -1)
        while (when.year <= limit) if forward else (when.year >= limit):
            if when.month not in self.months:
                when = _month_edge(when, forward)
            elif not self._day_matches(when):
                when = _day_edge(when, forward)
            elif when.hour not in self.hours:
                when = _hour_edge(when, forward)
            else:
                if when.minute in self.minutes:
                    yield when
                when += step


def _minute(when: datetime) -> datetime:
    return when.replace(second=0, microsecond=0)


def _utc(wall: datetime) -> float:
    return wall.replace(tzinfo=UTC).timestamp()


def _month_edge(when: datetime, forward: bool) -> datetime:
    """Forward: 00:00 on the 1st of the next month; back: 23:59 on the last of the previous."""
    if forward:
        year, month = (when.year + 1, 1) if when.month == 12 else (when.year, when.month + 1)
        return when.replace(year=year, month=month, day=1, hour=0, minute=0)
    return when.replace(day=1, hour=0, minute=0) - timedelta(minutes=1)


def _day_edge(when: datetime, forward: bool) -> datetime:
    if forward:
        return when.replace(hour=0, minute=0) + timedelta(days=1)
    return when.replace(hour=0, minute=0) - timedelta(minutes=1)


def _hour_edge(when: datetime, forward: bool) -> datetime:
    if forward:
        return when.replace(minute=0) + timedelta(hours=1)
    return when.replace(minute=0) - timedelta(minutes=1)


def _parse_field(expression: str, text: str, name: str, low: int, high: int,
                 names: tuple[str, ...]) -> set[int]:
    values: set[int] = set()
    for item in text.split(","):
        values.update(_parse_item(expression, item, name, low, high, names))
    return values


def _parse_item(expression: str, item: str, name: str, low: int, high: int,
                names: tuple[str, ...]) -> range:
    def bad(why: str) -> ValueError:
        return ValueError(f"cron {expression!r}: {name} field {item!r}: {why}")

    base, slash, step_text = item.partition("/")
    step = 1
    if slash:
        if not step_text.isdigit() or int(step_text) < 1:
            raise bad("the step after '/' must be a whole number >= 1")
        step = int(step_text)
    if base == "*":
        first, last = low, high
    else:
        first_text, dash, last_text = base.partition("-")
        first = _value(first_text, low, high, names, bad)
        if dash:
            last = _value(last_text, low, high, names, bad)
            if last < first:
                raise bad(f"the range runs backwards ({first} > {last})")
        else:
            last = high if slash else first  # 'a/n' means a, a+n, ... up to the field's end
    if name == "day of week" and base == "*":
        last = 6  # '*' is Sunday to Saturday once, not Sunday twice
    return range(first, last + 1, step)


def _value(text: str, low: int, high: int, names: tuple[str, ...],
           bad: Callable[[str], ValueError]) -> int:
    lowered = text.lower()
    if lowered in names:
        return low + names.index(lowered)
    if not text.isdigit():
        expected = f"a number {low}-{high}" + (f" or a name ({names[0]}...)" if names else "")
        raise bad(f"{text!r} is not {expected}")
    value = int(text)
    if not low <= value <= high:
        raise bad(f"{value} is outside {low}-{high}")
    return value
