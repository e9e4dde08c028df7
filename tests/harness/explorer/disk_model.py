"""Disk models: replay a trace under a profile and build the crash states it allows.

Part of the crash-state explorer; the theory is in harness/explorer/__init__.py.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from .recording import SECTOR, Event


@dataclass(slots=True)
class _Version:
    event: int
    size: int
    sectors: dict[int, bytes]
    zero: bool  # wrote only zero bytes (preallocation)


@dataclass(slots=True)
class _DirOp:
    kind: str  # link | unlink | rename (rename only in atomic profiles)
    name: str
    ino: int
    event: int
    name2: str = ""


@dataclass(frozen=True, slots=True)
class _Unit:
    """Something that can independently be persisted or not at a crash point."""

    kind: str  # size | data | dir | dirprefix
    ino: int
    key: int  # group index (data), micro-op index (dir)
    options: tuple[int, ...]  # version indices (-1 = floor); the last is the ceiling
    sectors: tuple[int, ...] = ()


@dataclass(slots=True)
class _Choice:
    """A crash state as a choice per unit; anything absent is at its ceiling."""

    label: str
    picks: dict[tuple[str, int, int], int] = field(default_factory=dict)
    fill: str = "zero"
    cut: tuple[int, int, bytes] | None = None  # (ino, offset, partial data): a byte-torn write


class _Model:
    """The disk under one profile after a prefix of the trace."""

    def __init__(self, profile: str, initial: dict[str, int], files: dict[int, bytes]) -> None:
        self.profile = profile
        self.cache: dict[int, bytearray] = {ino: bytearray(data) for ino, data in files.items()}
        self.floor: dict[int, bytes] = dict(files)
        self.versions: dict[int, list[_Version]] = {}
        self.dcache: dict[str, int] = dict(initial)
        self.durable: dict[str, int] = dict(initial)
        self.pending: list[_DirOp] = []
        self.stamp = 0  # bumps whenever the set of possible states may change
        self.new_file_garbage = False

    def apply(self, event: Event) -> None:
        kind = event.kind
        if kind in ("begin", "end"):
            return
        self.stamp += 1
        if kind == "create":
            self.cache[event.ino] = bytearray()
            self.floor.setdefault(event.ino, b"")
            self.dcache[event.name] = event.ino
            self.pending.append(_DirOp("link", event.name, event.ino, event.index))
        elif kind == "write":
            self._write(event)
        elif kind == "trunc":
            buf = self.cache[event.ino]
            old = len(buf)
            touched: dict[int, bytes] = {}
            if event.offset < old:
                del buf[event.offset:]
                if event.offset % SECTOR:
                    s = event.offset // SECTOR
                    touched[s] = bytes(buf[s * SECTOR:]).ljust(SECTOR, b"\0")
            else:
                buf.extend(bytes(event.offset - old))
            self.versions.setdefault(event.ino, []).append(
                _Version(event.index, event.offset, touched, True))
        elif kind == "fsync":
            self._persist(event.ino)
            if self.profile == "windows":  # NTFS: the journal flush carries earlier dir ops
                self._dirsync()
        elif kind == "fsync_failed":
            self.versions.pop(event.ino, None)  # marked clean, never written: lost
        elif kind == "dirsync":
            if self.profile != "windows":
                self._dirsync()
        elif kind == "rename":
            ino = self.dcache.pop(event.name)
            replaced = self.dcache.get(event.name2)
            self.dcache[event.name2] = ino
            if self.profile == "weak":
                if replaced is not None:
                    self.pending.append(_DirOp("unlink", event.name2, replaced, event.index))
                self.pending.append(_DirOp("link", event.name2, ino, event.index))
                self.pending.append(_DirOp("unlink", event.name, ino, event.index))
            else:
                self.pending.append(_DirOp("rename", event.name, ino, event.index, event.name2))
        elif kind == "unlink":
            self.dcache.pop(event.name, None)
            self.pending.append(_DirOp("unlink", event.name, event.ino, event.index))

    def _write(self, event: Event) -> None:
        buf = self.cache[event.ino]
        end = event.offset + len(event.data)
        if len(buf) < end:
            buf.extend(bytes(end - len(buf)))
        buf[event.offset:end] = event.data
        touched = {}
        if event.data:
            for s in range(event.offset // SECTOR, (end - 1) // SECTOR + 1):
                touched[s] = bytes(buf[s * SECTOR:(s + 1) * SECTOR]).ljust(SECTOR, b"\0")
        self.versions.setdefault(event.ino, []).append(
            _Version(event.index, len(buf), touched, not any(event.data)))

    def _persist(self, ino: int, before: int | None = None) -> None:
        """Move the inode's pending versions (issued before event `before`) to its floor."""
        versions = self.versions.pop(ino, [])
        if before is not None:
            kept = [v for v in versions if v.event >= before]
            versions = [v for v in versions if v.event < before]
            if kept:
                self.versions[ino] = kept
            if not versions:
                return
            size = versions[-1].size
        else:
            size = len(self.cache[ino])
        floor = bytearray(self.floor.get(ino, b"")[:size])
        floor.extend(bytes(size - len(floor)))
        for version in versions:
            for s, content in version.sectors.items():
                start = s * SECTOR
                if start < size:
                    floor[start:min(start + SECTOR, size)] = content[:min(SECTOR, size - start)]
        self.floor[ino] = bytes(floor)

    def _dirsync(self) -> None:
        if self.profile in ("ext4ish", "windows"):  # safe rename: the data goes first
            for op in self.pending:
                if op.kind == "rename":
                    self._persist(op.ino, before=op.event)
        self.durable = dict(self.dcache)
        self.pending = []

    # -- units and states ---------------------------------------------------

    def live_inodes(self) -> set[int]:
        inodes = set(self.durable.values()) | set(self.dcache.values())
        inodes.update(op.ino for op in self.pending)
        return inodes

    def units(self) -> list[_Unit]:
        units: list[_Unit] = []
        live = self.live_inodes()
        for ino, versions in sorted(self.versions.items()):
            if not versions or ino not in live:
                continue
            sizes = [-1]
            last = len(self.floor.get(ino, b""))
            for i, version in enumerate(versions):
                if version.size != last:
                    sizes.append(i)
                    last = version.size
            if len(sizes) > 1:
                units.append(_Unit("size", ino, 0, tuple(sizes)))
            touching: dict[int, list[int]] = {}
            zero_only: dict[int, bool] = {}
            for i, version in enumerate(versions):
                for s, content in version.sectors.items():
                    touching.setdefault(s, []).append(i)
                    zero_only[s] = zero_only.get(s, True) and not any(content)
            groups: list[tuple[list[int], tuple[int, ...]]] = []
            for s in sorted(touching):
                options = (-1, *touching[s])
                if (zero_only[s] and groups and groups[-1][1] == options
                        and zero_only.get(groups[-1][0][-1], False)
                        and groups[-1][0][-1] == s - 1):
                    groups[-1][0].append(s)
                else:
                    groups.append(([s], options))
            for key, (sectors, options) in enumerate(groups):
                units.append(_Unit("data", ino, key, options, tuple(sectors)))
        if self.profile in ("ext4ish", "windows"):
            if self.pending:
                units.append(_Unit("dirprefix", 0, 0, tuple(range(-1, len(self.pending)))))
        elif self.profile == "weak":
            for i in range(len(self.pending)):
                units.append(_Unit("dir", 0, i, (-1, 0)))
        return units

    def build(self, choice: _Choice, units: Sequence[_Unit], seed: int) -> _State:
        picks = choice.picks
        if self.profile == "process":
            directory = dict(self.dcache)
        elif self.profile == "weak":
            directory = dict(self.durable)
            for i, op in enumerate(self.pending):
                if picks.get(("dir", 0, i), 0) >= 0:
                    _apply_dir(directory, op)
        else:
            directory = dict(self.durable)
            upto = picks.get(("dirprefix", 0, 0), len(self.pending) - 1)
            for op in self.pending[:upto + 1]:
                _apply_dir(directory, op)
        forced: dict[int, int] = {}
        if self.profile in ("ext4ish", "windows"):  # safe rename: data before the rename lands
            upto = picks.get(("dirprefix", 0, 0), len(self.pending) - 1)
            for op in self.pending[:upto + 1]:
                if op.kind == "rename":
                    versions = self.versions.get(op.ino, [])
                    before = [i for i, v in enumerate(versions) if v.event < op.event]
                    if before:
                        forced[op.ino] = max(forced.get(op.ino, -1), before[-1])
        contents: dict[int, bytes] = {}
        by_ino: dict[int, list[_Unit]] = {}
        for unit in units:
            if unit.kind in ("size", "data"):
                by_ino.setdefault(unit.ino, []).append(unit)
        for ino in set(directory.values()):
            contents[ino] = self._content(ino, by_ino.get(ino, []), picks, forced.get(ino, -1),
                                          choice.fill, seed)
            if choice.cut is not None and choice.cut[0] == ino:
                _, offset, partial = choice.cut
                buf = bytearray(contents[ino])
                if len(buf) < offset + len(partial):
                    buf.extend(bytes(offset + len(partial) - len(buf)))
                buf[offset:offset + len(partial)] = partial
                contents[ino] = bytes(buf)
        return _State.make(directory, contents)

    def _content(self, ino: int, units: list[_Unit], picks: dict[tuple[str, int, int], int],
                 forced: int, fill: str, seed: int) -> bytes:
        versions = self.versions.get(ino)
        if not versions or self.profile == "process":
            return bytes(self.cache[ino]) if self.profile == "process" else \
                self.floor.get(ino, b"")
        floor = self.floor.get(ino, b"")
        ceiling = len(versions) - 1

        def pick(unit: _Unit) -> int:
            chosen = picks.get((unit.kind, unit.ino, unit.key), ceiling)
            return max(chosen, forced)

        size_version = ceiling
        for unit in units:
            if unit.kind == "size":
                size_version = pick(unit)
        size = len(floor) if size_version < 0 else versions[size_version].size
        buf = bytearray(floor[:size])
        if size > len(buf):
            if not floor and not self.new_file_garbage:
                fill = "zero"
            buf.extend(_fill(size - len(buf), fill, seed * 7919 + ino))
        for unit in units:
            if unit.kind != "data":
                continue
            upto = pick(unit)
            if upto < 0:
                continue
            for s in unit.sectors:
                start = s * SECTOR
                if start >= size:
                    continue
                content = None
                for i in range(min(upto, ceiling), -1, -1):
                    content = versions[i].sectors.get(s)
                    if content is not None:
                        break
                if content is not None:
                    stop = min(start + SECTOR, size)
                    buf[start:stop] = content[:stop - start]
        return bytes(buf)

    def dropped(self, choice: _Choice, units: Sequence[_Unit]) -> list[int]:
        """Event indices of the operations this state did not persist."""
        out: set[int] = set()
        for unit in units:
            chosen = choice.picks.get((unit.kind, unit.ino, unit.key))
            if chosen is None or chosen == unit.options[-1]:
                continue
            if unit.kind in ("size", "data"):
                versions = self.versions[unit.ino]
                for i in unit.options:
                    if i > chosen:
                        out.add(versions[i].event)
            elif unit.kind == "dir":
                out.add(self.pending[unit.key].event)
            else:
                out.update(op.event for op in self.pending[chosen + 1:])
        return sorted(out)


def _apply_dir(directory: dict[str, int], op: _DirOp) -> None:
    if op.kind == "link":
        directory[op.name] = op.ino
    elif op.kind == "unlink":
        if directory.get(op.name) == op.ino:
            del directory[op.name]
    elif op.kind == "rename":
        if directory.get(op.name) == op.ino:
            del directory[op.name]
        directory[op.name2] = op.ino


def _fill(n: int, kind: str, seed: int) -> bytes:
    if kind == "zero":
        return bytes(n)
    return random.Random(seed).randbytes(n)


@dataclass(frozen=True, slots=True)
class _State:
    """A crash state: names -> bytes, plus the names that share an inode."""

    files: tuple[tuple[str, bytes], ...]
    links: tuple[tuple[str, ...], ...]
    digest: bytes

    @classmethod
    def make(cls, directory: dict[str, int], contents: dict[int, bytes]) -> _State:
        files = tuple(sorted((name, contents[ino]) for name, ino in directory.items()))
        groups: dict[int, list[str]] = {}
        for name, ino in directory.items():
            groups.setdefault(ino, []).append(name)
        links = tuple(sorted(tuple(sorted(g)) for g in groups.values() if len(g) > 1))
        h = hashlib.blake2b(digest_size=20)
        for name, data in files:  # length + bytes up to the last non-zero one say it all
            h.update(name.encode() + b"\0" + len(data).to_bytes(8, "little"))
            h.update(data.rstrip(b"\0"))
        h.update(repr(links).encode())
        return cls(files, links, h.digest())

    def listing(self) -> str:
        return ", ".join(f"{name} ({len(data)}B)" for name, data in self.files)
