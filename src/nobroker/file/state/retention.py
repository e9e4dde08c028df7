"""The job table's index of finished jobs kept with their outcome, by end of retention.

A job acked with a result, or cancelled, stays in its slot of the job table
(codes DONE and CANCELLED) until its retention ends; its `available_at`
column holds that moment. The table owns one KeptJobs, which answers "which
kept jobs are due to be forgotten", so that every write can record a FORGET
for each (commands.plan_reclaim), without a Python object per kept job.

Jobs finish in log order and times in the log never go back, so the jobs of
one retention length come due in the order they finished: a lane per length
(an array of seqs; items before its head are consumed), appended to as jobs
finish. Lane None is shared by what a checkpoint restored and by lengths
beyond KEPT_LANES; a lane that was appended to out of order (a snapshot's
jobs come in enqueue order, lane None's in any) is sorted before it is next
read. Pure, like the rest of the replay state.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable
from typing import Final

from .vocabulary import FINISHED_CODES, JobColumns

__all__ = ["KeptJobs", "KEPT_LANES"]

KEPT_LANES: Final = 16  # retention lengths with a lane of their own; the rest share one


class _KeptLane:
    __slots__ = ("head", "last_at", "seqs")

    def __init__(self) -> None:
        self.seqs = array("q")
        self.head = 0  # items before it were consumed
        self.last_at = float("-inf")  # the latest end of retention appended


class KeptJobs:
    """The kept-jobs index of a JobTable (see the module doc)."""

    def __init__(self) -> None:
        self._kept: dict[float | None, _KeptLane] = {}  # retention length -> its lane
        self._kept_unsorted: set[float | None] = set()

    def restore(self, seqs: Iterable[int]) -> None:
        """Index the kept jobs a checkpoint restored (in any order: sorted when read)."""
        lane = _KeptLane()
        lane.seqs.extend(seqs)
        if lane.seqs:
            self._kept[None] = lane
            self._kept_unsorted.add(None)

    def keep(self, seq: int, keep: float, kept_until: float) -> None:
        """Job `seq` was just kept `keep` seconds, until `kept_until`."""
        lanes = self._kept
        key: float | None = keep if keep in lanes or len(lanes) < KEPT_LANES else None
        lane = lanes.get(key)
        if lane is None:
            lane = lanes[key] = _KeptLane()
        if kept_until < lane.last_at:
            self._kept_unsorted.add(key)
        else:
            lane.last_at = kept_until
        lane.seqs.append(seq)

    def unkeep(self) -> None:
        """A kept job is live again (a revived dependent): its lane entry is stale, and
        out of order if it is kept again, so every lane is sorted (and deduplicated)
        before it is next read."""
        self._kept_unsorted.update(self._kept)

    def kept_until_before(self, table: JobColumns, before: float) -> list[int]:
        """Slots of the table's kept jobs whose retention ends at or before `before`, in
        that order (equal ends by seq). Drops consumed items at the heads of the lanes
        for good."""
        code, at, slot_of = table.code, table.available_at, table.slot
        found: list[tuple[float, int, int]] = []
        for key, lane in list(self._kept.items()):
            if key in self._kept_unsorted:
                self._sort_kept(table, lane)
                self._kept_unsorted.discard(key)
            seqs, index, due = lane.seqs, lane.head, False
            while index < len(seqs):
                slot = slot_of(seqs[index])
                if slot < 0 or code[slot] not in FINISHED_CODES:  # forgotten since
                    index += 1
                    if not due:
                        lane.head = index
                    continue
                if at[slot] > before:
                    break
                found.append((at[slot], seqs[index], slot))
                due = True
                index += 1
            if lane.head == len(seqs):
                del self._kept[key]
            elif lane.head > 4096 and lane.head * 2 > len(seqs):
                del seqs[:lane.head]
                lane.head = 0
        found.sort()
        return list(dict.fromkeys(slot for _, _, slot in found))  # a revived job: twice

    def _sort_kept(self, table: JobColumns, lane: _KeptLane) -> None:
        """Put a lane in retention order, dropping the jobs forgotten since."""
        code, at, slot_of = table.code, table.available_at, table.slot
        live = [(at[slot], seq) for seq in dict.fromkeys(lane.seqs[lane.head:])
                if (slot := slot_of(seq)) >= 0 and code[slot] in FINISHED_CODES]
        live.sort()
        lane.seqs = array("q", [seq for _, seq in live])
        lane.head = 0
        lane.last_at = live[-1][0] if live else float("-inf")
