"""Wall-clock time in a time zone: a zone from its name, and the instants a wall minute names.

What it owns: turning `tz="Europe/Paris"` into a `zoneinfo.ZoneInfo` (the
standard library's reader of the system's tz database, or of the `tzdata`
package), with an error that names the bad zone or says the system has no
database; and `instants(zone, wall, fixed_time)`, the moments (seconds
since the epoch) at which a cron schedule in that zone fires for one
matching local minute.

The daylight-saving rule is Vixie cron's (cron(8), kept by cronie): a job
"that runs at a particular time" -- neither its minute nor its hour field
starts with `*` -- fires once for a local time that does not exist (the
clocks jumped over it: it fires at the first minute that does exist after
the jump) and once for a local time that occurs twice (the clocks went
back: at the first of the two). A job with `*` in its minute or hour field
follows the clock as it is: it never fires for minutes that do not exist,
and fires for both passes of a repeated hour (`0 * * * *` stays hourly in
real time). Vixie cron applies the rule to changes of less than three hours;
so does the search in cron.py, which looks that far either side.

Pure functions: no clock is read; the tz database is read once per zone.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

__all__ = ["zone", "instants", "MAX_SHIFT"]

MAX_SHIFT = timedelta(hours=3)  # the largest clock change the rule above covers
_MINUTE = timedelta(minutes=1)
_LONGEST_GAP = 2 * 24 * 60  # minutes; the longest jump known is a day (Samoa, 2011)


def zone(name: object) -> ZoneInfo:
    """The zone named `name` ('Europe/Paris', 'UTC'); ValueError naming it if there is
    none, or saying that the system has no tz database at all."""
    if isinstance(name, ZoneInfo):
        return name
    if not isinstance(name, str):
        raise TypeError(f"tz must be a time zone name such as 'Europe/Paris', not "
                        f"{type(name).__name__}")
    try:
        return ZoneInfo(name)
    except ZoneInfoNotFoundError:
        if not available_timezones():
            raise ValueError(f"tz {name!r}: this system has no time zone database "
                             f"(install the OS's tzdata package, or `pip install tzdata`)"
                             ) from None
        raise ValueError(f"tz {name!r} is not a zone of the tz database (names are like "
                         f"'Europe/Paris', 'America/New_York' or 'UTC')") from None
    except (ValueError, OSError) as exc:  # not a key ('../x', '/abs'), or not a TZif file
        raise ValueError(f"tz {name!r} is not a time zone name: {exc}") from None


def instants(where: ZoneInfo, wall: datetime, fixed_time: bool) -> tuple[float, ...]:
    """When a schedule that matches the naive local minute `wall` fires for it (see the
    module doc): one instant, two (a repeated minute, for a `*` job), or none."""
    first = wall.replace(tzinfo=where, fold=0)
    second = wall.replace(tzinfo=where, fold=1)
    early, late = first.timestamp(), second.timestamp()
    if _exists(where, wall, early):
        if early == late or fixed_time:  # the usual case; or a repeat: the first pass only
            return (early,)
        return (early, late)
    if not fixed_time:
        return ()  # skipped by the clock: a `*` job just has one minute fewer
    return (_after_gap(where, wall),)


def _exists(where: ZoneInfo, wall: datetime, instant: float) -> bool:
    return datetime.fromtimestamp(instant, where).replace(tzinfo=None) == wall


def _after_gap(where: ZoneInfo, wall: datetime) -> float:
    """The instant of the first local minute after `wall` that exists."""
    when = wall
    for _ in range(_LONGEST_GAP):
        when += _MINUTE
        instant = when.replace(tzinfo=where).timestamp()
        if _exists(where, when, instant):
            return instant
    raise AssertionError(f"no local minute exists in {where.key} for two days after {wall}")
