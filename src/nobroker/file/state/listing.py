"""The job table's jobs in enqueue order, a page at a time.

`entries` walks the live jobs (or those of one state, or the kept finished
ones too) as Entry values, after skipping the first `skip`: the skip is
counted a chunk of slots at a time in C, so that a page deep in a million
jobs costs milliseconds. A running walk notices a pack (RuntimeError): the
slots it stands on moved. Functions over a JobTable (jobtable.py), which
they only read. Pure: no os, time, random or threads.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

from .jobtable import JobTable
from .vocabulary import (
    CODE_STATES,
    CODES,
    DEAD,
    FREE,
    KEYED,
    LEASED,
    NAMED,
    PENDING,
    WAITING,
    Entry,
    JobState,
)

__all__ = ["entries"]

SKIP_CHUNK: Final = 1 << 16  # slots counted per C call when a page skips jobs


def _nth(code: bytearray, wanted: int | None, n: int, finished: bool = False) -> int:
    """The slot of the job after the first `n` of code `wanted` (or, with None, the
    first `n` live ones, and kept finished ones with `finished`), or len(code):
    counted a chunk at a time in C, so that a page deep in a million jobs costs
    milliseconds, not a Python step per job skipped."""
    start, size = 0, len(code)
    while start < size:
        end = min(size, start + SKIP_CHUNK)
        if wanted is not None:
            here = code.count(wanted, start, end)
        elif finished:
            here = end - start - code.count(FREE, start, end)
        else:
            here = sum(code.count(live, start, end) for live in (PENDING, LEASED, DEAD, WAITING))
        if here > n:
            break
        n, start = n - here, end
    for slot in range(start, size):
        found = code[slot]
        if (found == wanted if wanted is not None
                else found != FREE and (finished or found <= WAITING)):
            if n == 0:
                return slot
            n -= 1
    return size


def entries(table: JobTable, state: JobState | None = None, skip: int = 0, *,
            finished: bool = False) -> Iterator[Entry]:
    """Jobs in enqueue order, optionally of one state, after the first `skip` of
    them; without a state, the live ones (pending, leased, dead) and with
    `finished` the kept finished ones too. Do not change the table while
    iterating: a pack would move the slots (RuntimeError)."""
    code, layout = table.code, table.layout
    wanted = None if state is None else CODES[state]
    if skip:
        slot = _nth(code, wanted, skip, finished)
        while slot < len(code):
            if wanted is not None:
                slot = code.find(wanted, slot)
                if slot < 0:
                    return
            elif code[slot] == FREE or (code[slot] > WAITING and not finished):
                slot += 1
                continue
            if table.layout != layout:
                raise RuntimeError("the state changed during entries()")
            yield table.entry(slot)
            slot += 1
        return
    if wanted is not None:
        slot = code.find(wanted)
        while slot >= 0:
            if table.layout != layout:
                raise RuntimeError("the state changed during entries()")
            yield table.entry(slot)
            slot = code.find(wanted, slot + 1)
        return
    # All of them: zip the columns rather than index them, it is several times faster.
    names, errors, leases = table.names, table.errors, table.leases
    states, none = CODE_STATES, (0, 0.0)
    for seq, job_code, flags, pr, at, t, ma, att, loc, size in zip(
            table.seqs, code, table.flags, table.priority, table.available_at,
            table.enqueued_at, table.max_attempts, table.attempts, table.record_offset,
            table.size, strict=True):
        if job_code == FREE or (job_code > WAITING and not finished):
            continue
        if table.layout != layout:
            raise RuntimeError("the state changed during entries()")
        token, until = leases[seq] if job_code == LEASED else none
        yield Entry(names[seq] if flags & NAMED else f"{seq:016x}", seq, pr, at, t, ma,
                    att, states[job_code], token, until,
                    errors.get(seq) if errors else None, bool(flags & KEYED), loc, size)
