"""Reading a damaged log: the intact batches in its bytes, and a tolerant replay.

Pure, like state.py: bytes and decoded records in, findings out; no files, no
clock. salvage.py does the I/O around it.

Normal reading (logfile.py) stops at the first damaged byte and refuses the
log when an intact later batch follows. Salvage instead walks the whole file:

- `find_batches` reads batch after batch; where one does not decode, it marks
  a damaged region and resumes at the next offset where a whole intact batch
  starts with a higher batch number than the last one kept. A candidate is
  found by the RESYNC_MARKER every payload begins with. Batches are contiguous
  in a log, so batch N+1 always starts where batch N ends: an intact run of
  records numbered N+1 found *after* damage that began where N ended can only
  be the tail of batch N+1 whose head was destroyed, and is not taken for a
  whole batch (it is set aside with the damage). A run numbered higher may
  still be such a tail when its first record carries no "d" (writers add "d"
  to a batch's first record once an fsync has returned, see state/batch.py);
  then nothing in the bytes can tell, and it is kept as a batch.
- `TolerantReplay` applies the kept batches to a QueueState, skipping (and
  counting) each record that the strict rules refuse: those about a job whose
  ENQUEUE was lost, or in a state that lost records would have explained. A
  batch whose records all fit the state goes in whole; the others record by
  record. The strict replay itself stays as it is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ..log import framing
from ..log.records import (
    BATCH,
    DURABLE,
    ID,
    PAYLOAD,
    TOKEN,
    WAIT,
    Record,
    RecordType,
)
from ..log.tail import decode_payload
from ..state.state import TRANSITIONS, Applied, JobState, QueueState, ReplayError

# The state each job record requires before it (from the one table the strict
# replay follows); PURGE and FORGET are about no single live job.
_REQUIRED: dict[int, JobState] = {
    rtype: before for (rtype, before) in TRANSITIONS
    if before is not None and rtype not in (RecordType.PURGE, RecordType.FORGET)}
_UNFINISHED = (JobState.PENDING, JobState.LEASED, JobState.WAITING)

__all__ = ["Region", "Scan", "find_batches", "read_batch", "TolerantReplay", "Restart",
           "Skipped"]


@dataclass(frozen=True, slots=True)
class Region:
    """Damaged bytes [offset, offset + length): what reading could not keep."""

    offset: int
    length: int
    reason: str
    job_ids: tuple[str, ...] = ()  # ids named by records that still frame inside it


@dataclass(slots=True)
class Scan:
    """What `find_batches` found in one log file's bytes."""

    batches: list[list[Applied]] = field(default_factory=list)
    damaged: list[Region] = field(default_factory=list)
    end: int = 0  # after the last non-zero byte: what follows is preallocated zeros


def read_batch(data: bytes, pos: int) -> tuple[list[Applied] | None, int, str]:
    """The whole batch starting at `pos`: (records, its end, "") or (None, pos, why not)."""
    batch: list[Applied] = []
    start = pos
    number = None
    while True:
        outcome, type_byte, payload, nxt = framing.decode_record(data, pos)
        if outcome == framing.END:
            return None, start, "batch never finished" if batch else "zeros before later bytes"
        if outcome == framing.INCOMPLETE:
            return None, start, "record runs past the end of the file"
        if outcome == framing.BAD:
            return None, start, payload.decode("ascii")
        record = decode_payload(payload)
        if record is None:
            return None, start, "record is not a JSON object"
        if number is None:
            number = record.get(BATCH)
            if type(number) is not int or number < 1:
                return None, start, f"bad batch number {number!r}"
        elif record.get(BATCH) != number:
            return None, start, f"record of batch {record.get('b')!r} inside batch {number}"
        batch.append(Applied(type_byte & framing.TYPE_MASK, record, pos, nxt - pos))
        pos = nxt
        if not type_byte & framing.MORE:
            return batch, pos, ""


def _ids_in(data: bytes, start: int, stop: int) -> tuple[str, ...]:
    """Job ids of the records that still frame inside damaged bytes."""
    ids: dict[str, None] = {}
    marker = framing.RESYNC_MARKER
    hit = data.find(marker, start + framing.RECORD_HEADER.size, stop)
    while hit != -1:
        outcome, _, payload, nxt = framing.decode_record(data, hit - framing.RECORD_HEADER.size)
        record = decode_payload(payload) if outcome == framing.RECORD and nxt <= stop else None
        job_id = None if record is None else record.get(ID)
        if isinstance(job_id, str):
            ids[job_id] = None
        hit = data.find(marker, hit + 1, stop)
    return tuple(ids)


def _resume(data: bytes, after: int, end: int, last: int
            ) -> tuple[int, list[Applied], int] | None:
    """The first offset > `after` where an intact batch numbered > `last` starts."""
    marker = framing.RESYNC_MARKER
    hit = data.find(marker, after + 1 + framing.RECORD_HEADER.size, end)
    while hit != -1:
        start = hit - framing.RECORD_HEADER.size
        # The first record alone decides most candidates (the rest of the damaged
        # batch, record after record): only a plausible start is read as a batch.
        outcome, _, payload, _ = framing.decode_record(data, start)
        head = decode_payload(payload) if outcome == framing.RECORD else None
        number = None if head is None else head.get(BATCH)
        # b == last + 1 right after damage is the tail of that batch (see above),
        # unless its first record carries "d", which only a batch's first does.
        if head is not None and type(number) is int and (
                number > last + 1 or (number > last and DURABLE in head)):
            batch, stop, _ = read_batch(data, start)
            if batch is not None:
                return start, batch, stop
        hit = data.find(marker, hit + 1, end)
    return None


def find_batches(data: bytes, generation: int, *, stop_at_damage: bool = False) -> Scan:
    """Every intact batch of the bytes of log file `generation` (header included) and
    every damaged region between them. With `stop_at_damage`, everything from the
    first damage on is one region (a point-in-time recovery)."""
    end = len(data.rstrip(b"\0"))
    scan = Scan(end=max(end, framing.FILE_HEADER.size))
    pos = framing.FILE_HEADER.size
    try:
        named = framing.decode_file_header(data)
        bad_header = "" if named == generation else f"header says generation {named}"
    except framing.FrameError as exc:
        bad_header = str(exc)
    if bad_header:
        # A header has a fixed size: the batches after a damaged one start where
        # they always do (point-in-time keeps nothing after damage, though).
        stop = scan.end if stop_at_damage else pos
        scan.damaged.append(Region(0, stop, f"file header: {bad_header}", ()))
        if stop_at_damage:
            return scan
    last = 0
    while pos < end:
        batch, stop, reason = read_batch(data, pos)
        if batch is not None:
            number = batch[0].record[BATCH]
            if number > last:
                scan.batches.append(batch)
                last, pos = number, stop
                continue
            reason = f"batch {number} out of order after batch {last}"
        found = None if stop_at_damage else _resume(data, pos, end, last)
        stop = end if found is None else found[0]
        scan.damaged.append(Region(pos, stop - pos, reason, _ids_in(data, pos, stop)))
        if found is None:
            break
        _, batch, pos = found
        scan.batches.append(batch)
        last = batch[0].record[BATCH]
    return scan


@dataclass(frozen=True, slots=True)
class Skipped:
    """A record of a kept batch that the strict rules refused."""

    offset: int
    job_id: str | None
    reason: str


class Restart(Exception):
    """A batch failed halfway on the fast path: replay again with careful=True."""


class TolerantReplay:
    """Apply batches to a fresh state, skipping the records that cannot apply.

    Everything goes through the state's own apply_batch (the batch number is
    allowed to jump, since batches were lost), so every rule that decides what
    a record means is the strict replay's: a batch that fits goes in whole, any
    other one record at a time as batches of one. The state checks a job's
    existence, state and token before changing anything, so a record refused
    for those reasons changes nothing; salvage.py replays what it writes
    strictly before trusting it anyway.
    """

    def __init__(self, *, careful: bool = False) -> None:
        self.state = QueueState()
        self.careful = careful  # every batch record by record (after a Restart)
        self.skipped: list[Skipped] = []
        self.records = 0

    def apply_batch(self, batch: Sequence[Applied]) -> None:
        state = self.state
        # Record by record, an ack comes before the RELEASE its batch holds: the strict
        # check that a batch settles the dependents it frees cannot apply; salvage.py
        # releases those left waiting for nothing (_release_freed).
        state.waits.touched = None
        number = batch[0].record[BATCH]
        if not self.careful and self._plausible(batch):
            # The usual case: every record fits the state as it is, so the batch is
            # applied whole, as the strict replay would. A record that still fails
            # (a malformed field) may leave the state half-applied: Restart says to
            # replay everything again with careful=True.
            state.last_batch = number - 1 if number > 1 else 0
            try:
                state.apply_batch(batch)
            except ReplayError:
                raise Restart from None
            self.records += len(batch)
            return
        for applied in batch:
            number = applied.record[BATCH]
            saved = state.last_batch
            state.last_batch = number - 1 if number > 1 else 0
            try:
                state.apply_batch([applied])
            except ReplayError as exc:
                state.last_batch = max(saved, number)
                job_id = applied.record.get(ID)
                self.skipped.append(Skipped(applied.offset,
                                            job_id if isinstance(job_id, str) else None,
                                            exc.reason))
                continue
            self.records += 1

    def _plausible(self, batch: Sequence[Applied]) -> bool:
        """Whether every record finds its job (or its absence) as it requires, judged
        against the state before the batch. False sends the batch down the careful
        path, record by record (also when its records depend on each other)."""
        jobs, keys = self.state.jobs, self.state.done_keys
        added: set[object] = set()  # the batch's new jobs, which its later ones may wait for
        for rtype, record, _, _ in batch:
            job_id = record.get(ID)
            required = _REQUIRED.get(rtype)
            if required is not None:
                entry = jobs.get(job_id) if isinstance(job_id, str) else None
                if entry is None or entry.state is not required or (
                        required is JobState.LEASED and record.get(TOKEN) != entry.token):
                    return False
                if rtype == RecordType.RELEASE and not self._freed(str(job_id), batch):
                    return False
                if rtype == RecordType.REVIVE or (rtype == RecordType.CANCEL
                                                  and PAYLOAD in record):
                    return False  # revivals depend on the batch's other records: carefully
            elif rtype in (RecordType.ENQUEUE, RecordType.JOB):
                if not isinstance(job_id, str) or job_id in jobs:
                    return False
                if rtype == RecordType.ENQUEUE and not self._can_wait(record, added):
                    return False
                added.add(job_id)
            elif rtype == RecordType.KEY:
                if job_id in keys:
                    return False
            elif rtype == RecordType.FORGET:
                if job_id not in keys:
                    return False
            elif rtype != RecordType.PURGE:
                # SNAPSHOT checks the batch's job count (a snapshot's tail fails it), and
                # a record type this check does not know: both go carefully.
                return False
        return True

    def _can_wait(self, record: Record, added: set[object]) -> bool:
        """Whether a waiting ENQUEUE's prerequisites (`w`) are all jobs not finished
        yet, as replay requires: known before the batch or added earlier in it."""
        unmet = record.get(WAIT)
        if unmet is None:
            return True
        if type(unmet) is not list:
            return False
        jobs = self.state.jobs
        for prerequisite in unmet:
            if prerequisite in added:
                continue
            entry = jobs.get(prerequisite) if isinstance(prerequisite, str) else None
            if entry is None or entry.state not in _UNFINISHED:
                return False
        return True

    def _freed(self, job_id: str, batch: Sequence[Applied]) -> bool:
        """Whether the batch acks or cancels every prerequisite waiting job `job_id`
        still waits for (what its RELEASE needs; any other case goes carefully)."""
        wait = self.state.waits.by_job.get(job_id)
        finished = {record.get(ID) for rtype, record, _, _ in batch
                    if rtype in (RecordType.ACK, RecordType.CANCEL)}
        return wait is not None and all(p in finished for p in wait.unmet)

    @property
    def unknown_jobs(self) -> tuple[str, ...]:
        """Jobs that kept records name although their ENQUEUE (or snapshot) was lost."""
        ids: dict[str, None] = {}
        for skip in self.skipped:
            if skip.job_id is not None and "unknown job" in skip.reason:
                ids[skip.job_id] = None
        return tuple(ids)
