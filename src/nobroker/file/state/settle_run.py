"""A batch's leading run of ACK and LEASE records, applied in one step.

A worker's batches are nearly all of one shape: ack_many_and_lease writes k
ACKs then k LEASEs, ack_and_lease one of each. The general path (state.py's
`_apply`) looks each record's rules up in TRANSITIONS, dispatches it to
transitions.py's function and asks the limits after it; here the same checks
and effects run inline, in one loop.

Each record is checked as `_apply`, `apply_ack` and `apply_lease` check it.
The first record this path cannot take the same way (another type, an ACK with
a result, any field off, a job in another state) ends the run, and apply_batch
applies the rest one by one: so the state, or the ReplayError and its offset,
is the one the general path gives (tests/file/test_fast_paths.py replays
histories both ways). A queue with limited, waiting or dormant jobs takes the
general path throughout: their indexes follow every ACK and LEASE. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, Protocol

from ..log.records import BATCH, ID, RESULT, TIME, TOKEN, UNTIL, Applied, RecordType
from .fieldchecks import INT64
from .limited import LimitedJobs
from .transitions import ReplayState
from .vocabulary import KEYED, LEASED, PENDING

__all__ = ["SETTLES", "apply_settle_run"]

# The record types that may open a run (apply_batch tries the run only then).
SETTLES: Final = frozenset({RecordType.ACK, RecordType.LEASE})


class SettleState(ReplayState, Protocol):
    """What the run reads of the replay state beyond the record functions' part."""

    limited: LimitedJobs


def apply_settle_run(state: SettleState, batch: Sequence[Applied], number: int,
                     latest: float) -> tuple[int, float]:
    """Apply the leading ACK (without a result) and LEASE records of batch `number`:
    how many were applied (0: none), and `latest` raised to their times."""
    limited = state.limited
    if state.waits or state.dormant or limited.keys or limited.windows:
        return 0, latest
    table = state.table
    held, code, leases, flags = table.held, table.code, table.leases, table.flags
    notes = state.notes
    ack, lease = RecordType.ACK, RecordType.LEASE
    done = 0
    for rtype, rec, _, _ in batch:
        if rec.get(BATCH) != number:
            break
        job_id, stamp = rec.get(ID), rec.get(TIME)
        if type(job_id) is not str or type(stamp) is not float:
            break
        if rtype == ack:
            seq = held.get(job_id)
            token = rec.get(TOKEN)
            if seq is None or RESULT in rec or type(token) is not int:
                break
            slot = table.slot(seq)
            if slot < 0 or code[slot] != LEASED or leases[seq][0] != token:
                break
            state.leased -= 1
            state.done += 1
            keyed = flags[slot] & KEYED
            state.live_bytes -= table.remove(slot, job_id)
            if keyed:
                state.remember(job_id, stamp)  # its note (if any) is kept with its key
            elif notes.by_job:
                notes.set(job_id, None)
        elif rtype == lease:
            token, until = rec.get(TOKEN), rec.get(UNTIL)
            if (job_id in held or not (type(token) is int and 1 <= token < INT64)
                    or type(until) is not float):
                break
            slot = table.find(job_id)
            if slot < 0 or code[slot] != PENDING:
                break
            if token >= state.next_token:
                state.next_token = token + 1
            state.pending -= 1
            state.leased += 1
            table.lease(slot, job_id, token, until)
        else:
            break
        if stamp > latest:
            latest = stamp
        done += 1
    return done, latest
