"""Checking every crash state of a trace against the oracle (I1-I10, P2, E8).

Part of the crash-state explorer; the theory is in harness/explorer/__init__.py.
"""

from __future__ import annotations

import random
import time
from dataclasses import replace
from typing import Any

from .disk_model import _Choice, _Model, _State
from .driver import Call, Trace
from .frames import _complete_batches, _generation, _log_inodes, _scan_frames
from .opener import _Opener
from .recording import _LOG_NAME, QUEUE, Event, RecordingFS
from .report import ProfileStats, Report, Violation, _Outcome
from .strategies import Bounds, _byte_cuts, _choices


class _Explorer:
    def __init__(self, trace: Trace, root: str, bounds: Bounds, report: Report) -> None:
        self.trace = trace
        self.bounds = bounds
        self.report = report
        self.opener = _Opener(root, trace.queue_kwargs)
        self.root = root
        self.outcomes: dict[bytes, _Outcome] = {}
        self.rng = random.Random(bounds.seed)
        self.seen: set[tuple[str, bytes, tuple[int, int], tuple[int, int]]] = set()
        self._oracle()

    # -- the oracle ---------------------------------------------------------

    def _oracle(self) -> None:
        events, calls = self.trace.events, self.trace.calls
        n = len(events)
        zero = (0, 0)  # positions (batch, generation), as in Driver.history
        self.hi = [zero] * (n + 1)
        self.lo = [zero] * (n + 1)
        self.lo_windows = [zero] * (n + 1)  # there a compaction is not durable at return
        self.now = [0.0] * (n + 1)
        self.returned_at: dict[int, Call] = {}
        self.generation_of: dict[int, int] = {}
        by_end = {c.end: c for c in calls}
        hi = lo = lo_windows = zero
        now = 0.0
        logs = _log_inodes(events)
        for i, event in enumerate(events):
            if event.kind == "write" and event.ino in logs and event.offset == 0:
                found = _generation(event.data)
                if found is not None:
                    self.generation_of[event.ino] = found
            if event.kind == "write" and event.ino in logs and event.offset >= 16:
                generation = self.generation_of.get(event.ino, 0)
                for _, _, record in _scan_frames(event.data):
                    hi = max(hi, (record["b"], generation))
            elif event.kind == "begin":
                now = max(now, calls[event.call].now)
            elif event.kind == "end":
                call = by_end.get(i)
                if call is not None and call.outcome == "returned" and call.durable \
                        and call.batches:
                    lo = max(lo, max(call.batches))
                    if call.op not in ("compact", "open"):  # both flip generations
                        lo_windows = max(lo_windows, max(call.batches))
                    self.returned_at[i + 1] = call
            self.hi[i + 1], self.lo[i + 1], self.now[i + 1] = hi, lo, now
            self.lo_windows[i + 1] = lo_windows
        self.enqueue_many = [(max(c.batches), c.enqueued) for c in calls
                             if c.op in ("enqueue_many", "enqueue_graph") and c.batches
                             and c.enqueued]
        self.history = self.trace.history

    # -- driving ------------------------------------------------------------

    def run_profile(self, profile: str) -> None:
        started = time.perf_counter()
        stats = self.report.stats.setdefault(profile, ProfileStats())
        before_unique = len(self.outcomes)
        model = _Model(profile, {}, {})
        model.new_file_garbage = self.bounds.new_file_garbage
        if self.trace.initial:
            inos = {name: i + 1 for i, name in enumerate(sorted(self.trace.initial))}
            model = _Model(profile, inos,
                           {inos[n]: d for n, d in self.trace.initial.items()})
            model.new_file_garbage = self.bounds.new_file_garbage
        events = self.trace.events
        cache_stamp = -1
        cached: list[tuple[_Choice, _State, list[int]]] = []
        for c in range(len(events) + 1):
            if c:
                model.apply(events[c - 1])
            interesting = c == 0 or c == len(events) or events[c - 1].kind in (
                "write", "trunc", "fsync", "fsync_failed", "dirsync", "rename", "unlink",
                "create") or (c in self.returned_at)
            if interesting:
                if model.stamp != cache_stamp:
                    cache_stamp = model.stamp
                    cached = self._states(model, c)
                stats.crash_points += 1
                for choice, state, dropped in cached:
                    self._check(profile, c, choice, state, dropped, stats)
            # The write in flight at this crash point, cut short (process: kill -9).
            if profile == "process" and c < len(events) and events[c].kind == "write":
                event = events[c]
                for cut in _byte_cuts(event.data, self.bounds.byte_exhaustive):
                    choice = _Choice(f"E4 byte cut {cut}/{len(event.data)} of #{event.index}",
                                     cut=(event.ino, event.offset, event.data[:cut]))
                    state = model.build(choice, [], self.bounds.seed)
                    upto = self._batches_upto(event.data[:cut])
                    generation = self.generation_of.get(event.ino, 0)
                    self._check(profile, c, choice, state, [event.index], stats,
                                hi=max(self.hi[c], (upto, generation)))
        stats.unique += len(self.outcomes) - before_unique
        stats.seconds += time.perf_counter() - started

    @staticmethod
    def _batches_upto(data: bytes) -> int:
        frames = _scan_frames(data)
        return max((r["b"] for _, _, r in frames), default=0)

    def _states(self, model: _Model, c: int) -> list[tuple[_Choice, _State, list[int]]]:
        units = model.units() if model.profile != "process" else []
        out = []
        seen: set[bytes] = set()
        for choice in _choices(model, units, self.bounds, self.rng, model.profile == "weak"):
            state = model.build(choice, units, self.bounds.seed + c)
            if state.digest in seen:
                continue
            seen.add(state.digest)
            out.append((choice, state, model.dropped(choice, units)))
        return out

    def _check(self, profile: str, c: int, choice: _Choice, state: _State, dropped: list[int],
               stats: ProfileStats, hi: tuple[int, int] | None = None) -> None:
        lo = (self.lo_windows if profile == "windows" else self.lo)[c]
        hi = self.hi[c] if hi is None else hi
        key = (profile, state.digest, lo, hi)
        stats.states += 1
        if key in self.seen:
            return
        self.seen.add(key)
        outcome = self.outcomes.get(state.digest)
        if outcome is None:
            sampled = c in self.returned_at or self.rng.random() < self.bounds.continuation
            outcome = self.opener.open(state, self.now[c], sampled)
            self.outcomes[state.digest] = outcome
            if sampled and self.bounds.continuation > 0:
                self.report.continued_states += 1
            if outcome.repaired and self._compound_budget > 0:
                self._compound_budget -= 1
                self._compound(profile, c, choice, state, outcome)
        verdicts = self._verdicts(outcome, c, lo, hi)
        extra, self._lost_context = self._lost_context, ()
        for check, message in verdicts:
            self._violation(check, profile, c, choice, state, dropped, message,
                            extra if check in ("I2", "I3", "I4") else ())

    _compound_budget = 0

    def _verdicts(self, outcome: _Outcome, c: int, lo: tuple[int, int],
                  hi: tuple[int, int]) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = list(outcome.problems)
        if outcome.error is not None:
            out.append(("I6", f"opening raised {outcome.error}"))
            return out
        at = (outcome.last_batch, outcome.generation)
        at_persistence = c in self.returned_at
        if at < lo:
            lost = [call for call in self.trace.calls
                    if call.outcome == "returned" and call.batches and call.durable
                    and max(call.batches) > at and call.end < c]
            back = sorted({i for call in lost for i in call.acked} & set(outcome.jobs))
            check = "I4" if back else ("I2" if at_persistence else "I3")
            detail = f"acked job(s) {back} are back; " if back else ""
            out.append((check, f"{detail}recovered batch {at[0]} of generation {at[1]}, but "
                               f"calls up to {lo} had returned; lost: "
                               f"{'; '.join(call.describe() for call in lost[-3:])}"))
            if lost:  # how the last lost call wrote and synced, source lines included
                call = lost[-1]
                self._lost_context = tuple(
                    "lost call's " + e.describe() for e in self.trace.events[call.begin:call.end]
                    if e.kind in ("write", "fsync", "fsync_failed", "dirsync", "rename"))[-6:]
        elif at > hi:
            out.append(("I1", f"recovered batch {at[0]} of generation {at[1]}, but only "
                              f"{hi} was ever written: something appeared that never was"))
        else:
            expected = self.history.get(at)
            if expected is None or outcome.fingerprint not in expected:
                out.append(("I1", f"recovered state (batch {at[0]} of generation {at[1]}) is "
                                  f"not the replay of the history up to that batch" +
                            (" (no batch there in the history)" if expected is None else "")))
            elif at_persistence and at != hi:
                out.append(("I2", f"at a persistence point the state is {at}, "
                                  f"expected exactly {hi}"))
        for position, ids in self.enqueue_many:
            if position[0] - 1 <= at[0] <= position[0] or at > hi:
                present = [i for i in ids if i in outcome.jobs]
                if present and len(present) != len(ids):
                    out.append(("P2", f"enqueue_many/graph batch {position[0]} is torn: "
                                      f"{len(present)} of {len(ids)} jobs present"))
        return out

    _lost_context: tuple[str, ...] = ()

    def _violation(self, check: str, profile: str, c: int, choice: _Choice, state: _State,
                   dropped: list[int], message: str, extra: tuple[str, ...] = ()) -> None:
        self.report.total_violations += 1
        self.report.stats[profile].violations += 1
        if len(self.report.violations) >= 50:
            return
        events = self.trace.events
        context = []
        if c:
            context.append("crash after " + events[c - 1].describe())
        call_index = next((e.call for e in reversed(events[:c]) if e.call >= 0), -1)
        if call_index >= 0:
            context.append("during/after " + self.trace.calls[call_index].describe())
        sources = tuple(events[i].describe() for i in dropped[:8])
        context.extend(extra)
        self.report.violations.append(Violation(
            check, self.trace.name, profile, c, choice.label, message, state.listing(),
            sources, tuple(context), dict(state.files)))

    # -- I8: crash the recovery itself ----------------------------------------

    def _compound(self, profile: str, c: int, choice: _Choice, state: _State,
                  outcome: _Outcome) -> None:
        self.opener.materialise(state)
        fs = RecordingFS(self.opener.dir, adopt=True)
        initial = {name: bytes(fs.files[ino]) for name, ino in fs.names.items()}
        try:
            self.opener.queue(fs=fs).close()
        except Exception:
            return
        model = _Model("weak", {n: i + 1 for i, n in enumerate(sorted(initial))},
                       {i + 1: initial[n] for i, n in enumerate(sorted(initial))})
        # RecordingFS numbered the adopted inodes in sorted order too, so numbers agree.
        bounds = replace(self.bounds, strategies=frozenset({"E1", "E2", "E3", "E5"}))
        candidates: dict[bytes, tuple[Event, _Choice, _State, list[int]]] = {}
        for k, event in enumerate(fs.events):
            model.apply(event)
            units = model.units()
            for sub in _choices(model, units, bounds, self.rng, True):
                built = model.build(sub, units, k)
                candidates.setdefault(built.digest, (event, sub, built,
                                                     model.dropped(sub, units)))
        chosen = list(candidates.values())
        if len(chosen) > self.bounds.compound_states:
            chosen = self.rng.sample(chosen, self.bounds.compound_states)
        for event, sub, sub_state, dropped in chosen:
            self.report.compound_states += 1
            got = self.outcomes.get(sub_state.digest)
            if got is None:
                got = self.opener.open(sub_state, self.now[c], False)
                self.outcomes[sub_state.digest] = got
            if got.error or (got.fingerprint, got.last_batch) != (outcome.fingerprint,
                                                                  outcome.last_batch):
                what = got.error or f"state of batch {got.last_batch} instead of " \
                                    f"{outcome.last_batch}"
                self._violation("I8", profile, c, replace(
                    choice, label=f"{choice.label}; recovery crashed after "
                                  f"{event.describe()} ({sub.label})"),
                    sub_state, dropped, f"crash during recovery: {what}")

    # -- E8: bit rot in durable records -----------------------------------------

    def run_rot(self) -> None:
        model = _Model("process", {}, {})
        for event in self.trace.events:
            model.apply(event)
        final = model.build(_Choice("final"), [], 0)
        # Checkpoints cover damage below them by design; this probes the log's own checks.
        files = {n: d for n, d in final.files if not n.endswith(".ckpt")}
        names = sorted((n for n in files if _LOG_NAME.fullmatch(n)),
                       key=lambda n: int(_LOG_NAME.fullmatch(n).group(1)))  # type: ignore[union-attr]
        current = files.get(f"{QUEUE}.current")
        if current is not None and current.strip().isdigit():
            wanted = f"{QUEUE}.{int(current):06d}.log"
            names = [wanted] if wanted in files else []
        if not names:
            return
        log_name = names[-1]
        data = files[log_name]
        generation = int(_LOG_NAME.fullmatch(log_name).group(1))  # type: ignore[union-attr]
        batches = list(_complete_batches(data, 16))
        targets = [(i, record) for i, (_, batch) in enumerate(batches) for record in batch]
        if len(targets) > self.bounds.rot_records:
            targets = sorted(self.rng.sample(targets, self.bounds.rot_records),
                             key=lambda t: t[1][2])
        stats = self.report.stats.setdefault("rot", ProfileStats())
        started = time.perf_counter()
        c = len(self.trace.events)
        for i, (rtype, record, at, _) in targets:
            # The damaged record ends the log (its batch may read as a torn tail), or one
            # more batch follows it (then the damage must be refused: a later state
            # would still show any misreading).
            for j in {i, min(i + 1, len(batches) - 1)}:
                end = batches[j][0]
                prefix = data[:end] + bytes(len(data) - end)
                last = batches[j][1][0][1]["b"]
                allowed = {(last, generation)}
                if j == i:  # a torn last batch: the state before it
                    allowed.add((batches[j - 1][1][0][1]["b"], generation) if j else
                                (0, generation))
                flips = [(at + 4, bit) for bit in range(8)]  # every bit of the type byte
                flips += [(at + self.rng.randrange(4), self.rng.randrange(8)),  # a length bit
                          (at + 5 + self.rng.randrange(4), self.rng.randrange(8))]  # a CRC bit
                for offset, bit in flips:
                    damaged = bytearray(prefix)
                    damaged[offset] ^= 1 << bit
                    state, outcome = self._open_rotten(files, log_name, bytes(damaged),
                                                       stats, c)
                    field_name = ("type byte" if offset == at + 4 else
                                  "length" if offset < at + 4 else "crc")
                    what = (f"E8 flipped bit {bit} of the {field_name} of a type {rtype} record "
                            f"(batch {record['b']}, offset {at}) of {log_name}, "
                            f"{'ending the log' if j == i else 'one batch before its end'}")
                    if outcome.error is not None:
                        if not outcome.corrupt:
                            self._rot_violation(c, what, state, f"raised {outcome.error}")
                        elif outcome.modified_on_error:
                            self._rot_violation(c, what, state, "raised CorruptLogError but "
                                                                "modified files")
                        continue
                    position = (outcome.last_batch, outcome.generation)
                    expected = self.trace.history.get(position, set())
                    if position not in allowed or outcome.fingerprint not in expected:
                        self._rot_violation(
                            c, what, state, f"damage went undetected: opened as batch "
                            f"{outcome.last_batch}, a state that is "
                            f"{'' if outcome.fingerprint in expected else 'not '}in the "
                            f"history (allowed: {sorted(allowed)})")
        sectors = {record[2] // 512 * 512 for _, record in targets}
        for sector in sorted(sectors):
            self._rot_zero_sector(files, log_name, generation, batches, sector, stats, c)
        stats.seconds += time.perf_counter() - started

    def _open_rotten(self, files: dict[str, bytes], log_name: str, damaged: bytes,
                     stats: ProfileStats, c: int) -> tuple[_State, _Outcome]:
        """The final files with `log_name` replaced by `damaged`, and what opening them
        gives (each distinct state opened once)."""
        state = _State.make({n: k for k, n in enumerate(files)},
                            {k: (damaged if n == log_name else files[n])
                             for k, n in enumerate(files)})
        self.report.rot_states += 1
        stats.states += 1
        outcome = self.outcomes.get(state.digest)
        if outcome is None:
            outcome = self.opener.open(state, self.now[c], False)
            self.outcomes[state.digest] = outcome
            stats.unique += 1
        return state, outcome

    def _rot_zero_sector(self, files: dict[str, bytes], log_name: str, generation: int,
                         batches: list[tuple[int, list[tuple[int, dict[str, Any], int, int]]]],
                         sector: int, stats: ProfileStats, c: int) -> None:
        """E8, a lost or misdirected write: one 512-byte sector of durable records reads
        back as zeros. When the call that wrote the first damaged batch had returned
        (fsynced) before its handle wrote a later batch that lies wholly after the
        sector, the zeros hide acknowledged records: opening must refuse
        (CorruptLogError, nothing modified), however many zeros lie between."""
        low, high = max(sector, 16), sector + 512
        first = next((i for i, (end, _) in enumerate(batches) if end > low), None)
        later = next((i for i, (_, batch) in enumerate(batches) if batch[0][2] >= high), None)
        if first is None or later is None:
            return
        lost_batch = batches[first][1][0][1]["b"]
        later_batch = batches[later][1][0][1]["b"]
        writers = {b: call for call in self.trace.calls for b in call.batches}
        lost = writers.get((lost_batch, generation))
        after = writers.get((later_batch, generation))
        if lost is None or after is None or lost.outcome != "returned" or not lost.durable \
                or lost.handle != after.handle or lost.end > after.begin:
            return  # nothing proves the damaged batch was on disk before the later one
        data = bytearray(files[log_name])
        data[low:high] = bytes(high - low)
        state, outcome = self._open_rotten(files, log_name, bytes(data), stats, c)
        what = (f"E8 zeroed sector [{low}, {high}) of {log_name}: batch {lost_batch}, "
                f"returned by {lost.describe()}, lost before batch {later_batch} of the "
                f"same handle")
        if outcome.error is None:
            self._rot_violation(c, what, state, f"durable records were cut: opened as batch "
                                                f"{outcome.last_batch}")
        elif not outcome.corrupt:
            self._rot_violation(c, what, state, f"raised {outcome.error}")
        elif outcome.modified_on_error:
            self._rot_violation(c, what, state, "raised CorruptLogError but modified files")

    def _rot_violation(self, c: int, what: str, state: _State, message: str) -> None:
        logs = _log_inodes(self.trace.events)
        writer = next((e for e in self.trace.events if e.kind == "write"
                       and e.ino in logs and e.offset >= 16), None)
        self.report.stats["rot"].violations += 1
        self.report.total_violations += 1
        if len(self.report.violations) < 50:
            self.report.violations.append(Violation(
                "E8", self.trace.name, "rot", c, what, message, state.listing(),
                (writer.describe(),) if writer else (), (), dict(state.files)))
