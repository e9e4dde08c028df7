"""Rate limits and concurrency limits on PostgreSQL: the limited lease, and its wait.

A process that declared limits (nobroker.limits: the configuration is code)
leases in one transaction of several statements, under a lock on its queue's
row in `queues` (sql/queries/limited_lock.sql, held to the commit):

1. expired leases are taken back first (the lease statement with n = 0), so a
   killed holder's slot is free again from its lease's deadline;
2. the state, at a time read after the lock: the holders of each concurrency
   key (its leased rows), the latest starts of each declared rate key (table
   `limit_windows`);
3. the candidates: the best due jobs of each pair of keys not saturated
   (sql/queries/limited_candidates.sql: a saturated pair is never read);
4. the choice, by the same `Budget` the file and memory backends use;
5. the chosen rows leased (lease_chosen.sql) and their starts written.

Why it is exact across processes and hosts: every limited lease of a queue
takes the same row lock before it reads, and READ COMMITTED gives each
statement after the lock a snapshot that holds everything the previous holder
committed (its leases and windows); so the decisions happen one after the
other, each seeing all before it, at times in that order. Finishing (ack,
nack) takes no lock: a slot it frees is seen by the next lease, never counted
twice. A process that declared no limit leases with the single lease
statement, as before, and is not limited by them (as on the other backends).

Waiting: `due` says when a ready job may next start within the limits (a
window's opening, a lease's deadline, a delayed job's time), or None when
only a holder's ack frees a slot; the ack's NOTIFY wakes the idle workers then.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import psycopg

from ..limits import QUEUE_KEY, Budget, JobKeys, KeyUse, Limits, Window, key_use
from .rows import lease_rows
from .statements import Statements

__all__ = ["LimitedLeases", "key_params", "keys_params", "keys_of_columns", "columns_of"]

Conn = psycopg.Connection[tuple[Any, ...]]
_ESCAPED = re.compile(r"\\(.)", re.DOTALL)  # a key's escaped NUL (\0) or backslash (\\)


def _stored(key: str | None) -> str:
    """A key as its column holds it: '' for none, and the NUL that separates a
    computed key's value (limits.py) escaped, as PostgreSQL's text has no NUL."""
    return "" if key is None else key.replace("\\", "\\\\").replace("\x00", "\\0")


def _read(stored: str) -> str | None:
    if not stored:
        return None
    return _ESCAPED.sub(lambda m: "\x00" if m.group(1) == "0" else m.group(1), stored)


def key_params(limits: Limits, payload: Any) -> dict[str, str]:
    """The bound keys (`rk`, `ck`: '' for none) of a job with `payload`, computed now."""
    rate_key, concurrency_key = limits.keys_of(payload) or (None, None)
    return {"rk": _stored(rate_key), "ck": _stored(concurrency_key)}


def keys_params(limits: Limits, payloads: Sequence[Any]) -> dict[str, list[str]]:
    """`rks`, `cks`: the keys of each job of a batch, in order."""
    keys = [key_params(limits, payload) for payload in payloads]
    return {"rks": [k["rk"] for k in keys], "cks": [k["ck"] for k in keys]}


def columns_of(keys: JobKeys | None) -> tuple[str, str]:
    """The (rate_key, conc_key) columns of a job with `keys` (keys_of_columns reads
    them back)."""
    return (_stored(keys[0]), _stored(keys[1])) if keys else ("", "")


def keys_of_columns(rate_key: str, concurrency_key: str) -> JobKeys | None:
    """The keys of a job from its columns."""
    if not rate_key and not concurrency_key:
        return None
    return _read(rate_key), _read(concurrency_key)


class _State:
    """What a limited lease or wait reads (sql/queries/limited_state.sql)."""

    def __init__(self, conn: Conn, sql: Statements, params: dict[str, Any],
                 limits: Limits) -> None:
        self.now = 0.0
        self.paused = False
        self.next: float | None = None
        self.in_use: dict[str, int] = {}
        self.windows: dict[str, Window] = {}
        for kind, key, n, starts, at in conn.execute(
                sql.limited_state, {**params, "keys": list(limits.rates)}):
            if kind == "now":
                self.now = at
            elif kind == "next":
                self.paused, self.next = bool(n), at
            elif kind == "held":
                self.in_use[_read(key) or ""] = n
            elif key in limits.rates:
                rate = limits.rates[key]
                self.windows[key] = Window(rate.count, rate.period, starts)
        # Never before a start already counted (a clock stepped back): kept in order.
        self.now = max([self.now, *(w.starts[-1] for w in self.windows.values() if w.starts)])
        self.budget = Budget(limits, self.windows, self.in_use, self.now)

    def candidates(self, conn: Conn, sql: Statements, params: dict[str, Any],
                   limits: Limits, count: int) -> list[tuple[str, JobKeys | None]]:
        """The due jobs of the pairs of keys with room, best first, with their keys."""
        budget = self.budget
        rows = conn.execute(sql.limited_candidates, {
            **params, "n": count,
            "full_rates": [_stored(k) for k in limits.rates
                           if k != QUEUE_KEY and not budget.allows((k, None))],
            "full_conc": [_stored(k) for k in self.in_use if not budget.allows((None, k))],
        }).fetchall()
        rows.sort(key=lambda row: (-row[1], row[2]))
        return [(row[0], keys_of_columns(row[3], row[4])) for row in rows]


class LimitedLeases:
    """The limited lease and wait of one PostgresBackend (see the module doc)."""

    def __init__(self, sql: Statements, limits: Limits) -> None:
        self._sql, self._limits = sql, limits

    def lease(self, conn: Conn, params: dict[str, Any], count: int
              ) -> tuple[list[tuple[Any, ...]], list[str]]:
        """Up to `count` jobs leased within the limits: their rows (job_columns), and
        the ids of the jobs whose expired leases this dead-lettered (rows.lease_rows)."""
        sql, limits = self._sql, self._limits
        with conn.transaction():
            conn.execute(sql.limited_lock, params)
            # Expired leases first: they free their slots.
            _, dead = lease_rows(conn.execute(sql.lease, {**params, "n": 0}).fetchall())
            state = _State(conn, sql, params, limits)
            params = {**params, "t": state.now}  # the lease's time: its starts' (_State)
            budget = state.budget
            if count <= 0 or not budget.allows(None):  # the queue's own window is full
                return [], dead
            chosen: dict[str, JobKeys | None] = {}
            for job_id, keys in state.candidates(conn, sql, params, limits, count):
                if len(chosen) < count and budget.allows(keys):
                    budget.take(keys)
                    chosen[job_id] = keys
            if not chosen:
                return [], dead
            rows, more = lease_rows(conn.execute(sql.lease_chosen, {
                **params, "ids": list(chosen), "n": len(chosen)}).fetchall())
            self._started(conn, params, state, [chosen[row[0]] for row in rows])
            return rows, dead + more

    def _started(self, conn: Conn, params: dict[str, Any], state: _State,
                 started: list[JobKeys | None]) -> None:
        """The starts of jobs just leased written into their rate keys' windows."""
        limits, windows = self._limits, state.windows
        changed: set[str] = set()
        for keys in started:
            for key in (QUEUE_KEY, None if keys is None else keys[0]):
                rate = None if key is None else limits.rates.get(key)
                if key is None or rate is None:
                    continue
                window = windows.get(key)
                if window is None or (window.count, window.period) != (rate.count, rate.period):
                    window = windows[key] = Window(rate.count, rate.period,
                                                   () if window is None else window.starts)
                window.start(state.now)
                changed.add(key)
        if changed:
            names = sorted(changed)
            conn.execute(self._sql.limited_windows, {
                **params, "keys": names,
                "starts": ["{" + ",".join(map(repr, windows[k].starts)) + "}" for k in names]})

    def use(self, conn: Conn, params: dict[str, Any]) -> list[KeyUse]:
        """Each key's use now (limits.key_use): the rate keys this process declared."""
        state = _State(conn, self._sql, params, self._limits)
        return key_use(self._limits, state.windows, state.in_use, state.now)

    def due(self, conn: Conn, params: dict[str, Any]) -> tuple[float, float | None]:
        """(now, when a job may next be leased within the limits, or None: nothing
        will be leasable until a write, or the queue is paused)."""
        sql, limits = self._sql, self._limits
        state = _State(conn, sql, params, limits)
        if state.paused:
            return state.now, None
        times = [] if state.next is None else [state.next]
        rows = conn.execute(sql.limited_candidates,
                            {**params, "n": 1, "full_rates": [], "full_conc": []}).fetchall()
        for row in rows:
            opens = state.budget.opens_at(keys_of_columns(row[3], row[4]))
            if opens is not None:
                times.append(max(opens, state.now))
        return state.now, min(times) if times else None
