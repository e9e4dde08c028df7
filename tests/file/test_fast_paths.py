"""The replay state's fast paths agree with its general path, record for record.

Replay checks the fields of the records every call reads forward (LEASE, ACK,
and the token of every fenced record) in one expression, and walks the
general checks (fields.field) only when something is off; and it builds a
leased job's Entry only when someone looks at it. Here a reference state
that always takes the general path, and builds every held entry at once,
replays the same batches: valid random histories, and the same histories
with one field of one record broken in every way the general checks know.
Both must accept the same batches, refuse the same ones at the same offset,
and end in equal states. The same for a batch's run of ACKs and LEASEs applied
in one step (settle_run.py): a worker's batches, and the fuzzer's queues' logs
(read from disk; the rest is pure).
"""

from __future__ import annotations

import os
import random
import tempfile
import unittest
from collections.abc import Iterator, Sequence
from typing import Any

import harness.support  # noqa: F401  (puts src/ on sys.path)
from harness.fuzz import build_corpus, make_case, materialise
from harness.fuzz.corpus import NAME

from file.test_state import RT, Log, ack, ack_result, enq, lease, progress, random_history
from nobroker.errors import NobrokerError
from nobroker.file.disk.fs import FileSystem
from nobroker.file.log.logfile import LogFile
from nobroker.file.log.records import Record, ReplayError
from nobroker.file.state.fieldchecks import field
from nobroker.file.state.state import Applied, JobState, QueueState
from nobroker.file.state.transitions import (
    ALLOWED,
    FENCED,
    JOB_RECORDS,
    ReplayState,
    apply_ack,
    expect_state,
)

# Values a writer never puts where a token, a time or an id belongs, and a few it does.
ODD_VALUES: tuple[Any, ...] = (True, False, None, 0, -1, 1, 7, 2**63, -2**63 - 1, 1.5,
                               0.0, 3.0, "x", "0000000000000001", [], {})
_MISSING = object()


def general_lease(state: ReplayState, slot: int, job_id: str, rec: Record, offset: int,
                  size: int) -> None:
    token = field(rec, "tok", int, offset)
    if token < 1:
        raise ReplayError(offset, f"bad fencing token {token}")
    until = field(rec, "until", float, offset)
    state.next_token = max(state.next_token, token + 1)
    state.pending -= 1
    state.leased += 1
    state.table.lease(slot, job_id, token, until)


def general_ack(state: ReplayState, slot: int, job_id: str, rec: Record, offset: int,
                size: int) -> None:
    field(rec, "t", float, offset)  # the general check, then the same effect
    apply_ack(state, slot, job_id, rec, offset, size)


# The record functions with a fast path of their own, replaced by the general checks.
GENERAL_RECORDS = {RT.LEASE: general_lease, RT.ACK: general_ack}


class GeneralState(QueueState):
    """The replay state with every fast path replaced by the general checks."""

    def _apply_settle_run(self, batch: Sequence[Applied], number: int, latest: float
                          ) -> tuple[int, float]:
        return 0, latest  # no run of ACKs and LEASEs in one step: each record by _apply

    def _apply(self, rtype: int, rec: Record, offset: int, size: int) -> None:
        allowed = ALLOWED.get(rtype)
        if allowed is None:
            self._apply_other(rtype, rec, offset, size)
            return
        job_id = field(rec, "id", str, offset)
        table = self.table
        slot = table.find(job_id)
        if slot < 0:
            raise ReplayError(offset, f"record type {rtype} for unknown job {job_id!r}")
        if table.code[slot] not in allowed:
            expect_state(table, slot, job_id, allowed, offset)
        if rtype in FENCED:
            token = field(rec, "tok", int, offset)
            if table.leases[table.seqs[slot]][0] != token:
                raise ReplayError(offset, "token mismatch")
        GENERAL_RECORDS.get(rtype, JOB_RECORDS[rtype])(self, slot, job_id, rec, offset, size)


def outcome(state: QueueState, batches: list[list[Applied]]) -> tuple[object, ...]:
    """What replaying `batches` into `state` gives: the state's fingerprint and the
    held entries, or the offset of the record refused."""
    try:
        for batch in batches:
            state.apply_batch(batch)
    except ReplayError as exc:
        return ("refused", exc.offset)
    held = sorted((e.id, e.token, e.lease_until, e.attempts, e.loc)
                  for e in state.entries(JobState.LEASED))
    kinds = sorted({type(value).__name__ for value in state.done_keys.values()})
    return ("accepted", state.fingerprint(), held, state.latest_time, kinds)


def broken(batches: list[list[Applied]], index: int, key: str, value: Any
           ) -> list[list[Applied]]:
    """`batches` up to two past the one holding the `index`th record, with that
    record's field `key` set to `value` (or removed, for _MISSING). Replay never
    changes the records it reads, so the others are shared, not copied."""
    flat = [(b, r) for b, batch in enumerate(batches) for r in range(len(batch))]
    b, r = flat[index]
    out = batches[:b + 3]
    rtype, rec, offset, size = out[b][r]
    rec = dict(rec)
    if value is _MISSING:
        rec.pop(key, None)
    else:
        rec[key] = value
    out[b] = [*out[b][:r], Applied(rtype, rec, offset, size), *out[b][r + 1:]]
    return out


class FastPathAgreementTest(unittest.TestCase):
    def test_valid_histories_replay_to_the_same_state_by_either_path(self) -> None:
        for seed in range(20):
            batches = random_history(random.Random(seed), 300, generated=seed % 2 == 0)
            with self.subTest(seed=seed):
                self.assertEqual(outcome(QueueState(), batches),
                                 outcome(GeneralState(), batches))

    def test_a_broken_field_of_a_lease_ack_or_fenced_record_is_refused_alike(self) -> None:
        checked = 0
        for seed in range(4):
            rng = random.Random(1000 + seed)
            batches = random_history(rng, 100, generated=True)
            flat = [rec for batch in batches for rec in batch]
            for index, (rtype, rec, _, _) in enumerate(flat):
                if rtype not in (RT.LEASE, RT.ACK, RT.NACK, RT.EXTEND, RT.EXPIRE):
                    continue
                for key in ("id", "tok", "until", "t"):
                    if key not in rec and key != "tok":
                        continue
                    for value in (*rng.sample(ODD_VALUES, 5), _MISSING):
                        variant = broken(batches, index, key, value)
                        with self.subTest(seed=seed, record=index, key=key, value=value):
                            self.assertEqual(outcome(QueueState(), variant),
                                             outcome(GeneralState(), variant))
                        checked += 1
        self.assertGreater(checked, 500)

    def test_an_int_deadline_is_applied_as_a_float_like_a_checkpoint_gives_it(self) -> None:
        log = Log()
        batches = [log.batch((RT.ENQUEUE, {"id": "j", "pr": 0, "at": 0.0, "t": 0.0, "ma": 3,
                                           "p": 1})),
                   log.batch(lease("j", 4, until=100))]  # type: ignore[arg-type]
        fast, general = QueueState(), GeneralState()
        self.assertEqual(outcome(fast, batches), outcome(general, batches))
        self.assertIs(type(fast.jobs["j"].lease_until), float)


def worker_history(rng: random.Random, rounds: int) -> list[list[Applied]]:
    """A worker's batches: k ACKs then k LEASEs (ack_many_and_lease), one of each
    (ack_and_lease), a lease alone; with keyed jobs, notes, now and then an ACK with
    a result or a PROGRESS in the run, and enqueues between them. Valid throughout."""
    log = Log()
    pending: list[str] = []
    held: dict[str, int] = {}
    token = serial = 0
    for _ in range(rounds):
        if len(pending) < 20 or rng.random() < 0.1:
            records = []
            for _ in range(rng.randrange(1, 40)):
                serial += 1
                records.append(enq(f"{serial:016x}" if rng.random() < 0.8 else f"k{serial}",
                                   keyed=True if rng.random() < 0.2 else None,
                                   m={"n": serial} if rng.random() < 0.1 else None,
                                   t=float(serial)))
                pending.append(records[-1][1]["id"])
            log.batch(*records)
            continue
        k = rng.choice((1, 1, 2, 16))
        records = []
        for job_id in rng.sample(sorted(held), min(k, len(held))):
            tok = held.pop(job_id)
            kind = rng.random()
            if kind < 0.05:
                records.append(ack_result(job_id, tok, [1], t=float(serial)))
            elif kind < 0.1:
                records.append(progress(job_id, tok, [0.5, None], t=float(serial)))
                held[job_id] = tok
            else:
                records.append(ack(job_id, tok, t=float(serial + rng.random())))
        for _ in range(min(k, len(pending))):
            token += 1
            job_id = pending.pop(rng.randrange(len(pending)) if rng.random() < 0.2 else 0)
            held[job_id] = token
            records.append(lease(job_id, token, until=float(serial + 30), t=float(serial)))
        if records:
            log.batch(*records)
    return log.batches


def fuzz_batches(cases: int = 80) -> Iterator[list[list[Applied]]]:
    """The batches the fuzzer's queues hold (tests/harness/fuzz: real workloads'
    logs, then damaged): each log's, read up to its first damage."""
    with tempfile.TemporaryDirectory() as root:
        corpus = build_corpus(os.path.join(root, "corpus"))
        for index in range(cases):
            files, _ = make_case(corpus, 11, index) if index else (corpus.seeds["gen0"], [])
            directory = os.path.join(root, str(index))
            materialise(directory, files)
            for name in sorted(files):
                if not (name.startswith(f"{NAME}.") and name.endswith(".log")):
                    continue
                batches: list[list[Applied]] = []
                try:
                    log = LogFile.open(FileSystem(), directory, NAME, int(name.split(".")[1]),
                                       readonly=True)
                except (NobrokerError, ValueError):
                    continue
                try:
                    log.scan(batches.append, 0)
                except NobrokerError:
                    pass  # what came before the damage
                finally:
                    log.close()
                if batches:
                    yield batches


class SettleRunTest(unittest.TestCase):
    """A batch's run of ACKs and LEASEs in one step (settle_run.py) against _apply."""

    def test_worker_batches_replay_to_the_same_state_by_either_path(self) -> None:
        for seed in range(12):
            batches = worker_history(random.Random(seed), 400)
            with self.subTest(seed=seed):
                self.assertEqual(outcome(QueueState(), batches),
                                 outcome(GeneralState(), batches))

    def test_a_broken_field_of_a_worker_batch_is_refused_alike(self) -> None:
        checked = 0
        rng = random.Random(7)
        batches = worker_history(rng, 30)
        flat = [rec for batch in batches for rec in batch]
        for index, (rtype, _, _, _) in enumerate(flat):
            if rtype not in (RT.LEASE, RT.ACK) or rng.random() < 0.7:
                continue
            for key in ("b", "id", "tok", "until", "t", "r"):
                for value in (*rng.sample(ODD_VALUES, 2), _MISSING):
                    variant = broken(batches, index, key, value)
                    with self.subTest(record=index, key=key, value=value):
                        self.assertEqual(outcome(QueueState(), variant),
                                         outcome(GeneralState(), variant))
                    checked += 1
        self.assertGreater(checked, 300)

    def test_a_record_the_run_cannot_take_ends_it_and_the_rest_go_one_by_one(self) -> None:
        log = Log()
        log.batch(enq("a"), enq("b"), enq("c"))
        log.batch(lease("a", 1), lease("b", 2))
        # An ACK with a result in the middle: the first ACK in the run, the rest after.
        log.batch(ack("a", 1), ack_result("b", 2, [1]), lease("c", 3))
        fast, general = QueueState(), GeneralState()
        self.assertEqual(outcome(fast, log.batches), outcome(general, log.batches))
        self.assertEqual((fast.jobs["b"].state, fast.jobs["c"].state),
                         (JobState.DONE, JobState.LEASED))
        # A lease of the job kept done, and an ack of one no longer leased: refused alike.
        for bad in (lease("b", 4), ack("a", 1)):
            batches = [*log.batches, Log(log.number).batch(ack("c", 3), bad)]
            with self.subTest(bad=bad):
                refused = outcome(QueueState(), batches)
                self.assertEqual(refused[0], "refused")
                self.assertEqual(refused, outcome(GeneralState(), batches))

    def test_the_fuzzers_queues_replay_to_the_same_state_by_either_path(self) -> None:
        replayed = 0
        for batches in fuzz_batches():
            with self.subTest(case=replayed):
                self.assertEqual(outcome(QueueState(), batches),
                                 outcome(GeneralState(), batches))
            replayed += 1
        self.assertGreater(replayed, 20)


class HeldEntryTest(unittest.TestCase):
    """A leased job's entry is built when first looked at, and is a snapshot."""

    def test_every_held_entry_equals_one_built_from_the_columns_after_every_batch(self) -> None:
        for seed in range(8):
            state = QueueState()
            for batch in random_history(random.Random(seed), 250, generated=True):
                # Look at some held jobs before the batch, so stale views would show.
                for entry in list(state.entries(JobState.LEASED))[:3]:
                    state.jobs.get(entry.id)
                state.apply_batch(batch)
                for entry in state.entries(JobState.LEASED):
                    with self.subTest(seed=seed, job=entry.id):
                        self.assertEqual(state.jobs.get(entry.id), entry)
                        self.assertEqual(state.jobs[entry.id], entry)

    def test_an_entry_taken_before_an_extend_keeps_the_old_deadline(self) -> None:
        log = Log()
        state = QueueState()
        state.apply_batch(log.batch((RT.ENQUEUE, {"id": "j", "pr": 0, "at": 0.0, "t": 0.0,
                                                  "ma": 3, "p": 1})))
        state.apply_batch(log.batch(lease("j", 1, until=50.0)))
        before = state.jobs["j"]
        state.apply_batch(log.batch((RT.EXTEND, {"id": "j", "tok": 1, "until": 90.0})))
        self.assertEqual(before.lease_until, 50.0)
        self.assertEqual(state.jobs["j"].lease_until, 90.0)


if __name__ == "__main__":
    unittest.main()
