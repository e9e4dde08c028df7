"""Rate limits and concurrency limits: what the code declares, and the lease's budget.

What it owns: reading a limit (`"100/m"`, `(5, 0.5)`), the `Limits` a Queue
keeps in its Settings (the queue's rate limit, and what each task declared),
a job's limit keys computed at enqueue from its payload, the sliding window
of one rate key (`Window`, the starts a backend's replayed state holds), the
`Budget` one lease decision spends, and each key's use now (`key_use`,
`KeyUse`). Which groups of keys a lease looks at (`Parking`: not those of a
full concurrency key) is limit_parking.py's.

Rules: the configuration is code. Each process declares its limits (its
`@q.task` options, `Queue(rate_limit=)`) and passes them to every lease
decision; the backend counts starts and holders in the state it decides
under (the file log's lock, from replayed records), so a limit holds across
every process that declares it. A key this process has not declared is not
limited by its leases. Windows slide (never calendar-aligned): a job may
start at `now` only while fewer than `count` starts lie in (now - period,
now]; a fresh limit lets the first job through at once. Nothing here reads a
clock or touches storage.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from . import validation
from .errors import NobrokerError

__all__ = ["Rate", "parse_rate", "Limits", "JobKeys", "Window", "Budget", "QUEUE_KEY",
           "family", "require", "require_for_queue", "KeyUse", "key_use", "latest_caps"]

QUEUE_KEY: Final = ""  # the queue-wide rate limit's window (no declared key is empty)
_SEPARATOR: Final = "\x00"  # a computed concurrency key: FAMILY + _SEPARATOR + value
_UNITS: Final = {"s": 1.0, "m": 60.0, "h": 3600.0}
_SPEC: Final = re.compile(r"\s*(\d+)\s*/\s*([smh])\s*")
MAX_COUNT: Final = 100_000  # starts a window keeps: one float each, per key

# (rate key, concurrency key) of one job; either may be None.
JobKeys = tuple[str | None, str | None]


@dataclass(frozen=True, slots=True)
class Rate:
    """At most `count` starts in any `period` seconds."""

    count: int
    period: float

    def __str__(self) -> str:
        return f"{self.count}/{self.period:g}s"


def parse_rate(value: object, name: str = "rate_limit") -> Rate:
    """`"100/m"` (per `s`, `m` or `h`) or `(count, seconds)`; ValueError otherwise."""
    if isinstance(value, Rate):
        return value
    if isinstance(value, str):
        match = _SPEC.fullmatch(value)
        if match is None:
            raise ValueError(f"{name} must look like '100/m' (per s, m or h), not {value!r}")
        count, period = int(match.group(1)), _UNITS[match.group(2)]
    elif isinstance(value, tuple) and len(value) == 2:
        count = validation.integer(f"{name} count", value[0], 1, MAX_COUNT)
        period = validation.number(f"{name} period", value[1], positive=True)
    else:
        raise ValueError(f"{name} must be 'COUNT/UNIT' or (count, seconds), not {value!r}")
    validation.integer(f"{name} count", count, 1, MAX_COUNT)
    return Rate(count, period)


def require(backend: Any, what: str) -> None:
    """NobrokerError unless `backend` has the `limits` capability."""
    if not backend.capabilities.limits:
        raise NobrokerError(f"{what} is not supported by the {type(backend).__name__} "
                            "backend (it lacks the 'limits' capability)")


def require_for_queue(backend: Any, rate_limit: object) -> None:
    """`Queue(rate_limit=)` on a backend just opened: NobrokerError (the backend closed
    first) unless it has the `limits` capability."""
    if rate_limit is not None and not backend.capabilities.limits:
        backend.close()
        require(backend, "rate_limit=")


def family(concurrency_key: str) -> str:
    """The declared key a stored concurrency key belongs to (its limit's name)."""
    return concurrency_key.partition(_SEPARATOR)[0]


def _key(name: str, value: object) -> str:
    if not isinstance(value, str) or not value or _SEPARATOR in value:
        raise ValueError(f"{name} must be a non-empty string without NUL, not {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class _TaskLimits:
    rate_key: str | None
    concurrency_family: str | None
    key_of: Callable[..., Any] | None  # concurrency_key= as a function of the arguments


@dataclass(slots=True)
class Limits:
    """The limits this process declared for one queue (kept in its Settings)."""

    queue_rate: Rate | None = None
    rates: dict[str, Rate] = field(default_factory=dict)  # rate key -> its limit
    concurrency: dict[str, int] = field(default_factory=dict)  # family -> holders at once
    tasks: dict[str, _TaskLimits] = field(default_factory=dict)  # task name -> its keys

    def __bool__(self) -> bool:
        return bool(self.queue_rate or self.tasks)

    def declare_queue(self, rate_limit: object) -> None:
        self.queue_rate = parse_rate(rate_limit)
        self.rates[QUEUE_KEY] = self.queue_rate

    def declare_task(self, name: str, *, rate_limit: object = None,
                     rate_limit_key: object = None, concurrency: object = None,
                     concurrency_key: object = None) -> None:
        """Task `name`'s limits; ValueError if a key it shares was declared otherwise."""
        rate_key = family_name = None
        key_of = None
        if rate_limit_key is not None and rate_limit is None:
            raise ValueError("rate_limit_key= needs rate_limit=")
        if concurrency_key is not None and concurrency is None:
            raise ValueError("concurrency_key= needs concurrency=")
        if rate_limit is not None:
            rate = parse_rate(rate_limit)
            rate_key = _key("rate_limit_key", name if rate_limit_key is None else rate_limit_key)
            known = self.rates.get(rate_key)
            if known is not None and known != rate:
                raise ValueError(f"rate limit key {rate_key!r} is declared as {known} "
                                 f"already, not {rate}")
        if concurrency is not None:
            holders = validation.integer("concurrency", concurrency, 1)
            if callable(concurrency_key):
                family_name, key_of = name, concurrency_key
            else:
                family_name = _key("concurrency_key",
                                   name if concurrency_key is None else concurrency_key)
            known_holders = self.concurrency.get(family_name)
            if known_holders is not None and known_holders != holders:
                raise ValueError(f"concurrency key {family_name!r} is declared with "
                                 f"concurrency={known_holders} already, not {holders}")
        if rate_key is not None:
            self.rates[rate_key] = rate
        if family_name is not None:
            self.concurrency[family_name] = holders
        if rate_key is not None or family_name is not None:
            self.tasks[name] = _TaskLimits(rate_key, family_name, key_of)

    def stored_keys(self, payload: Any) -> tuple[JobKeys | None, int | None]:
        """What a job with this payload stores at enqueue: its limit keys (keys_of), and
        the holders at once declared here for its concurrency key (None: none), for
        processes that did not declare it."""
        keys = self.keys_of(payload)
        if keys is None or keys[1] is None:
            return keys, None
        return keys, self.concurrency.get(family(keys[1]))

    def keys_of(self, payload: Any) -> JobKeys | None:
        """The limit keys of a job with this payload (a task call of a limited task),
        computed now, at enqueue; None for a job no declared limit names."""
        if not self.tasks or not isinstance(payload, dict):
            return None
        limits = self.tasks.get(payload.get("task"))  # type: ignore[arg-type]
        if limits is None:
            return None
        concurrency = limits.concurrency_family
        if concurrency is not None and limits.key_of is not None:
            args, kwargs = payload.get("args", []), payload.get("kwargs", {})
            value = limits.key_of(*(args if isinstance(args, list) else []),
                                  **(kwargs if isinstance(kwargs, dict) else {}))
            concurrency = f"{concurrency}{_SEPARATOR}{value}"
        return limits.rate_key, concurrency


class Window:
    """The latest starts of one rate key, oldest first: at most `count` of them,
    which is all a window of `count` starts needs to know. Pure."""

    __slots__ = ("count", "period", "starts")

    def __init__(self, count: int, period: float, starts: Iterable[float] = ()) -> None:
        self.count, self.period = count, period
        self.starts: deque[float] = deque(starts, maxlen=count)

    def start(self, at: float) -> None:
        self.starts.append(at)

    def room(self, rate: Rate, now: float) -> int:
        """How many more may start at `now` under `rate`."""
        starts = self.starts  # oldest first: those after `since` are a suffix
        inside = len(starts) - bisect_right(starts, now - rate.period)
        return max(0, rate.count - inside)

    def opens_at(self, rate: Rate, extra: int = 0) -> float:
        """When a start is next allowed, if the window is full now."""
        starts = self.starts
        if len(starts) + extra < rate.count:
            return float("-inf")
        return starts[len(starts) + extra - rate.count] + rate.period


class Budget:
    """What one lease decision may still start: room per rate key (the queue's
    included) and holders per concurrency key, spent as jobs are chosen."""

    __slots__ = ("_holders", "_in_use", "_limits", "_now", "_rooms", "_windows")

    def __init__(self, limits: Limits, windows: Mapping[str, Window],
                 in_use: Mapping[str, int], now: float) -> None:
        self._limits, self._windows, self._in_use, self._now = limits, windows, in_use, now
        self._rooms: dict[str, int] = {}
        self._holders: dict[str, int] = {}

    def _room(self, key: str) -> int:
        room = self._rooms.get(key)
        if room is None:
            rate = self._limits.rates.get(key)
            window = self._windows.get(key)
            if rate is None:
                room = 1 << 62
            elif window is None:
                room = rate.count
            else:  # Window.room, inlined: once per rate key of every limited lease
                starts = window.starts
                room = rate.count - len(starts) + bisect_right(starts, self._now - rate.period)
                room = room if room > 0 else 0
            self._rooms[key] = room
        return room

    def _free(self, key: str) -> int:
        free = self._holders.get(key)
        if free is None:
            declared = self._limits.concurrency
            limit = declared.get(key)  # a declared name is its own key, unless computed
            if limit is None and _SEPARATOR in key:
                limit = declared.get(family(key))
            free = 1 << 62 if limit is None else limit - self._in_use.get(key, 0)
            self._holders[key] = free
        return free

    def room_for(self, keys: JobKeys | None) -> int:
        """How many jobs of `keys` may start now (the queue's limit included)."""
        room = self._room(QUEUE_KEY) if self._limits.queue_rate is not None else 1 << 62
        if keys is not None:
            rate_key, concurrency_key = keys
            if rate_key is not None:
                rate_room = self._room(rate_key)
                room = rate_room if rate_room < room else room
            if concurrency_key is not None:
                free = self._free(concurrency_key)
                room = free if free < room else room
        return room if room > 0 else 0

    def allows(self, keys: JobKeys | None) -> bool:
        """Whether a job of `keys` may start now (the queue's limit included)."""
        return self.room_for(keys) > 0

    def take(self, keys: JobKeys | None) -> None:
        """A job of `keys` starts (allows() said it may)."""
        if self._limits.queue_rate is not None:
            self._rooms[QUEUE_KEY] = self._room(QUEUE_KEY) - 1
        if keys is not None:
            if keys[0] is not None:
                self._rooms[keys[0]] = self._room(keys[0]) - 1
            if keys[1] is not None:
                self._holders[keys[1]] = self._free(keys[1]) - 1

    def opens_at(self, keys: JobKeys | None) -> float | None:
        """When a job of `keys`, held back now, may start: a time, or None when only a
        holder's finishing frees it (its ack wakes the workers)."""
        if keys is not None and keys[1] is not None and self._free(keys[1]) <= 0:
            return None
        times = [float("-inf")]
        for key in ((QUEUE_KEY,) if self._limits.queue_rate is not None else ()) + (
                (keys[0],) if keys is not None and keys[0] is not None else ()):
            rate, window = self._limits.rates.get(key), self._windows.get(key)
            if rate is not None and window is not None and self._room(key) <= 0:
                times.append(window.opens_at(rate))
        return max(times)


@dataclass(frozen=True, slots=True)
class KeyUse:
    """One limit key's use now (`Queue.limit_use()`, the dashboard's limits view)."""

    kind: str  # "rate" or "concurrency"
    key: str  # the rate key ("": the queue's own) or the concurrency key's declared name
    value: str | None  # a concurrency key computed by a function: its value for these jobs
    used: int  # rate: starts in the window ending now; concurrency: jobs leased now
    # The count or holders at once: this process's declaration, else (a concurrency key)
    # the cap its latest unfinished job was enqueued with; None: neither.
    limit: int | None
    period: float | None  # a rate's window, in seconds
    opens_at: float | None  # a full rate window: when a start is next allowed


def latest_caps(capped: Iterable[tuple[int, str, int]]) -> dict[str, int]:
    """Each concurrency key's stored cap, from the (enqueue order, key, cap) of the jobs
    that count (unfinished ones with a cap): the most recently enqueued one's."""
    return {key: cap for _, key, cap in sorted(capped)}


def key_use(limits: Limits, windows: Mapping[str, Window], in_use: Mapping[str, int],
            now: float, caps: Mapping[str, int] | None = None) -> list[KeyUse]:
    """Each rate key's use (declared here, or with a window in storage: its limit as last
    recorded) and each concurrency key's (declared, or held now; a key not declared here
    shows its stored cap from `caps`, concurrency key -> the cap the latest pending,
    waiting or leased job of the key was enqueued with), by kind then key."""
    uses: list[KeyUse] = []
    for key in sorted({*limits.rates, *windows}):
        window = windows.get(key)
        rate = limits.rates.get(key) or (
            None if window is None else Rate(window.count, window.period))
        if rate is None:
            continue
        used = 0 if window is None else rate.count - window.room(rate, now)
        opens = window.opens_at(rate) if window is not None and used >= rate.count else None
        uses.append(KeyUse("rate", key, None, used, rate.count, rate.period, opens))
    held = {key: n for key, n in in_use.items() if n > 0}
    for name in sorted(set(limits.concurrency) - {family(key) for key in held}):
        uses.append(KeyUse("concurrency", name, None, 0, limits.concurrency[name], None, None))
    for key in sorted(held):
        name, _, value = key.partition(_SEPARATOR)
        limit = limits.concurrency.get(name)
        if limit is None and caps:
            limit = caps.get(key)
        uses.append(KeyUse("concurrency", name, value if _SEPARATOR in key else None,
                           held[key], limit, None, None))
    uses.sort(key=lambda use: (use.kind != "rate", use.key, use.value or ""))
    return uses
