"""Strategies: which crash states to build at each crash point (bounded); crash_states().

Part of the crash-state explorer; the theory is in harness/explorer/__init__.py.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from .disk_model import _Choice, _Model, _Unit
from .frames import _scan_frames
from .recording import Event


@dataclass(frozen=True)
class Bounds:
    """How much of the state space to explore (section 9.4 of the research note)."""

    strategies: frozenset[str] = frozenset({"E1", "E2", "E3", "E4", "E5", "E6", "E7"})
    random_subsets: int = 8  # E7: seeded random states per crash point
    max_dir_subset: int = 5  # E5: all 2^k subsets of pending dir micro-ops up to this k
    max_unit_variants: int = 48  # E3/E4: cap on per-unit variants per crash point (sampled)
    byte_exhaustive: bool = False  # process profile: every byte cut, not just the telling ones
    continuation: float = 0.05  # I9: share of unique states continued (persistence points: all)
    compound: int = 4  # I8: repaired states whose own recovery is crashed
    rot: bool = True  # E8: header bit flips in the final log
    rot_records: int = 8  # E8: records damaged (sampled when the log holds more)
    compound_states: int = 40  # I8: crash states of one recovery checked (sampled)
    # weak: may a file that never had a durable byte show garbage (not just zeros) where
    # its data did not land? On: that is what exposed the in-place creation of
    # generation 0 (see the module docstring and test_explorer_teeth).
    new_file_garbage: bool = True
    seed: int = 0

    @classmethod
    def torture(cls, seed: int = 0) -> Bounds:
        """The long run's bounds: byte-exhaustive, many random subsets, more compound states."""
        return cls(random_subsets=64, max_dir_subset=7, max_unit_variants=512,
                   byte_exhaustive=True, continuation=0.2, compound=32, rot_records=64,
                   compound_states=400, seed=seed)

    @classmethod
    def quick(cls, seed: int = 0) -> Bounds:
        return cls(random_subsets=2, max_unit_variants=16, continuation=0.0, compound=0,
                   rot=False, seed=seed)


def _choices(model: _Model, units: list[_Unit], bounds: Bounds, rng: random.Random,
             weak: bool) -> Iterator[_Choice]:
    strategies = bounds.strategies
    fills = ("zero", "garbage") if weak else ("zero",)
    floor = {(u.kind, u.ino, u.key): -1 for u in units}
    if "E2" in strategies or not units:
        yield _Choice("E2 ceiling")
    if not units:
        return
    if "E1" in strategies:
        for fill in fills:
            yield _Choice("E1 floor", dict(floor), fill)
    if "E3" in strategies:
        variants = []
        for u in units:
            for option in u.options[:-1]:
                variants.append(_Choice(f"E3 all but {u.kind}{u.ino}.{u.key}@{option}",
                                        {(u.kind, u.ino, u.key): option}))
            variants.append(_Choice(f"E3 only {u.kind}{u.ino}.{u.key}",
                                    {**floor, (u.kind, u.ino, u.key): u.options[-1]},
                                    fills[-1]))
        yield from _sample(variants, bounds.max_unit_variants, rng)
    data_units = [u for u in units if u.kind in ("size", "data")]
    dir_units = [u for u in units if u.kind in ("dir", "dirprefix")]
    torn: list[_Choice] = []
    if "E4" in strategies:
        torn = list(_torn_writes(model, data_units))
        yield from _sample(torn, bounds.max_unit_variants, rng)
    if "E5" in strategies and dir_units:
        dir_choices = list(_dir_choices(dir_units, bounds, rng))
        for picks in dir_choices:
            yield _Choice("E5 dir " + _dir_label(picks), dict(picks))
            yield _Choice("E5 dir+data floor " + _dir_label(picks), {
                **{k: v for k, v in floor.items() if k[0] in ("size", "data")}, **picks},
                fills[-1])
        if "E6" in strategies and data_units and torn:
            combos = [_Choice(f"E6 {t.label} x dir {_dir_label(p)}", {**t.picks, **p}, t.fill)
                      for t in torn for p in dir_choices]
            yield from _sample(combos, bounds.max_unit_variants * 2, rng)
    if "E7" in strategies:
        for i in range(bounds.random_subsets):
            picks = {(u.kind, u.ino, u.key): rng.choice(u.options) for u in units}
            yield _Choice(f"E7 random #{i}", picks, rng.choice(fills))


def _sample(items: list[_Choice], limit: int, rng: random.Random) -> list[_Choice]:
    if len(items) <= limit:
        return items
    return rng.sample(items, limit)


def _dir_label(picks: dict[tuple[str, int, int], int]) -> str:
    if ("dirprefix", 0, 0) in picks:
        return f"prefix {picks[('dirprefix', 0, 0)] + 1}"
    return "{" + ",".join(str(k[2]) for k, v in sorted(picks.items()) if v >= 0) + "}"


def _dir_choices(units: list[_Unit], bounds: Bounds,
                 rng: random.Random) -> Iterator[dict[tuple[str, int, int], int]]:
    if units[0].kind == "dirprefix":
        for option in units[0].options:
            yield {("dirprefix", 0, 0): option}
        return
    k = len(units)
    keys = [("dir", 0, u.key) for u in units]
    if k <= bounds.max_dir_subset:
        for mask in range(1 << k):
            yield {key: (0 if mask >> i & 1 else -1) for i, key in enumerate(keys)}
        return
    seen: set[tuple[int, ...]] = set()
    candidates = []
    for j in range(k + 1):  # prefixes
        candidates.append(tuple(1 if i < j else 0 for i in range(k)))
    for j in range(k):  # all but one, and one alone
        candidates.append(tuple(0 if i == j else 1 for i in range(k)))
        candidates.append(tuple(1 if i == j else 0 for i in range(k)))
    for _ in range(bounds.random_subsets * 2):
        candidates.append(tuple(rng.randint(0, 1) for _ in range(k)))
    for bits in candidates:
        if bits not in seen:
            seen.add(bits)
            yield {key: (0 if bit else -1) for key, bit in zip(keys, bits, strict=True)}


def _torn_writes(model: _Model, units: list[_Unit]) -> Iterator[_Choice]:
    """E4: each pending write torn in order, with one sector missing, or as size only."""
    by_ino: dict[int, list[_Unit]] = {}
    for unit in units:
        by_ino.setdefault(unit.ino, []).append(unit)
    for ino, inode_units in by_ino.items():
        versions = model.versions[ino]
        for w, version in enumerate(versions):
            if not version.sectors or version.zero:
                continue
            base = {(u.kind, u.ino, u.key): _before(u, w) for u in inode_units}
            mine = [u for u in inode_units
                    if u.kind == "data" and w in u.options and
                    any(s in version.sectors for s in u.sectors)]
            sizes = [u for u in inode_units if u.kind == "size"]
            size_now = {(u.kind, u.ino, u.key): _at(u, w) for u in sizes}
            for j in range(len(mine) + 1):
                picks = dict(base)
                picks.update(size_now)
                for u in mine[:j]:
                    picks[(u.kind, u.ino, u.key)] = w
                label = "size only" if j == 0 else f"first {j}/{len(mine)} sectors"
                yield _Choice(f"E4 write #{version.event} {label}", picks)
                if j == 0 and model.profile == "weak":
                    yield _Choice(f"E4 write #{version.event} size+garbage", dict(picks),
                                  "garbage")
            if len(mine) > 1:
                for hole in mine:
                    picks = dict(base)
                    picks.update(size_now)
                    for u in mine:
                        if u is not hole:
                            picks[(u.kind, u.ino, u.key)] = w
                    yield _Choice(f"E4 write #{version.event} hole at sector {hole.sectors[0]}",
                                  picks)


def _before(unit: _Unit, w: int) -> int:
    earlier = [o for o in unit.options if o < w]
    return earlier[-1] if earlier else -1


def _at(unit: _Unit, w: int) -> int:
    upto = [o for o in unit.options if o <= w]
    return upto[-1] if upto else -1


def _byte_cuts(data: bytes, exhaustive: bool) -> list[int]:
    if not any(data):  # zeros (preallocation): where it stops hardly matters
        return sorted({0, len(data) // 2}) if data else []
    if exhaustive:
        return list(range(len(data)))
    frames = _scan_frames(data)
    if not frames:
        return sorted({0, len(data) // 3, 2 * len(data) // 3, len(data) - 1})
    cuts: set[int] = set()
    for _, pos, _ in frames:
        length = struct.unpack_from("<I", data, pos)[0]
        cuts.update(range(pos, pos + 9))
        cuts.update((pos + 9 + length // 3, pos + 9 + 2 * length // 3, pos + 8 + length))
    return sorted(c for c in cuts if 0 <= c < len(data))


def crash_states(events: Sequence[Event], profile: str, bounds: Bounds | None = None,
                 initial: dict[str, bytes] | None = None) -> list[dict[str, bytes]]:
    """The crash states (name -> bytes) a profile allows right after `events`.

    For unit tests of the disk models on hand-written traces; inode numbers in
    the events must match `initial`'s sorted names (1, 2, ...) or their creates.
    """
    bounds = bounds or Bounds()
    names = sorted(initial or {})
    model = _Model(profile, {n: i + 1 for i, n in enumerate(names)},
                   {i + 1: (initial or {})[n] for i, n in enumerate(names)})
    model.new_file_garbage = bounds.new_file_garbage
    for event in events:
        model.apply(event)
    units = model.units() if profile != "process" else []
    out: dict[bytes, dict[str, bytes]] = {}
    rng = random.Random(bounds.seed)
    for choice in _choices(model, units, bounds, rng, profile == "weak"):
        state = model.build(choice, units, bounds.seed)
        out.setdefault(state.digest, dict(state.files))
    return list(out.values())
