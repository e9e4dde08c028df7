"""Following a compaction another handle made: moving payload locations, not jobs.

A peer that compacts writes the same live jobs into a new generation, so a
handle that has read the old one to its end holds exactly those jobs; only
the offset and size of each job's record changed. The new generation's
checkpoint lists them (in enqueue order); these methods move the table's
`record_offset` and `size` columns across, with array slices in the usual
shape (the removed jobs are the oldest) and a walk otherwise, and change
nothing if the snapshot does not hold the jobs the table knows.

A mixin of JobTable (jobtable.py). Pure: no os, time, random or threads.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from typing import Final

from .vocabulary import FREE, Entry, seq_id

__all__ = ["Relocation", "NAMED"]

NAMED: Final = 2  # a slot flag: the id is not seq_id(seq); it lives in the ids/names dicts


class Relocation:
    """Moving a JobTable's payload locations to a peer's new generation."""

    # The table's columns these methods read and replace (JobTable defines them).
    seqs: array[int]
    code: bytearray
    flags: bytearray
    record_offset: array[int]
    size: array[int]
    names: dict[int, str]
    holes: int
    held: dict[str, int]
    _held_views: dict[str, Entry]

    def slot(self, seq: int) -> int:
        raise NotImplementedError

    def entry(self, slot: int, job_id: str | None = None) -> Entry:
        raise NotImplementedError

    def relocate(self, source_offset: int, shift: int, seqs: array[int],
                 names: dict[int, str], locs: array[int], sizes: array[int]) -> int | None:
        """Move payload locations to a new generation written by another handle.

        The snapshot's jobs (`seqs`/`names` in enqueue order, at `locs`/`sizes`)
        are ours whose record lies before `source_offset`; records after it were
        copied unchanged, `shift` bytes further. Returns the live jobs' bytes
        after the move, or None (nothing changed) if the snapshot does not hold
        the jobs we know."""
        code, flags, my_seqs = self.code, self.flags, self.seqs
        if not self.names and not names:
            live_bytes = self._relocate_in_bulk(source_offset, shift, seqs, locs, sizes)
            if live_bytes is not None:
                return live_bytes
        new_locs, new_sizes = array("q", self.record_offset), array("I", self.size)
        index, count, live = 0, len(seqs), 0
        for slot in range(len(code)):
            if code[slot] == FREE:
                continue
            loc = self.record_offset[slot]
            if loc >= source_offset:
                new_locs[slot] = loc + shift
                live += self.size[slot]
                continue
            seq = my_seqs[slot]
            mine = self.names[seq] if flags[slot] & NAMED else None
            while index < count:
                theirs = names.get(index)
                if (seqs[index] == seq if mine is None and theirs is None
                        else (mine or seq_id(seq)) == (theirs or seq_id(seqs[index]))):
                    break
                index += 1
            if index == count:
                return None
            new_locs[slot], new_sizes[slot] = locs[index], sizes[index]
            live += sizes[index]
            index += 1
        self.record_offset, self.size = new_locs, new_sizes
        self._rebuild_held()
        return live

    def _relocate_in_bulk(self, source_offset: int, shift: int, seqs: array[int],
                          locs: array[int], sizes: array[int]) -> int | None:
        """relocate() in the usual shape, with array slices instead of a loop per job.

        The usual shape: every removed job's hole is at the front (FIFO), so our
        live slots are one run; the snapshot holds them in the same order, after
        the jobs removed since its offset; and every slot after them was
        appended after that offset. Whatever else is true, it is checked: the
        jobs matched by position are compared seq by seq (in C), and the slots
        left over must all lie past the offset. None (nothing changed) otherwise.
        """
        code, my_seqs, old_loc, old_size = self.code, self.seqs, self.record_offset, self.size
        slots = len(code)
        lead = slots - len(code.lstrip(bytes([FREE]))) if self.holes else 0
        if lead != self.holes or seqs.typecode != "q" or locs.typecode != "q" \
                or sizes.typecode != "I":
            return None
        first = bisect_left(seqs, my_seqs[lead]) if lead < slots else len(seqs)
        last = lead + len(seqs) - first  # slots [lead, last) are the snapshot's jobs
        if last > slots or my_seqs[lead:last] != seqs[first:]:
            return None
        moved = old_loc[last:]  # appended after the snapshot: a few, copied unchanged
        if any(loc < source_offset for loc in moved):
            return None
        new_loc = old_loc[:lead]
        new_loc.extend(locs[first:])
        new_loc.extend(array("q", [loc + shift for loc in moved]))
        new_size = old_size[:lead]
        new_size.extend(sizes[first:])
        new_size.extend(old_size[last:])
        self.record_offset, self.size = new_loc, new_size
        self._rebuild_held()
        return sum(sizes[first:]) + sum(old_size[last:])

    def _rebuild_held(self) -> None:
        self._held_views.clear()  # their record offsets moved: build them again
