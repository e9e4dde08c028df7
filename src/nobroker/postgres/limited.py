"""Rate limits and concurrency limits on PostgreSQL: the limited lease, and its wait.

A process that declared limits (nobroker.limits: the configuration is code)
leases with one statement, as any other process does: limited_lease.sql, or
limited_ack_and_lease.sql with an ack. Each takes expired leases back first
(a killed holder's slot is free again from its lease's deadline), then calls
nb_limited_lease (sql/migrations/0008; its body since 0009, in fewer
statements, since 0010, linear in the pairs it walks, a lease of one job
in one statement when the best is within its limits, since 0014 blind to
the pairs of the keys it found full (table limit_pairs), and since 0015 past
every pair of a rate key whose window is full in one step), given the limits
this process declared (`declared_params`): under a lock on the queue's row in
`queues`, held to the commit, it reads the holders of each concurrency key it meets
and the latest starts of each declared rate key (a ring of rows per key,
tables `limit_windows` and `limit_starts`), steps through the pairs of keys
with due jobs, chooses as limits.Budget does on files and memory://, leases
the chosen rows and writes their starts. A process that declared no rate
limit sends unrated_lease.sql and unrated_ack_and_lease.sql instead, which
call nb_limited_lease_unrated (migrations/0012): under the same lock, a lease
of one job tries the best due job in one small statement (its key's holders
counted), and calls nb_limited_lease when that job's key is full, a waiting
job is due or more jobs are wanted. nb_limited_lease's own first try costs
more for the CTEs of its rate windows than for the work they do (1.3x an
unlimited ack_and_lease where this one is 1.06x, fsync off). So a process that
declared a rate limit calls nb_limited_lease_granted (migrations/0016; 0013 had
it without grants) in limited_lease.sql and limited_ack_and_lease.sql: the same
small first try, with the one rate window the job's start counts in read and its
start written, and nb_limited_lease for anything else (two windows, one not
written yet or full). Its ack_and_lease asks for more starts ahead, and uses
them while they last with no lock and no window written (grants.py).

Why it is exact across processes and hosts: every limited lease of a queue
takes the same row lock before it reads, and the function's reads (VOLATILE,
READ COMMITTED) each take a snapshot after it, which holds everything the
previous holder committed (its leases and windows); so the decisions happen
one after the other, each seeing all before it, at times in that order. A
lease with a start granted ahead takes no lock: that start was decided, and
recorded at the latest time it may be used, under the lock when it was
granted (migrations/0016 says why every window stays within its count).
Finishing (ack, nack) takes no lock: a slot it frees is seen by the next
lease, never counted twice. A process that declared no limit leases with the
single lease statement, as before, and is not limited by them (as on the
other backends).

Waiting: `due` says when a ready job may next start within the limits (a
window's opening, a lease's deadline, a delayed job's time), or None when
only a holder's ack frees a slot; the ack's NOTIFY wakes the idle workers then
(none when its ack_and_lease took a job of that key again: the slot is held).
It and `use` read the state in Python (limited_state.sql, limits.Budget); the
wait reads the best due job of each pair the walk would meet (not the parked
ones) with its key's holders (limited_candidates.sql), so that beside many
full keys it reads a bounded number of them, as the lease does.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import replace
from functools import lru_cache
from typing import Any

import psycopg

from ..limits import QUEUE_KEY, Budget, JobKeys, KeyUse, Limits, Window, family, key_use
from .grants import Grants
from .rows import lease_rows
from .statements import Statements

__all__ = ["LimitedLeases", "key_params", "keys_params", "keys_of_columns", "columns_of",
           "declared_params"]

Conn = psycopg.Connection[tuple[Any, ...]]
_ESCAPED = re.compile(r"\\(.)", re.DOTALL)  # a key's escaped NUL (\0) or backslash (\\)


def _stored(key: str | None) -> str:
    """A key as its column holds it: '' for none, and the NUL that separates a
    computed key's value (limits.py) escaped, as PostgreSQL's text has no NUL."""
    return "" if key is None else key.replace("\\", "\\\\").replace("\x00", "\\0")


def _joined(name: str, value: str | None) -> str:
    """A concurrency key from KeyUse's name and value (limits.family splits it)."""
    return name if value is None else f"{name}\x00{value}"


def _read(stored: str) -> str | None:
    if not stored:
        return None
    return _ESCAPED.sub(lambda m: "\x00" if m.group(1) == "0" else m.group(1), stored)


def key_params(limits: Limits, payload: Any,
               copied: tuple[JobKeys | None, int | None] | None = None) -> dict[str, Any]:
    """The bound keys (`rk`, `ck`: '' for none) of a job with `payload`, computed now,
    and `cc`, the cap this process declared for its concurrency key (None: none),
    stored with it for limit_use in processes that did not declare the key; or, for a
    job `copied` from another queue (nobroker migrate), the keys and cap it had."""
    if copied is not None:
        rate_key, concurrency_key = copied[0] or (None, None)
        return {"rk": _stored(rate_key), "ck": _stored(concurrency_key), "cc": copied[1]}
    rate_key, concurrency_key = limits.keys_of(payload) or (None, None)
    cap = None if concurrency_key is None else limits.concurrency.get(family(concurrency_key))
    return {"rk": _stored(rate_key), "ck": _stored(concurrency_key), "cc": cap}


def keys_params(limits: Limits, payloads: Sequence[Any],
                copied: Sequence[tuple[JobKeys | None, int | None]] | None = None
                ) -> dict[str, list[Any]]:
    """`rks`, `cks`, `ccs`: the keys and caps of each job of a batch, in order (or those
    `copied` gives each, as key_params takes them)."""
    keys = [key_params(limits, payload, None if copied is None else copied[i])
            for i, payload in enumerate(payloads)]
    return {"rks": [k["rk"] for k in keys], "cks": [k["ck"] for k in keys],
            "ccs": [k["cc"] for k in keys]}


def columns_of(keys: JobKeys | None) -> tuple[str, str]:
    """The (rate_key, conc_key) columns of a job with `keys` (keys_of_columns reads
    them back)."""
    return (_stored(keys[0]), _stored(keys[1])) if keys else ("", "")


def keys_of_columns(rate_key: str, concurrency_key: str) -> JobKeys | None:
    """The keys of a job from its columns."""
    if not rate_key and not concurrency_key:
        return None
    return _read(rate_key), _read(concurrency_key)


def declared_params(limits: Limits) -> dict[str, str]:
    """The limits this process declared, as nb_limited_lease takes them (migrations/0008):
    rate keys (as limit_windows names them, and stored as jobs hold them) with their
    counts and periods; concurrency families (stored) with their caps. Each an array
    literal, made once per declaration (`_literals`)."""
    return _literals(tuple((k, r.count, r.period) for k, r in sorted(limits.rates.items())),
                     tuple(sorted(limits.concurrency.items())))


@lru_cache(maxsize=64)
def _literals(rates: tuple[tuple[str, int, float], ...],
              families: tuple[tuple[str, int], ...]) -> dict[str, str]:
    return {"rks": _array(k for k, _, _ in rates),
            "rss": _array(_stored(k) for k, _, _ in rates),
            "rcs": _array(c for _, c, _ in rates),
            "rps": _array(float(p) for _, _, p in rates),
            "fs": _array(_stored(f) for f, _ in families),
            "caps": _array(c for _, c in families)}


def _array(items: Iterable[str | int | float]) -> str:
    """A PostgreSQL array literal (each string quoted, its backslashes and quotes
    escaped; a float as repr writes it, which reads back exactly). Sent as one text
    parameter: psycopg adapts six lists for each limited lease in about 90 us, a
    tenth of an unlimited ack_and_lease's round trip."""
    return "{" + ",".join(
        '"' + item.replace("\\", "\\\\").replace('"', '\\"') + '"' if isinstance(item, str)
        else repr(item) for item in items) + "}"


class _State:
    """What a limited wait or limit_use reads (sql/queries/limited_state.sql): with
    `held`, every held concurrency key's holders and cap (limit_use's; a wait reads
    its candidates' keys alone, with them)."""

    def __init__(self, conn: Conn, sql: Statements, params: dict[str, Any],
                 limits: Limits, held: bool = True) -> None:
        self.now = 0.0
        self.paused = False
        self.next: float | None = None
        self.in_use: dict[str, int] = {}
        self.windows: dict[str, Window] = {}
        self.caps: dict[str, int] = {}  # a held key's cap, as its latest live job carries it
        for kind, key, n, starts, at, cap in conn.execute(
                sql.limited_state, {**params, "keys": list(limits.rates), "held": held}):
            if kind == "now":
                self.now = at
            elif kind == "next":
                self.paused, self.next = bool(n), at
            elif kind == "held":
                self.in_use[_read(key) or ""] = n
                if cap is not None:
                    self.caps[_read(key) or ""] = cap
            elif key in limits.rates:
                rate = limits.rates[key]
                self.windows[key] = Window(rate.count, rate.period, starts)
        # Windows are checked at now, starts recorded later included (a start granted
        # ahead, migrations/0016, or a clock stepped back): they count as made.


class LimitedLeases:
    """The limited lease and wait of one PostgresBackend (see the module doc)."""

    def __init__(self, sql: Statements, limits: Limits) -> None:
        self._sql, self._limits = sql, limits
        self.grants = Grants()  # starts of a rate window granted ahead (grants.py)

    def lease(self, conn: Conn, params: dict[str, Any], count: int
              ) -> tuple[list[tuple[Any, ...]], list[str]]:
        """Up to `count` jobs leased within the limits: their rows (job_columns), and
        the ids of the jobs whose expired leases this dead-lettered (rows.lease_rows)."""
        sql = self._sql.limited_lease if self._limits.rates else self._sql.unrated_lease
        return lease_rows(conn.execute(sql, {
            **params, "n": max(count, 0), **declared_params(self._limits)}).fetchall())

    def use(self, conn: Conn, params: dict[str, Any]) -> list[KeyUse]:
        """Each key's use now (limits.key_use): the rate keys this process declared; a
        concurrency key it did not declare, with the cap its latest live job carries."""
        state = _State(conn, self._sql, params, self._limits)
        uses = key_use(self._limits, state.windows, state.in_use, state.now)
        return [replace(use, limit=state.caps.get(_joined(use.key, use.value)))
                if use.kind == "concurrency" and use.limit is None else use for use in uses]

    def due(self, conn: Conn, params: dict[str, Any]) -> tuple[float, float | None]:
        """(now, when a job may next be leased within the limits, or None: nothing
        will be leasable until a write, or the queue is paused)."""
        sql, limits = self._sql, self._limits
        state = _State(conn, sql, params, limits, held=False)
        if state.paused:
            return state.now, None
        times = [] if state.next is None else [state.next]
        # A full window's opening is the soonest any job of its key may start (at
        # worst the worker wakes early); its pairs are not read (the walk steps past
        # them too), and no pair is when the queue's own window is full.
        full = [key for key, window in state.windows.items()
                if window.room(limits.rates[key], state.now) == 0]
        times += [state.windows[key].opens_at(limits.rates[key]) for key in full]
        if QUEUE_KEY in full:
            return state.now, max(min(times), state.now)
        rows = conn.execute(sql.limited_candidates, {
            **params, "n": 1, "full_rates": [_stored(key) for key in full],
            "full_conc": []}).fetchall()
        in_use = {_read(row[4]) or "": row[5] for row in rows if row[5] is not None}
        budget = Budget(limits, state.windows, in_use, state.now)
        for row in rows:
            opens = budget.opens_at(keys_of_columns(row[3], row[4]))
            if opens is not None:
                times.append(max(opens, state.now))
        return state.now, min(times) if times else None
