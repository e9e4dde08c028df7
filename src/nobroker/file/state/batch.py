"""A batch: the records of one API call, built as JSON text and framed so that
they commit or vanish together.

The planning functions (commands.py) add records to a batch; the handle
encodes it at the log's end and applies what replay will see (each record
without its payload or result text, which memory never keeps) to its state.
The common records (ENQUEUE, LEASE, ACK) are written as text directly, the
way `dumps` would (log/records.py's text builders). Pure: no os, time,
random or threads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from itertools import accumulate
from json.encoder import encode_basestring_ascii as quote  # as records.py's texts
from typing import Final

from ..log import framing
from ..log.records import (
    AT,
    BATCH,
    DURABLE,
    ID,
    IS_KEY,
    MAX_ATTEMPTS,
    META,
    PAYLOAD,
    PAYLOAD_KEY_TEXT,
    PRIORITY,
    RESULT,
    RESULT_KEY_TEXT,
    TIME,
    TOKEN,
    UNTIL,
    Applied,
    Record,
    RecordType,
    ack_text,
    dumps,
    enqueue_text,
    lease_text,
)

__all__ = ["Batch"]

# Records that may make a job leasable: idle workers are poked after the commit.
_WAKING: Final = frozenset({RecordType.ENQUEUE, RecordType.RELEASE, RecordType.NACK,
                            RecordType.EXPIRE, RecordType.REQUEUE, RecordType.SNOOZE})


class Batch:
    """The records of one API call, framed so that they commit or vanish together."""

    def __init__(self, number: int, durable: int = 0, keep: float = 0.0) -> None:
        self.number = number
        # The first record carries "d": how far the log was known to be on disk when
        # the batch was planned (an fsync that covered it had returned). Damage before
        # that offset was durable, so reading refuses it rather than cutting it as a
        # torn tail, however many zeros lie between (docs/FORMAT.md, "Recovery").
        self.durable = durable
        # (type, JSON text, what replay will see: the record without its payload text)
        self._items: list[tuple[int, str, Record]] = []
        self.wakes = 0  # records that may make a job leasable: idle workers are poked
        self.finishes = 0  # records that finish a job: result waiters are poked
        self.reclaimed_dead: list[str] = []  # jobs whose lease expiry dead-lettered them
        # Dependencies (dependencies.plan_dependents): how long a dependent this batch
        # cancels is kept, how many of each waiting job's unmet prerequisites it has
        # finished so far, and the waiting jobs it has already released or cancelled.
        self.keep = keep
        self.met: dict[str, int] = {}
        self.resolved: set[str] = set()
        # The waiting jobs it releases, in order: a lease planned after their RELEASE
        # may take them in the same batch (dependencies.with_released).
        self.released: list[str] = []
        # The payload JSON text of the job whose record is at an offset of the live log
        # (the writer's, commit.py): a dependent a failure cancels keeps it, revivable.
        # None (a batch planned without the log): such dependents are not revivable.
        self.payload_of: Callable[[int], str] | None = None
        # The concurrency limits the planning process declared (family -> holders): a
        # limited job's ENQUEUE carries its key's as "cc", for processes that did not
        # declare it (limitfields.plan_limited_enqueue).
        self.caps: Mapping[str, int] = {}
        # nobroker migrate's copies: each job's own cap, by id, in place of `caps` (two
        # jobs of one key may carry different ones, as enqueued one by one they would).
        self.job_caps: Mapping[str, int] | None = None

    def cap_of(self, job_id: str, key_family: str) -> int | None:
        """The cap declared for a concurrency key of `key_family` (a copy's: its own)."""
        return self.caps.get(key_family) if self.job_caps is None \
            else self.job_caps.get(job_id)

    def __len__(self) -> int:
        return len(self._items)

    def records(self) -> Iterator[tuple[int, Record]]:
        """(type, record) of every record added so far."""
        return ((rtype, record) for rtype, _, record in self._items)

    def last_id(self) -> str:
        """The job id of the record added last."""
        return str(self._items[-1][2][ID])

    def add(self, rtype: RecordType, fields: Record) -> Record:
        if rtype in _WAKING:
            self.wakes += 1
        record = {**self._head(), **fields}
        self._items.append((rtype, dumps(record), record))
        return record

    def _head(self) -> Record:
        """The fields every record starts with: the batch number, and "d" on the first."""
        if self.durable and not self._items:
            return {BATCH: self.number, DURABLE: self.durable}
        return {BATCH: self.number}

    def add_payload(self, rtype: RecordType, fields: Record, payload_text: str) -> Record:
        """A record carrying a job payload that is already JSON text (not encoded twice)."""
        if rtype in _WAKING:
            self.wakes += 1
        record = {**self._head(), **fields}
        head = dumps(record)
        record[PAYLOAD] = None  # replay checks the payload is there; memory never keeps it
        self._items.append((rtype, f'{head[:-1]}{PAYLOAD_KEY_TEXT}{payload_text}}}', record))
        return record

    def add_result(self, rtype: RecordType, fields: Record, result_text: str) -> Record:
        """A record carrying a job's result as JSON text, under "r", its last key (read
        back by key, like payloads); replay sees "r" as None and memory never keeps it."""
        record = {**self._head(), **fields}
        head = dumps(record)
        record[RESULT] = None
        self._items.append((rtype, f'{head[:-1]}{RESULT_KEY_TEXT}{result_text}}}', record))
        return record

    def add_enqueue(self, job_id: str, priority: int, at: float, t: float,
                    max_attempts: int, keyed: bool, payload_text: str) -> None:
        """An ENQUEUE record (the common case of add_payload, without a dumps call)."""
        self.wakes += 1
        durable = 0 if self._items else self.durable
        record = self._head()
        record.update({ID: job_id, PRIORITY: priority, AT: at, TIME: t, MAX_ATTEMPTS: max_attempts})
        if keyed:
            record[IS_KEY] = True
        record[PAYLOAD] = None
        self._items.append((RecordType.ENQUEUE, enqueue_text(
            self.number, job_id, priority, at, t, max_attempts, keyed, payload_text,
            durable), record))

    def add_meta(self, job_id: str, meta: Record) -> None:
        """The ENQUEUE of `job_id` added last carries the job's metadata too (format
        1.2): under "m", before its payload, which stays the last key."""
        items = self._items  # from the end: the record is most often the last one
        index = next(i for i in range(len(items) - 1, -1, -1)
                     if items[i][0] == RecordType.ENQUEUE and items[i][2][ID] == job_id)
        rtype, text, record = self._items[index]
        cut = text.index(PAYLOAD_KEY_TEXT)  # the first: a quote in a string is escaped
        self._items[index] = (rtype, f'{text[:cut]},"{META}":{dumps(meta)}{text[cut:]}',
                              {**record, META: meta})

    def add_ack(self, job_id: str, token: int, t: float) -> None:
        """An ACK record without a result (add()'s text, without a dumps call)."""
        number, durable = self.number, 0 if self._items else self.durable
        record: Record = {BATCH: number, DURABLE: durable, ID: job_id, TOKEN: token, TIME: t} \
            if durable else {BATCH: number, ID: job_id, TOKEN: token, TIME: t}
        self._items.append((RecordType.ACK, ack_text(number, job_id, token, t, durable),
                            record))

    def add_lease(self, job_id: str, token: int, until: float, t: float) -> Record:
        """A LEASE record (add()'s text, without a dumps call); returns the record."""
        number, durable = self.number, 0 if self._items else self.durable
        record: Record = {BATCH: number, DURABLE: durable, ID: job_id, TOKEN: token,
                          UNTIL: until, TIME: t} if durable else \
            {BATCH: number, ID: job_id, TOKEN: token, UNTIL: until, TIME: t}
        self._items.append((RecordType.LEASE,
                            lease_text(number, job_id, token, until, t, durable), record))
        return record

    def add_acks(self, ids: Sequence[str], tokens: Sequence[int], t: float) -> None:
        """ACK records without a result (add_ack's, each), the text they share
        formatted once: ack_many's path."""
        if not ids:
            return
        self.add_ack(ids[0], tokens[0], t)  # the first may carry "d"
        if len(ids) == 1:
            return
        number = self.number
        tail = f',"t":{t!r}}}'
        base: Record = {BATCH: number, ID: "", TOKEN: 0, TIME: t}
        append, copy, rtype = self._items.append, base.copy, RecordType.ACK
        for job_id, token in zip(ids[1:], tokens[1:], strict=True):
            record = copy()
            record[ID], record[TOKEN] = job_id, token
            append((rtype, f'{{"b":{number:d},"id":{quote(job_id)},"tok":{token:d}{tail}',
                    record))

    def add_leases(self, ids: Sequence[str], token: int, until: float, t: float
                   ) -> list[Record]:
        """LEASE records (add_lease's, each) under tokens `token`, `token` + 1, ...;
        the text they share formatted once: a lease of k jobs' path. Their records."""
        if not ids:
            return []
        leased = [self.add_lease(ids[0], token, until, t)]  # the first may carry "d"
        if len(ids) == 1:
            return leased
        number = self.number
        tail = f',"until":{until!r},"t":{t!r}}}'
        base: Record = {BATCH: number, ID: "", TOKEN: 0, UNTIL: until, TIME: t}
        append, copy, rtype = self._items.append, base.copy, RecordType.LEASE
        for job_id in ids[1:]:
            token += 1
            record = copy()
            record[ID], record[TOKEN] = job_id, token
            append((rtype, f'{{"b":{number:d},"id":{quote(job_id)},"tok":{token:d}{tail}',
                    record))
            leased.append(record)
        return leased

    def add_enqueues(self, ids: Sequence[str], priority: int, at: float, t: float,
                     max_attempts: int, payload_texts: Sequence[str]) -> None:
        """ENQUEUE records of new unkeyed jobs alike but for id and payload (what
        add_enqueue writes, each): the fields they share are formatted once."""
        items = self._items
        number = self.number
        shared = enqueue_text(number, "", priority, at, t, max_attempts, False, "")
        cut = shared.index(f',"{PRIORITY}":')
        head, tail = shared[:cut - 2], shared[cut:-1]  # the text around `"id":""` and "p"
        base: Record = {BATCH: number, ID: "", PRIORITY: priority, AT: at, TIME: t,
                        MAX_ATTEMPTS: max_attempts, PAYLOAD: None}
        rtype = RecordType.ENQUEUE
        start = 0
        if self.durable and not items:  # the first record of the batch carries "d"
            self.add_enqueue(ids[0], priority, at, t, max_attempts, False, payload_texts[0])
            start = 1
        self.wakes += len(ids) - start
        append, copy = items.append, base.copy
        for job_id, text in zip(ids[start:], payload_texts[start:], strict=True):
            # new_job_id's ids are hex digits: nothing in them needs JSON escaping.
            record = copy()
            record[ID] = job_id
            append((rtype, f'{head}"{job_id}"{tail}{text}}}', record))

    def encode(self, start: int) -> tuple[bytes, list[Applied]]:
        """The framed bytes to write at offset `start`, and what replay will apply."""
        items = self._items
        if len(items) == 1:  # most calls: skip the loop's bookkeeping
            rtype, text, record = items[0]
            frame = framing.encode_record(rtype, text.encode("utf-8"))
            return frame, [Applied(rtype, record, start, len(frame))]
        data, sizes = framing.encode_batch([(rtype, text.encode("utf-8"))
                                            for rtype, text, _ in items])
        rtypes, _, records = zip(*items, strict=True)
        # map() over the columns: about a third of the time of a loop that unpacks them.
        return data, list(map(Applied, rtypes, records, accumulate(sizes, initial=start),
                              sizes))
