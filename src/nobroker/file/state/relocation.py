"""Following a compaction another handle made: moving payload locations, not jobs.

A peer that compacts writes the same live jobs into a new generation, so a
handle that has read the old one to its end holds exactly those jobs; only
the offset and size of each job's record changed. The new generation's
checkpoint lists them (in enqueue order); these functions move the table's
`record_offset` and `size` columns across, with array slices in the usual
shape (the removed jobs are the oldest) and a walk otherwise, and change
nothing if the snapshot does not hold the jobs the table knows.

Functions over a JobTable (jobtable.py), which hand the moved columns back
to it (`move_records`). Pure: no os, time, random or threads.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left

from .jobtable import JobTable
from .vocabulary import FREE, NAMED, seq_id

__all__ = ["relocate"]


def relocate(table: JobTable, source_offset: int, shift: int, seqs: array[int],
             names: dict[int, str], locs: array[int], sizes: array[int]) -> int | None:
    """Move payload locations to a new generation written by another handle.

    The snapshot's jobs (`seqs`/`names` in enqueue order, at `locs`/`sizes`)
    are ours whose record lies before `source_offset`; records after it were
    copied unchanged, `shift` bytes further. Returns the live jobs' bytes
    after the move, or None (nothing changed) if the snapshot does not hold
    the jobs we know."""
    code, flags, my_seqs = table.code, table.flags, table.seqs
    if not table.names and not names:
        live_bytes = _relocate_in_bulk(table, source_offset, shift, seqs, locs, sizes)
        if live_bytes is not None:
            return live_bytes
    old_loc, old_size = table.record_offset, table.size
    new_locs, new_sizes = array("q", old_loc), array("I", old_size)
    index, count, live = 0, len(seqs), 0
    for slot in range(len(code)):
        if code[slot] == FREE:
            continue
        loc = old_loc[slot]
        if loc >= source_offset:
            new_locs[slot] = loc + shift
            live += old_size[slot]
            continue
        seq = my_seqs[slot]
        mine = table.names[seq] if flags[slot] & NAMED else None
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
    table.move_records(new_locs, new_sizes)
    return live


def _relocate_in_bulk(table: JobTable, source_offset: int, shift: int, seqs: array[int],
                      locs: array[int], sizes: array[int]) -> int | None:
    """relocate() in the usual shape, with array slices instead of a loop per job.

    The usual shape: every removed job's hole is at the front (FIFO), so our
    live slots are one run; the snapshot holds them in the same order, after
    the jobs removed since its offset; and every slot after them was
    appended after that offset. Whatever else is true, it is checked: the
    jobs matched by position are compared seq by seq (in C), and the slots
    left over must all lie past the offset. None (nothing changed) otherwise.
    """
    code, my_seqs, old_loc, old_size = table.code, table.seqs, table.record_offset, table.size
    slots = len(code)
    lead = slots - len(code.lstrip(bytes([FREE]))) if table.holes else 0
    if lead != table.holes or seqs.typecode != "q" or locs.typecode != "q" \
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
    table.move_records(new_loc, new_size)
    return sum(sizes[first:]) + sum(old_size[last:])
