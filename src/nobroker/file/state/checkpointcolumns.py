"""The job table as a checkpoint's columns, and back.

`table_columns` packs a JobTable's columns (holes dropped, leases and ids as
the sparse maps Columns holds) in enqueue order; `table_from_columns` checks
what a checkpoint gives back (ReplayError if no table could have written it)
and builds the table with its indexes. Functions over the job table
(jobtable.py). Pure: no os, time, random or threads.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from itertools import compress, islice
from typing import Any, Final

from ..log.records import ReplayError
from .jobtable import JobTable
from .vocabulary import (
    FINISHED_CODES,
    FREE_TO_ZERO,
    KEYED,
    LEASED,
    NAMED,
    SEQ_LIMIT,
    SEQ_MAX,
    Columns,
    id_seq,
)

__all__ = ["table_columns", "table_from_columns"]

KEPT_MASK: Final = bytes(code in FINISHED_CODES for code in range(256))  # kept -> 1


def table_from_columns(columns: Columns, next_seq: int) -> JobTable:
    """The table a checkpoint's columns describe; ReplayError if they cannot be."""
    c = columns
    count = len(c.seqs)
    if not all(len(column) == count for column in (
            c.states, c.keyed, c.priority, c.available_at, c.enqueued_at,
            c.max_attempts, c.attempts, c.token, c.lease_until, c.loc, c.size)):
        raise ReplayError(0, "column lengths disagree")
    seqs = c.seqs
    if (c.states.translate(None, b"\0\1\2\3\4\5") or c.keyed.translate(None, b"\0\1")
            or type(next_seq) is not int or not 0 <= next_seq <= SEQ_MAX
            or (count and not (0 <= seqs[0] and seqs[-1] < next_seq))
            or not all(map(int.__lt__, seqs, islice(seqs, 1, None)))):
        raise ReplayError(0, "bad states, flags or sequence numbers")
    table = JobTable()
    table.seqs, table.priority, table.available_at = seqs, c.priority, c.available_at
    table.enqueued_at, table.max_attempts = c.enqueued_at, c.max_attempts
    table.attempts, table.record_offset, table.size = c.attempts, c.loc, c.size
    table.code = bytearray(c.states)
    flags = table.flags = bytearray(c.keyed)  # KEYED is 1
    for index, job_id in c.names.items():
        if not 0 <= index < count or type(job_id) is not str:
            raise ReplayError(0, "bad job id")
        flags[index] |= NAMED
        table.ids[job_id] = seqs[index]
        table.names[seqs[index]] = job_id
    if len(table.ids) != len(c.names):
        raise ReplayError(0, "a job id appears twice in a checkpoint")
    for job_id in c.names.values():  # nor may a key look like another job's seq id
        slot = table.slot(id_seq(job_id)) if id_seq(job_id) >= 0 else -1
        if slot >= 0 and not flags[slot] & NAMED:
            raise ReplayError(0, "a job id appears twice in a checkpoint")
    high = bisect_left(seqs, SEQ_LIMIT)
    if any(not flags[slot] & NAMED for slot in range(high, count)):
        raise ReplayError(0, "a job without an id")
    for index, error in c.errors.items():
        if not 0 <= index < count or type(error) is not str:
            raise ReplayError(0, "error for a job that does not exist")
        table.errors[seqs[index]] = error
    states = c.states
    deadlines: list[tuple[float, int, int]] = []
    slot = states.find(LEASED)
    while slot >= 0:
        seq, token, until = seqs[slot], c.token[slot], c.lease_until[slot]
        table.leases[seq] = (token, until)
        deadlines.append((until, token, seq))
        table.held[table.id(slot)] = seq
        slot = states.find(LEASED, slot + 1)
    table.due.restore_deadlines(deadlines)
    table.due.schedule_all(table)
    table.retention.restore(compress(seqs, c.states.translate(KEPT_MASK)))
    table.set_next_seq(next_seq)
    return table


def table_columns(table: JobTable) -> Columns:
    """The table's jobs (live and kept) as columns in enqueue order (see Columns)."""
    live = table.code.translate(FREE_TO_ZERO) if table.holes else None

    def packed(column: array[Any]) -> array[Any]:
        return array(column.typecode, column if live is None else compress(column, live))

    seqs = packed(table.seqs)
    count = len(seqs)
    states = bytes(table.code if live is None else compress(table.code, live))
    keyed = bytes(table.flags if live is None else compress(table.flags, live))
    keyed = keyed.translate(bytes(flags & KEYED for flags in range(256)))
    token, until = array("q", bytes(8 * count)), array("d", bytes(8 * count))
    for seq, (tok, deadline) in table.leases.items():
        index = bisect_left(seqs, seq)
        token[index], until[index] = tok, deadline
    return Columns(
        seqs, states, keyed, packed(table.priority), packed(table.available_at),
        packed(table.enqueued_at), packed(table.max_attempts), packed(table.attempts), token,
        until, packed(table.record_offset), packed(table.size),
        names={bisect_left(seqs, seq): name for seq, name in table.names.items()},
        errors={bisect_left(seqs, seq): error for seq, error in table.errors.items()})
