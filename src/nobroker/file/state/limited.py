"""The limited jobs: their keys, a due index per key, holders, and rate windows.

What it owns, beside the job table (the state keeps one, `QueueState.limited`):
- each live job's limit keys, from its ENQUEUE (or snapshot JOB) record's
  "rk" (rate key) and "ck" (concurrency key), by seq (the fields themselves
  are limitfields.py's);
- a due index (due.DueJobs: a FIFO lane of the jobs that came in due order,
  flagged GROUPED, and heaps for the rest) per pair of keys, so that a lease
  skips a saturated key in one step, whatever its backlog: a limited pending
  job sits in its keys' index and never in the table's own;
- the cap each live job's ENQUEUE carried ("cc"), shown where the key is
  not declared (stored_caps);
- how many jobs of each concurrency key are leased now;
- a rate window (limits.Window) per rate key a LIMIT record declared: the
  times of the latest LEASE records of the key's jobs ("" is the queue's,
  every lease counts), at most the declared count of them.

The state calls `after` once a record changed a limited job (and for every
LEASE while a window exists), and `adopt` for a new job with keys; the table
puts every pending job in its own index, so `adopt` and `after` take a
limited one out again (set_code's move out of its lane, then drop). The
questions (`ready`, `next_wakeup`) take the limits the caller declared:
the configuration is code, the counts are the log's. Pure: no os, time,
random or threads.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Sequence
from typing import Any, Final

from ...limit_parking import Parking
from ...limits import (
    QUEUE_KEY,
    Budget,
    JobKeys,
    Limits,
    Rate,
    Window,
    family,
    latest_caps,
)
from ...window_copies import CopiedWindow, merged_window
from ..log.records import (
    CONCURRENCY_CAP,
    CONCURRENCY_KEY,
    LIMIT_COUNT,
    PERIOD,
    RATE_KEY,
    STARTS,
    TIME,
    Record,
    RecordType,
    ReplayError,
)
from .batch import Batch
from .due import GROUPED, DueJobs
from .jobtable import JobTable
from .limitfields import record_cap, record_keys
from .vocabulary import DEAD, LEASED, PENDING, WAITING, Entry

__all__ = ["LimitedJobs"]

_LIVE: Final = (PENDING, LEASED, DEAD, WAITING)
_HOLDING: Final = (PENDING, LEASED, WAITING)  # states whose stored cap limit_use shows


class LimitedJobs:
    """The limited jobs of one replay state (see the module doc)."""

    def __init__(self) -> None:
        self.keys: dict[int, JobKeys] = {}  # seq -> its keys, for live limited jobs
        # seq -> the cap its ENQUEUE carried ("cc"), for live jobs with one: shown to a
        # process that did not declare the key (stored_caps), never enforced.
        self.caps: dict[int, int] = {}
        self.groups: dict[JobKeys, DueJobs] = {}  # keys -> their pending jobs, due
        self._members: dict[JobKeys, int] = {}  # keys -> live jobs holding them
        self.in_use: dict[str, int] = {}  # concurrency key -> jobs leased now
        self.windows: dict[str, Window] = {}  # rate key -> its latest starts
        # The groups a lease looks at: not those whose concurrency key is full (a cache).
        self.parking = Parking()
        # Rate limits the windows were last found to match (declare_windows), until a
        # LIMIT record changes them: a lease under the same ones need not look again.
        self._matched: dict[str, Rate] | None = None

    def __bool__(self) -> bool:
        return bool(self.keys or self.windows)

    # -- applying records ---------------------------------------------------

    def adopt(self, table: JobTable, slot: int, keys: JobKeys, cap: int | None = None
              ) -> None:
        """A job just added with `keys` (pending, waiting or, from a snapshot, leased
        or dead) and its concurrency key's `cap`: from now on only its keys' index
        holds it while it is pending."""
        seq = table.seqs[slot]
        self.keys[seq] = keys
        if cap is not None:
            self.caps[seq] = cap
        self._members[keys] = self._members.get(keys, 0) + 1
        code = table.code[slot]
        if code == PENDING:
            self._take(table, slot, seq, keys, fresh=True)
        elif code == LEASED and keys[1] is not None:
            self.in_use[keys[1]] = self.in_use.get(keys[1], 0) + 1

    def _take(self, table: JobTable, slot: int, seq: int, keys: JobKeys,
              fresh: bool = False) -> None:
        """Pending job `slot` out of the table's index (its lane, its heaps) into its
        keys' own: a `fresh` one (just added) into the group's lane if it keeps the
        lane in due order (FIFO, as the table's own lanes: no heap), else its heap."""
        table.set_code(slot, PENDING)  # out of its lane: pushed on the table's heap...
        table.due.drop(seq)  # ...where it is stale at once
        group = self.groups.get(keys)
        if group is None:
            group = self.groups[keys] = DueJobs(GROUPED)
            self.parking.add(keys)
        flags, at = table.flags[slot], table.available_at[slot]
        if fresh and not flags & GROUPED and group.enter_lane(seq, table.priority[slot], at):
            table.flags[slot] = flags | GROUPED  # valid in the lane while pending
        else:
            group.push(seq, at)

    def after(self, table: JobTable, slot: int, before: int, lease: Record | None,
              offset: int) -> None:
        """A record (at `offset`) changed the job at `slot` (a hole now if it went),
        which was in state `before` (`lease`: the record, if it was a LEASE). Every
        record of a limited job passes here, so it is written for speed."""
        seq = table.seqs[slot]
        keys = self.keys.get(seq)
        if lease is not None and self.windows:  # a start, in its windows
            at = lease.get(TIME)
            if type(at) is not float:
                raise ReplayError(offset, f"a lease without its time {at!r}, under a rate limit")
            windows = self.windows
            if QUEUE_KEY in windows:
                windows[QUEUE_KEY].start(at)
            if keys is not None and keys[0] in windows:
                windows[keys[0]].start(at)
        if keys is None:
            return
        after = table.code[slot]
        holder = keys[1]
        if holder is not None and (before == LEASED) != (after == LEASED):
            in_use = self.in_use
            if after == LEASED:
                in_use[holder] = in_use.get(holder, 0) + 1
            else:
                held = in_use[holder] - 1
                if held:
                    in_use[holder] = held
                else:
                    del in_use[holder]
                if self.parking.by_key:  # a slot of the key is free: its groups come back
                    self.parking.freed(holder)
        if before == PENDING:
            flags = table.flags[slot]
            if flags & GROUPED:  # in its group's lane: the entry is stale from now on
                table.flags[slot] = flags & ~GROUPED & 0xFF
            elif after != PENDING:  # in its group's heaps
                self.groups[keys].drop(seq)
        if after == PENDING:
            self._take(table, slot, seq, keys)
        elif after not in _LIVE:  # finished or gone: forgotten
            self._forget(seq, keys)

    def _forget(self, seq: int, keys: JobKeys) -> None:
        del self.keys[seq]
        if self.caps:
            self.caps.pop(seq, None)
        left = self._members[keys] - 1
        if left:
            self._members[keys] = left
        else:  # the last job of these keys: their index goes
            del self._members[keys]
            if self.groups.pop(keys, None) is not None:
                self.parking.remove(keys)

    def purged(self, table: JobTable) -> None:
        """PURGE removed every pending job, theirs included."""
        for seq, keys in list(self.keys.items()):
            if table.slot(seq) < 0:
                self._forget(seq, keys)
        for group in self.groups.values():
            group.clear_pending()

    def declare_windows(self, batch: Batch, limits: Limits) -> None:
        """LIMIT records for the rate limits of `limits` the log holds otherwise or not
        at all, so that replay keeps their windows (the starts a window counts)."""
        if limits.rates == self._matched:
            return
        declared = False
        for key, rate in limits.rates.items():
            window = self.windows.get(key)
            if window is None or (window.count, window.period) != (rate.count, rate.period):
                batch.add(RecordType.LIMIT, {RATE_KEY: key, LIMIT_COUNT: rate.count,
                                             PERIOD: float(rate.period)})
                declared = True
        if not declared:
            self._matched = dict(limits.rates)

    def declare(self, rec: Record, offset: int) -> None:
        """A LIMIT record: rate key "rk" keeps its latest "lim" starts (those in "st",
        a snapshot's, first), its window "per" seconds long."""
        key, count, period = rec.get(RATE_KEY), rec.get(LIMIT_COUNT), rec.get(PERIOD)
        starts = rec.get(STARTS, None)
        if (type(key) is not str or type(count) is not int or not 1 <= count <= 1 << 20
                or type(period) is not float or not period > 0
                or (starts is not None and (type(starts) is not list
                                            or any(type(at) is not float for at in starts)))):
            raise ReplayError(offset, f"bad LIMIT record {rec!r}")
        self._matched = None
        old = self.windows.get(key)
        kept = old.starts if old is not None and starts is None else (starts or ())
        self.windows[key] = Window(count, period, kept)

    # -- questions ----------------------------------------------------------

    def keys_of(self, seq: int) -> JobKeys | None:
        return self.keys.get(seq)

    def cap_of(self, seq: int) -> int | None:
        """The cap job `seq`'s ENQUEUE carried, if any."""
        return self.caps.get(seq)

    def stored_caps(self, table: JobTable) -> dict[str, int]:
        """Each concurrency key's cap as the most recently enqueued job of the key still
        pending, waiting or leased carried it (keys none carried one are left out)."""
        return latest_caps((seq, key, cap) for seq, cap in self.caps.items()
                           for key, slot in ((self.keys[seq][1], table.slot(seq)),)
                           if key is not None and slot >= 0 and table.code[slot] in _HOLDING)

    def ready(self, table: JobTable, now: float, count: int, limits: Limits) -> list[Entry]:
        """Up to `count` leasable jobs within `limits` (highest priority first, FIFO
        within one): the table's unlimited ones and those of each key with room,
        never looking at a saturated key's jobs, nor (Parking) at the groups of a
        concurrency key found full before, until a holder of it lets go."""
        parking = self.parking
        parking.asked_under(limits)
        budget = Budget(limits, self.windows, self.in_use, now)
        due = table.due
        sources: list[tuple[JobKeys | None, list[Entry]]] = []
        if due.holds_any():
            unlimited = due.ready(table, now, count)
            if unlimited:
                sources.append((None, unlimited))
        for keys in list(parking.active):
            room = budget.room_for(keys)
            if room > 0:
                entries = self.groups[keys].ready(table, now, count if count < room else room)
                if entries:
                    sources.append((keys, entries))
            else:
                parking.park_if_full(keys, limits, self.in_use)
        if len(sources) == 1:  # the usual lease: one group (or the table) has due jobs
            source, entries = sources[0]
            return entries if source is not None else entries[:budget.room_for(None)]
        found = sorted(((keys, entry) for keys, entries in sources for entry in entries),
                       key=lambda item: (-item[1].priority, item[1].seq))
        chosen: list[Entry] = []  # best first across them, as one index would give them
        for job_keys, entry in found:
            if len(chosen) == count:
                break
            if budget.allows(job_keys):
                budget.take(job_keys)
                chosen.append(entry)
        return chosen

    def next_wakeup(self, table: JobTable, limits: Limits, now: float) -> float | None:
        """Earliest moment a job may become leasable within `limits`: as
        QueueState.next_wakeup, each key's jobs no sooner than its window allows,
        a key whose holders are all busy left to their acks' wake-ups."""
        self.parking.asked_under(limits)
        budget = Budget(limits, self.windows, self.in_use, now)
        times: list[float] = []
        unlimited = table.due.next_wakeup(table)
        if unlimited is not None:
            opens = budget.opens_at(None)
            times.append(unlimited if opens is None else max(unlimited, opens))
        for keys in self.parking.active:  # a parked group waits for an ack's wake-up
            due = self.groups[keys].next_wakeup(table)
            opens = budget.opens_at(keys)
            if due is not None and opens is not None:
                times.append(max(due, opens))
        return min(times) if times else None

    def frees(self, job_id: str, table: JobTable, limits: Limits | None = None) -> int:
        """1 if job `job_id`, leased, holds a concurrency key whose finishing may let
        another job of the key start (idle workers are woken), else 0: not while the
        key has room under `limits` (nobody declaring them waits for it then)."""
        seq = table.held.get(job_id) if self.keys else None
        keys = None if seq is None else self.keys.get(seq)
        if keys is None or keys[1] is None:
            return 0
        limit = None if limits is None else limits.concurrency.get(family(keys[1]))
        if limit is None:  # not declared here: the cap its enqueuer declared, if any
            limit = self.caps.get(seq) if self.caps else None  # type: ignore[arg-type]
        return int(limit is None or self.in_use.get(keys[1], 0) >= limit)

    def columns(self, seqs: Sequence[int]) -> dict[str, list[list[Any]]]:
        """A checkpoint's part (checkpoint.py): each limited job's keys by its index in
        the columns' `seqs` (enqueue order), every window with its starts, and the caps."""
        columns: dict[str, list[list[Any]]] = {
            "keys": [[bisect_left(seqs, seq), *keys] for seq, keys in sorted(self.keys.items())],
            "windows": [[key, w.count, w.period, list(w.starts)]
                        for key, w in self.windows.items()]}
        if self.caps:  # an additive key (NBCKPT05): [index, cap] of jobs with a cap
            columns["caps"] = [[bisect_left(seqs, seq), cap]
                               for seq, cap in sorted(self.caps.items())]
        return columns

    def restore(self, table: JobTable, columns: dict[str, list[list[Any]]]) -> None:
        """What `columns` saved, into a state just restored from the same columns (a
        job's index is its slot); ReplayError if it does not fit them."""
        caps = {index: cap for index, cap in columns.get("caps", [])}  # absent: none
        for index, rate_key, concurrency_key in columns["keys"]:
            keys = record_keys({RATE_KEY: rate_key, CONCURRENCY_KEY: concurrency_key}, 0)
            if keys is None or type(index) is not int or not 0 <= index < len(table.seqs):
                raise ReplayError(0, f"bad limited job {index!r} in a checkpoint")
            cap = caps.pop(index, None)
            if cap is not None and concurrency_key is not None:
                record_cap({CONCURRENCY_CAP: cap, CONCURRENCY_KEY: concurrency_key}, 0)
            elif cap is not None:
                raise ReplayError(0, f"a cap for job {index!r} without a concurrency key")
            self.adopt(table, index, keys, cap)
        if caps:
            raise ReplayError(0, f"a cap for job {next(iter(caps))!r}, not limited, in a "
                                 "checkpoint")
        for key, count, period, starts in columns["windows"]:
            self.declare({RATE_KEY: key, LIMIT_COUNT: count, PERIOD: period,
                          STARTS: starts}, 0)

    def plan_copies(self, batch: Batch, windows: Sequence[CopiedWindow]) -> None:
        """LIMIT records that merge windows copied from another queue (nobroker migrate)
        into these (window_copies.merged_window), their starts in "st": replay keeps
        them as it keeps a snapshot's, no clock read."""
        for copy in windows:
            merged = merged_window(self.windows.get(copy.key), copy)
            batch.add(RecordType.LIMIT, {RATE_KEY: copy.key, LIMIT_COUNT: merged.count,
                                         PERIOD: float(merged.period),
                                         STARTS: [float(at) for at in merged.starts]})

    def window_records(self) -> Iterator[Record]:
        """LIMIT records that declare every window with its starts (a snapshot's)."""
        for key, window in self.windows.items():
            yield {RATE_KEY: key, LIMIT_COUNT: window.count, PERIOD: window.period,
                   STARTS: list(window.starts)}

    def fingerprint(self) -> tuple[object, ...]:
        return (tuple(sorted((k, v) for k, v in self.in_use.items())),
                tuple(sorted((key, w.count, w.period, tuple(w.starts))
                             for key, w in self.windows.items())),
                tuple(sorted(self.caps.items())))
