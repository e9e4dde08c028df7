"""The pure replay state, tested without a disk.

Records are built as the log reader would hand them over: JSON text decoded
by the strict codec (records.loads), grouped into batches, with offsets. No
file, clock or thread is involved; `now` is always an argument.
"""

from __future__ import annotations

import copy
import random
import unittest
import zlib
from array import array
from collections.abc import Callable
from typing import Any
from unittest import mock

import harness.support  # noqa: F401  (puts src/ on sys.path)
from harness.support import REPO

from nobroker.errors import JobNotFoundError
from nobroker.file.generations import checkpoint
from nobroker.file.log.records import RecordType, dumps, loads
from nobroker.file.state import state as state_module
from nobroker.file.state.notes import note_fields
from nobroker.file.state.state import (
    TRANSITIONS,
    Applied,
    JobState,
    QueueState,
    ReplayError,
    id_seq,
    replay,
    seq_id,
)

RT = RecordType
JOB_TYPES = (RT.LEASE, RT.ACK, RT.NACK, RT.EXTEND, RT.EXPIRE, RT.REQUEUE, RT.CANCEL,
             RT.DELETE, RT.SNOOZE, RT.RELEASE, RT.REVIVE)


class Log:
    """Builds batches of decoded records with rising batch numbers and offsets."""

    def __init__(self, first_batch: int = 1) -> None:
        self.number = first_batch
        self.offset = 16
        self.batches: list[list[Applied]] = []

    def batch(self, *records: tuple[int, dict[str, Any]], number: int | None = None
              ) -> list[Applied]:
        num = self.number if number is None else number
        out: list[Applied] = []
        for rtype, fields in records:
            text = dumps({"b": num, **fields})
            rec = loads(text.encode("ascii"))  # exactly what the reader would decode
            size = 9 + len(text)
            out.append((int(rtype), rec, self.offset, size))
            self.offset += size
        self.number = num + 1
        self.batches.append(out)
        return out


def enq(job_id: str, *, pr: int = 0, at: float = 0.0, t: float = 0.0, ma: int = 3,
        keyed: bool | None = None, p: Any = "x", m: dict[str, Any] | None = None
        ) -> tuple[int, dict[str, Any]]:
    fields: dict[str, Any] = {"id": job_id, "pr": pr, "at": at, "t": t, "ma": ma}
    if keyed is not None:
        fields["k"] = keyed
    if m is not None:  # enqueue(meta=), format 1.2
        fields["m"] = m
    fields["p"] = p
    return RT.ENQUEUE, fields


def enq_waiting(job_id: str, waits_for: list[str], *, af: bool | None = None, at: float = 0.0,
                of: bool | None = None) -> tuple[int, dict[str, Any]]:
    fields: dict[str, Any] = {"id": job_id, "pr": 0, "at": at, "t": 0.0, "ma": 3,
                              "w": waits_for}
    if af is not None:
        fields["af"] = af
    if of is not None:
        fields["of"] = of
    fields["p"] = "x"
    return RT.ENQUEUE, fields


def release(job_id: str) -> tuple[int, dict[str, Any]]:
    return RT.RELEASE, {"id": job_id}


def lease(job_id: str, tok: int, until: float = 100.0, t: float = 0.0
          ) -> tuple[int, dict[str, Any]]:
    return RT.LEASE, {"id": job_id, "tok": tok, "until": until, "t": t}


def ack(job_id: str, tok: int, t: float = 1.0) -> tuple[int, dict[str, Any]]:
    return RT.ACK, {"id": job_id, "tok": tok, "t": t}


def nack(job_id: str, tok: int, at: float = 5.0, err: str | None = "boom"
         ) -> tuple[int, dict[str, Any]]:
    return RT.NACK, {"id": job_id, "tok": tok, "at": at, "err": err}


def snooze(job_id: str, tok: int, at: float = 5.0, err: str | None = "not yet"
           ) -> tuple[int, dict[str, Any]]:
    return RT.SNOOZE, {"id": job_id, "tok": tok, "at": at, "err": err}


def extend(job_id: str, tok: int, until: float = 200.0) -> tuple[int, dict[str, Any]]:
    return RT.EXTEND, {"id": job_id, "tok": tok, "until": until}


def progress(job_id: str, tok: int, pg: list[Any] | None = None,
             m: dict[str, Any] | None = None, t: float = 3.0) -> tuple[int, dict[str, Any]]:
    """A PROGRESS record (format 1.2): the holder's note on its job."""
    fields: dict[str, Any] = {"id": job_id, "tok": tok, "t": t}
    if pg is not None:
        fields["pg"] = pg
    if m is not None:
        fields["m"] = m
    return RT.PROGRESS, fields


def expire(job_id: str, tok: int, at: float = 5.0) -> tuple[int, dict[str, Any]]:
    return RT.EXPIRE, {"id": job_id, "tok": tok, "at": at}


def requeue(job_id: str, at: float = 7.0) -> tuple[int, dict[str, Any]]:
    return RT.REQUEUE, {"id": job_id, "at": at}


def purge(t: float = 0.0) -> tuple[int, dict[str, Any]]:
    return RT.PURGE, {"t": t}


def forget(job_id: str) -> tuple[int, dict[str, Any]]:
    return RT.FORGET, {"id": job_id}


def ack_result(job_id: str, tok: int, result: Any = None, t: float = 1.0, keep: float = 10.0
               ) -> tuple[int, dict[str, Any]]:
    return RT.ACK, {"id": job_id, "tok": tok, "t": t, "keep": keep, "r": result}


def cancel(job_id: str, t: float = 1.0, keep: float = 10.0) -> tuple[int, dict[str, Any]]:
    return RT.CANCEL, {"id": job_id, "t": t, "keep": keep}


def delete(job_id: str) -> tuple[int, dict[str, Any]]:
    return RT.DELETE, {"id": job_id}


def revivable_cancel(job_id: str, t: float = 1.0, keep: float = 10.0
                     ) -> tuple[int, dict[str, Any]]:
    """A dependent's CANCEL that a prerequisite's failure planned: its payload kept."""
    return RT.CANCEL, {"id": job_id, "t": t, "keep": keep, "err": "prerequisite died",
                       "p": "x"}


def revive(job_id: str, waits_for: list[str], at: float = 7.0) -> tuple[int, dict[str, Any]]:
    return RT.REVIVE, {"id": job_id, "at": at, "w": waits_for}


def revivable(job_id: str = "j") -> tuple[QueueState, Log]:
    """`job_id` waited for "p", whose death cancelled it (revivable); "p" is dead."""
    state, log = QueueState(), Log()
    state.apply_batch(log.batch(enq("p", ma=1), lease("p", 1), enq_waiting(job_id, ["p"])))
    state.apply_batch(log.batch(nack("p", 1), revivable_cancel(job_id)))
    return state, log


def snapshot_records(state: QueueState) -> list[tuple[int, dict[str, Any]]]:
    """The snapshot batch compaction writes for `state` (docs: JOB*, KEY*, SNAPSHOT)."""
    out: list[tuple[int, dict[str, Any]]] = []
    result_ends = dict(state.result_ends.items())
    for e in state.entries(finished=True):
        if e.state in (JobState.DONE, JobState.CANCELLED):
            # The finishing time is on disk, not in the state: any split of the end of
            # retention into fin + keep rebuilds the same state.
            finished: dict[str, Any] = {
                "id": e.id, "pr": e.priority, "t": e.enqueued_at, "ma": e.max_attempts,
                "a": e.attempts, "s": str(e.state), "fin": e.available_at, "keep": 0.0,
                "err": e.last_error, "k": e.keyed,
                **note_fields(state.notes.get(e.id)), "r": None}
            if e.id in result_ends:  # its result ends first: at fin + rkeep, below keep
                end = float(result_ends[e.id])
                finished.update({"fin": end, "keep": e.available_at - end, "rkeep": 0.0})
            sleeper = state.dormant.by_job.get(e.id)
            if sleeper is not None:  # revivable: what it waits for, its payload
                finished.update({"w": list(sleeper.unmet), "wf": list(sleeper.failed),
                                 "p": None})
                del finished["r"]
            out.append((RT.FINISHED, finished))
            continue
        fields: dict[str, Any] = {
            "id": e.id, "pr": e.priority, "at": e.available_at, "t": e.enqueued_at,
            "ma": e.max_attempts, "a": e.attempts, "s": str(e.state), "tok": e.token,
            "until": e.lease_until if e.state is JobState.LEASED else 0.0,
            "err": e.last_error, "k": e.keyed}
        wait = state.waits.by_job.get(e.id)
        if wait is not None:
            fields.update({"w": list(wait.unmet), "af": wait.mode == "any"})
            if wait.mode == "failure":
                fields["of"] = True
        fields.update(note_fields(state.notes.get(e.id)))  # format 1.2
        out.append((RT.JOB, {**fields, "p": None}))
    for job_id, done in state.done_keys.items():
        out.append((RT.KEY, {"id": job_id, "done": done,
                             **note_fields(state.notes.get(job_id))}))
    out.append((RT.SNAPSHOT, {"tok": state.next_token, "done": state.done,
                              "jobs": len(state.jobs), "kept": state.kept,
                              "paused": state.paused}))
    return out


def recount(state: QueueState) -> tuple[int, int, int, int]:
    states = [e.state for e in state.jobs.values()]
    return (states.count(JobState.PENDING), states.count(JobState.LEASED),
            states.count(JobState.DEAD), states.count(JobState.WAITING))


def in_state(before: JobState | None, *, ma: int = 3) -> tuple[QueueState, Log]:
    """A state holding job "j" in `before` (or no job at all); leased jobs hold token 1."""
    state, log = QueueState(), Log()
    if before is None:
        state.apply_batch(log.batch(enq("other")))
        return state, log
    if before is JobState.DONE:  # a finished keyed job: only its key is left
        state.apply_batch(log.batch(enq("j", ma=ma, keyed=True)))
        state.apply_batch(log.batch(lease("j", 1)))
        state.apply_batch(log.batch(ack("j", 1)))
        return state, log
    if before is JobState.WAITING:  # waiting for "p", which is leased under token 1
        state.apply_batch(log.batch(enq("p"), lease("p", 1), enq_waiting("j", ["p"])))
        return state, log
    state.apply_batch(log.batch(enq("j", ma=ma)))
    if before is JobState.CANCELLED:
        state.apply_batch(log.batch(cancel("j")))
        return state, log
    if before in (JobState.LEASED, JobState.DEAD):
        state.apply_batch(log.batch(lease("j", 1)))
    if before is JobState.DEAD:
        state.apply_batch(log.batch(nack("j", 1)))
        assert state.jobs["j"].state is JobState.DEAD, "setup needs max_attempts=1"
    return state, log


def record_for(rtype: RecordType, job_id: str = "j") -> tuple[int, dict[str, Any]]:
    makers: dict[RecordType, Callable[[], tuple[int, dict[str, Any]]]] = {
        RT.ENQUEUE: lambda: enq(job_id), RT.LEASE: lambda: lease(job_id, 2),
        RT.ACK: lambda: ack(job_id, 1), RT.NACK: lambda: nack(job_id, 1),
        RT.EXTEND: lambda: extend(job_id, 1), RT.EXPIRE: lambda: expire(job_id, 1),
        RT.REQUEUE: lambda: requeue(job_id), RT.PURGE: purge,
        RT.FORGET: lambda: forget(job_id), RT.CANCEL: lambda: cancel(job_id),
        RT.DELETE: lambda: delete(job_id), RT.SNOOZE: lambda: snooze(job_id, 1),
        RT.RELEASE: lambda: release(job_id), RT.REVIVE: lambda: revive(job_id, ["p"]),
        RT.PROGRESS: lambda: progress(job_id, 1, [0.5, "half"], {"k": 1})}
    return makers[rtype]()


class RecordTypesTest(unittest.TestCase):
    def test_enqueue_adds_a_pending_job_with_every_field_from_the_record(self) -> None:
        s = replay([Log().batch(enq("a", pr=4, at=9.5, t=2.0, ma=7, keyed=True))])
        e = s.jobs["a"]
        self.assertEqual((e.state, e.priority, e.available_at, e.enqueued_at, e.max_attempts,
                          e.attempts, e.keyed, e.token, e.last_error),
                         (JobState.PENDING, 4, 9.5, 2.0, 7, 0, True, 0, None))
        self.assertEqual((s.pending, s.leased, s.dead, s.done), (1, 0, 0, 0))

    def test_lease_records_token_deadline_and_counts_an_attempt(self) -> None:
        s, log = in_state(JobState.PENDING)
        s.apply_batch(log.batch(lease("j", 5, until=42.0)))
        e = s.jobs["j"]
        self.assertEqual((e.state, e.token, e.lease_until, e.attempts),
                         (JobState.LEASED, 5, 42.0, 1))
        self.assertEqual(s.next_token, 6)

    def test_ack_removes_the_job_and_counts_it_done(self) -> None:
        s, log = in_state(JobState.LEASED)
        s.apply_batch(log.batch(ack("j", 1, t=3.0)))
        self.assertNotIn("j", s.jobs)
        self.assertEqual((s.pending, s.leased, s.dead, s.done), (0, 0, 0, 1))
        self.assertEqual(s.done_keys, {}, "an unkeyed job leaves no key behind")

    def test_ack_of_a_keyed_job_remembers_its_key_with_the_ack_time(self) -> None:
        s, log = QueueState(), Log()
        s.apply_batch(log.batch(enq("k1", keyed=True)))
        s.apply_batch(log.batch(lease("k1", 1)))
        s.apply_batch(log.batch(ack("k1", 1, t=77.0)))
        self.assertEqual(s.done_keys, {"k1": 77.0})

    def test_enqueue_of_a_remembered_key_forgets_the_key(self) -> None:
        s, log = QueueState(), Log()
        s.apply_batch(log.batch(enq("k1", keyed=True)))
        s.apply_batch(log.batch(lease("k1", 1)))
        s.apply_batch(log.batch(ack("k1", 1)))
        s.apply_batch(log.batch(enq("k1", keyed=True)))
        self.assertEqual(s.done_keys, {})
        self.assertEqual(s.jobs["k1"].state, JobState.PENDING)

    def test_nack_below_max_attempts_returns_the_job_to_pending_at_its_retry_time(self) -> None:
        s, log = in_state(JobState.LEASED, ma=3)
        s.apply_batch(log.batch(nack("j", 1, at=55.0, err="disk full")))
        e = s.jobs["j"]
        self.assertEqual((e.state, e.available_at, e.last_error, e.token, e.attempts),
                         (JobState.PENDING, 55.0, "disk full", 0, 1))

    def test_snooze_returns_the_job_to_pending_with_its_attempt_not_counted(self) -> None:
        s, log = in_state(JobState.LEASED, ma=1)  # its last attempt: a nack would kill it
        s.apply_batch(log.batch(snooze("j", 1, at=55.0, err="lock held")))
        e = s.jobs["j"]
        self.assertEqual((e.state, e.available_at, e.last_error, e.token, e.attempts),
                         (JobState.PENDING, 55.0, "lock held", 0, 0))
        self.assertEqual((s.pending, s.leased, s.dead, s.retried), (1, 0, 0, 0))
        s.apply_batch(log.batch(lease("j", 2)))
        self.assertEqual(s.jobs["j"].attempts, 1, "the next lease is its first attempt")

    def test_nack_at_max_attempts_dead_letters_the_job(self) -> None:
        s, log = in_state(JobState.LEASED, ma=1)
        s.apply_batch(log.batch(nack("j", 1, err=None)))
        self.assertEqual(s.jobs["j"].state, JobState.DEAD)
        self.assertIsNone(s.jobs["j"].last_error)
        self.assertEqual((s.pending, s.leased, s.dead), (0, 0, 1))

    def test_nack_with_dl_dead_letters_the_job_whatever_attempts_remain(self) -> None:
        s, log = in_state(JobState.LEASED, ma=3)
        kind, fields = nack("j", 1, at=8.0, err="rejected")
        s.apply_batch(log.batch((kind, {**fields, "dl": True})))
        e = s.jobs["j"]
        self.assertEqual((e.state, e.available_at, e.last_error, e.attempts),
                         (JobState.DEAD, 8.0, "rejected", 1))
        self.assertEqual((s.pending, s.leased, s.dead, s.retried), (0, 0, 1, 0))
        self.assertEqual(s.dead_lettered, 1)

    def test_nack_with_dl_false_retries_and_a_non_boolean_dl_is_corruption(self) -> None:
        s, log = in_state(JobState.LEASED, ma=3)
        kind, fields = nack("j", 1)
        s.apply_batch(log.batch((kind, {**fields, "dl": False})))
        self.assertEqual(s.jobs["j"].state, JobState.PENDING)
        for bad in (1, "true", None):
            with self.subTest(dl=bad):
                s, log = in_state(JobState.LEASED, ma=3)
                with self.assertRaises(ReplayError):
                    s.apply_batch(log.batch((kind, {**fields, "dl": bad})))
                self.assertEqual(s.jobs["j"].state, JobState.LEASED, "nothing half applied")

    def test_ack_with_rkeep_keeps_the_job_for_keep_and_a_bad_rkeep_is_corruption(self
                                                                                ) -> None:
        fields = {"id": "j", "tok": 1, "t": 1.0, "keep": 100.0}
        s, log = in_state(JobState.LEASED)
        s.apply_batch(log.batch((RT.ACK, {**fields, "rkeep": 10.0, "r": 1})))
        self.assertEqual((s.jobs["j"].state, s.jobs["j"].available_at),
                         (JobState.DONE, 101.0), "kept for keep (its id's retention)")
        for bad in ({"rkeep": -1.0, "r": 1}, {"rkeep": 100.0, "r": 1},
                    {"rkeep": "10", "r": 1}):  # negative, not below keep, not a number
            with self.subTest(bad=bad):
                s, log = in_state(JobState.LEASED)
                with self.assertRaises(ReplayError):
                    s.apply_batch(log.batch((RT.ACK, {**fields, **bad})))
                self.assertEqual(s.jobs["j"].state, JobState.LEASED, "nothing half applied")

    def test_a_result_s_end_is_kept_by_snapshots_and_checkpoints_and_goes_with_its_job(
            self) -> None:
        # stats().kept stops counting a keyed job at its result's end ("rkeep"): no
        # record marks that time, so the state keeps it, and must carry it across.
        s, log = in_state(JobState.LEASED)
        s.apply_batch(log.batch((RT.ACK, {"id": "j", "tok": 1, "t": 1.0, "keep": 100.0,
                                          "rkeep": 10.0, "r": 1})))
        self.assertEqual((s.kept, s.kept_at(10.9), s.kept_at(11.0)), (1, 1, 0))
        for rebuilt in (snapshot_of(s), via_checkpoint(s)):
            self.assertEqual((rebuilt.kept_at(10.9), rebuilt.kept_at(11.0)), (1, 0))
            self.assertEqual(rebuilt.fingerprint(), s.fingerprint())
        real_dumps = checkpoint.json.dumps

        def as_before(obj: Any, *args: Any, **kwargs: Any) -> str:  # a writer without it
            if isinstance(obj, dict):
                obj = {k: v for k, v in obj.items() if k != "result_ends"}
            return real_dumps(obj, *args, **kwargs)

        with mock.patch.object(checkpoint.json, "dumps", as_before):
            data = checkpoint.encode(s, 0, 1 << 20, 7)
        with self.assertRaises(checkpoint.CheckpointError):  # replayed, not trusted
            checkpoint.decode(data, 0, 1 << 20, lambda _: 7)
        s.apply_batch(log.batch(forget("j")))
        self.assertEqual((s.kept, s.kept_at(11.0), len(s.result_ends)), (0, 0, 0))

    def test_extend_moves_the_deadline(self) -> None:
        s, log = in_state(JobState.LEASED)
        s.apply_batch(log.batch(extend("j", 1, until=500.0)))
        self.assertEqual(s.jobs["j"].lease_until, 500.0)
        self.assertEqual(s.jobs["j"].state, JobState.LEASED)

    def test_expire_counts_as_a_failed_attempt_and_says_so_in_last_error(self) -> None:
        s, log = in_state(JobState.LEASED, ma=2)
        s.apply_batch(log.batch(expire("j", 1, at=9.0)))
        e = s.jobs["j"]
        self.assertEqual((e.state, e.available_at, e.attempts), (JobState.PENDING, 9.0, 1))
        self.assertIn("lease expired", e.last_error or "")
        s.apply_batch(log.batch(lease("j", 2)))
        s.apply_batch(log.batch(expire("j", 2)))
        self.assertEqual(s.jobs["j"].state, JobState.DEAD)
        self.assertIn("lease expired", s.jobs["j"].last_error or "")

    def test_requeue_revives_a_dead_job_with_a_fresh_attempt_budget(self) -> None:
        s, log = in_state(JobState.DEAD, ma=1)
        s.apply_batch(log.batch(requeue("j", at=70.0)))
        e = s.jobs["j"]
        self.assertEqual((e.state, e.attempts, e.available_at), (JobState.PENDING, 0, 70.0))
        self.assertEqual((s.pending, s.dead), (1, 0))

    def test_purge_removes_pending_jobs_only(self) -> None:
        s, log = QueueState(), Log()
        s.apply_batch(log.batch(enq("p1"), enq("p2"), enq("l"), enq("d", ma=1)))
        s.apply_batch(log.batch(lease("l", 1), lease("d", 2)))
        s.apply_batch(log.batch(nack("d", 2)))
        s.apply_batch(log.batch(purge()))
        self.assertEqual(sorted(s.jobs), ["d", "l"])
        self.assertEqual((s.pending, s.leased, s.dead), (0, 1, 1))

    def test_snapshot_records_rebuild_an_equal_state(self) -> None:
        s, log = QueueState(), Log()
        s.apply_batch(log.batch(enq("a", pr=2), enq("b", keyed=True), enq("c", ma=1),
                                enq("k", keyed=True), enq("e")))
        s.apply_batch(log.batch(lease("b", 1, until=50.0), lease("c", 2), lease("k", 3)))
        s.apply_batch(log.batch(nack("c", 2, err="bad"), ack("k", 3, t=8.0)))
        snap = Log(first_batch=s.last_batch + 1)
        rebuilt = replay([snap.batch(*snapshot_records(s))])
        self.assertEqual(rebuilt.fingerprint(), s.fingerprint())
        self.assertTrue(rebuilt.snapshot_seen)
        self.assertEqual(rebuilt.done_keys, {"k": 8.0})
        # Tokens keep rising across the snapshot: a stale holder stays stale.
        self.assertEqual(rebuilt.next_token, 4)


FORMAT_MD = REPO / "docs" / "FORMAT.md"


def documented_transitions() -> dict[tuple[str, str], tuple[str, ...]]:
    """docs/FORMAT.md's transition table: (record, before) -> afters, as written."""
    with open(FORMAT_MD, encoding="utf-8") as handle:
        lines = handle.read().splitlines()
    start = lines.index("| record | before | after |") + 2  # past the header's rule
    table: dict[tuple[str, str], tuple[str, ...]] = {}
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        record, before, after = (cell.strip() for cell in line.strip("|").split("|"))
        table[(record, before)] = tuple(word.strip() for word in after.split(","))
    return table


class TransitionTableTest(unittest.TestCase):
    """TRANSITIONS is the whole truth: every listed move works, nothing else does."""

    def test_format_md_lists_exactly_the_transitions_replay_applies(self) -> None:
        def name(state: JobState | None, missing: str) -> str:
            return missing if state is None else str(state)

        expected = {(rtype.name, name(before, "(none)")): tuple(name(a, "(gone)") for a in afters)
                    for (rtype, before), afters in TRANSITIONS.items()}
        self.assertEqual(documented_transitions(), expected)

    def test_every_listed_transition_applies_and_lands_in_a_listed_state(self) -> None:
        for (rtype, before), afters in TRANSITIONS.items():
            for after in afters:
                with self.subTest(rtype=rtype.name, before=before, after=after):
                    # NACK/EXPIRE dead-letter only on the last attempt.
                    ma = 1 if after is JobState.DEAD or before is JobState.DEAD else 3
                    s, log = in_state(before, ma=ma)
                    records = [record_for(rtype)]
                    if after is JobState.WAITING:  # an ENQUEUE with prerequisites
                        records = [enq_waiting("j", ["other"])]
                    if rtype is RT.RELEASE:  # after its prerequisite's ack, in its batch
                        records.insert(0, ack("p", 1))
                    if rtype is RT.REVIVE:  # a dependent p's death cancelled; p requeued
                        s, log = revivable()
                        records = [requeue("p"), revive("j", ["p"])]
                    s.apply_batch(log.batch(*records))
                    got = s.jobs["j"].state if "j" in s.jobs else None
                    if rtype is RT.ACK:
                        self.assertIs(after, JobState.DONE)
                        self.assertIsNone(got, "a done job leaves the job table")
                    elif rtype is RT.FORGET:
                        self.assertNotIn("j", s.done_keys, "the key is forgotten")
                        self.assertNotIn("j", s.jobs, "and the finished job with it")
                    else:
                        self.assertIs(got, after)
                    self.assertEqual((s.pending, s.leased, s.dead, s.waiting), recount(s))
                    self.assertEqual(s.kept, len(list(s.entries(finished=True)))
                                     - len(s.jobs))

    def test_every_unlisted_transition_is_a_replay_error(self) -> None:
        befores: list[JobState | None] = [None, JobState.PENDING, JobState.LEASED,
                                          JobState.DEAD, JobState.CANCELLED, JobState.WAITING]
        for rtype in (RT.ENQUEUE, *JOB_TYPES):
            for before in befores:
                if (rtype, before) in TRANSITIONS:
                    continue
                with self.subTest(rtype=rtype.name, before=before):
                    s, log = in_state(before, ma=1)
                    with self.assertRaises(ReplayError):
                        s.apply_batch(log.batch(record_for(rtype)))

    def test_purge_leaves_leased_dead_and_waiting_jobs_alone(self) -> None:
        for before in (JobState.LEASED, JobState.DEAD, JobState.WAITING):
            with self.subTest(before=before):
                s, log = in_state(before, ma=1)
                s.apply_batch(log.batch(purge()))
                self.assertIs(s.jobs["j"].state, before)

    def test_a_done_job_accepts_no_further_records(self) -> None:
        for rtype in JOB_TYPES:
            with self.subTest(rtype=rtype.name):
                s, log = in_state(JobState.LEASED)
                s.apply_batch(log.batch(ack("j", 1)))
                with self.assertRaises(ReplayError):
                    s.apply_batch(log.batch(record_for(rtype)))


class ReplayErrorTest(unittest.TestCase):
    def assertRejected(self, *batches: list[tuple[int, dict[str, Any]]],
                       numbers: list[int] | None = None) -> ReplayError:
        log = Log()
        built = [log.batch(*records, number=numbers[i] if numbers else None)
                 for i, records in enumerate(batches)]
        with self.assertRaises(ReplayError) as caught:
            replay(built)
        self.assertIsInstance(caught.exception.offset, int)
        self.assertTrue(caught.exception.reason)
        return caught.exception

    def test_batch_numbers_must_rise_by_exactly_one(self) -> None:
        for numbers in ([1, 3], [1, 1], [2, 1], [5, 7]):
            with self.subTest(numbers=numbers):
                self.assertRejected([enq("a")], [enq("b")], numbers=numbers)

    def test_a_log_may_start_at_any_positive_batch_number(self) -> None:
        log = Log(first_batch=41)
        s = replay([log.batch(enq("a")), log.batch(enq("b"))])
        self.assertEqual(s.last_batch, 42)

    def test_batch_number_must_be_a_positive_int(self) -> None:
        for bad in (0, -1, True, 1.0, "1", None):
            with self.subTest(batch=bad):
                text = dumps({"b": bad, "id": "a", "pr": 0, "at": 0.0, "t": 0.0, "ma": 1})
                with self.assertRaises(ReplayError):
                    QueueState().apply_batch([(RT.ENQUEUE, loads(text), 16, 9 + len(text))])

    def test_every_record_of_a_batch_carries_the_batch_number(self) -> None:
        log = Log()
        batch = log.batch(enq("a"), enq("b"))
        batch[1][1]["b"] = 2
        with self.assertRaises(ReplayError) as caught:
            QueueState().apply_batch(batch)
        self.assertEqual(caught.exception.offset, batch[1][2])

    def test_wrong_token_is_rejected_for_ack_nack_extend_expire(self) -> None:
        for record in (ack("j", 9), nack("j", 9), extend("j", 9), expire("j", 9)):
            with self.subTest(rtype=RT(record[0]).name):
                self.assertRejected([enq("j")], [lease("j", 1)], [record])

    def test_lease_token_must_be_positive(self) -> None:
        self.assertRejected([enq("j")], [lease("j", 0)])

    def test_records_for_an_unknown_job_are_rejected(self) -> None:
        for rtype in JOB_TYPES:
            with self.subTest(rtype=rtype.name):
                self.assertRejected([enq("other")], [record_for(rtype, "ghost")])

    def test_enqueuing_a_live_id_twice_is_rejected(self) -> None:
        self.assertRejected([enq("a")], [enq("a")])

    def test_bools_are_not_accepted_where_numbers_belong(self) -> None:
        cases = [
            (RT.ENQUEUE, {**enq("a")[1], "pr": True}),
            (RT.ENQUEUE, {**enq("a")[1], "at": False}),
            (RT.ENQUEUE, {**enq("a")[1], "ma": True}),
            (RT.ENQUEUE, {**enq("a")[1], "t": True}),
        ]
        for record in cases:
            with self.subTest(record=record):
                self.assertRejected([record])
        self.assertRejected([enq("j")], [(RT.LEASE, {"id": "j", "tok": True, "until": 1.0})])
        self.assertRejected([enq("j")], [(RT.LEASE, {"id": "j", "tok": 1, "until": True})])

    def test_missing_or_mistyped_fields_are_rejected(self) -> None:
        base = enq("a")[1]
        for key in ("id", "pr", "at", "t", "ma"):
            with self.subTest(missing=key):
                self.assertRejected([(RT.ENQUEUE, {k: v for k, v in base.items() if k != key})])
        for key, value in (("id", 5), ("id", None), ("pr", 1.5), ("pr", "1"), ("at", "now"),
                           ("ma", 0), ("ma", -3), ("k", "yes"), ("k", 1)):
            with self.subTest(field=key, value=value):
                self.assertRejected([(RT.ENQUEUE, {**base, key: value})])
        self.assertRejected([enq("j")], [lease("j", 1)], [nack("j", 1, err=5)])  # type: ignore[arg-type]
        self.assertRejected([enq("j")], [lease("j", 1)],
                            [(RT.ACK, {"id": "j", "tok": 1})])  # no "t"
        self.assertRejected([(RT.KEY, {"id": "k"})])
        self.assertRejected([(RT.SNAPSHOT, {"tok": 1, "done": 0})])

    def test_inconsistent_snapshot_records_are_rejected(self) -> None:
        job = {"id": "a", "pr": 0, "at": 0.0, "t": 0.0, "ma": 3, "a": 0, "s": "pending",
               "tok": 0, "until": 0.0, "err": None, "k": False}
        for change in ({"s": "done"}, {"s": "nonsense"}, {"a": -1}, {"tok": -1},
                       {"s": "leased", "tok": 0}, {"s": "pending", "tok": 4},
                       {"k": "no"}, {"err": 3}):
            with self.subTest(change=change):
                self.assertRejected([(RT.JOB, {**job, **change}),
                                     (RT.SNAPSHOT, {"tok": 1, "done": 0, "jobs": 1})])
        with self.subTest("job count does not match"):
            self.assertRejected([(RT.JOB, job), (RT.SNAPSHOT, {"tok": 1, "done": 0, "jobs": 2})])
        with self.subTest("same job twice"):
            self.assertRejected([(RT.JOB, job), (RT.JOB, job),
                                 (RT.SNAPSHOT, {"tok": 1, "done": 0, "jobs": 2})])

    def test_unknown_record_type_is_rejected(self) -> None:
        self.assertRejected([enq("j")], [(99, {"id": "j", "tok": 1})])

    def test_nan_and_infinity_cannot_reach_the_state(self) -> None:
        # The only way in is the strict codec; it refuses every non-finite number,
        # including a literal that overflows a float.
        for text in ('{"b":1,"at":NaN}', '{"b":1,"at":Infinity}', '{"b":1,"at":-Infinity}',
                     '{"b":1,"at":1e400}', '{"b":1,"at":-1e999}'):
            with self.subTest(text=text):
                with self.assertRaises(ValueError):
                    loads(text.encode())


class ReplayDeterminismTest(unittest.TestCase):
    def test_replaying_the_same_records_twice_gives_equal_states(self) -> None:
        batches = random_history(random.Random(7), 300)
        frozen = copy.deepcopy(batches)
        first, second = replay(batches), replay(batches)
        self.assertEqual(first, second)
        self.assertEqual(first.fingerprint(), second.fingerprint())
        self.assertEqual(batches, frozen, "replay must not modify the records it reads")

    def test_asking_questions_does_not_change_the_state(self) -> None:
        s = replay(random_history(random.Random(8), 200))
        before = s.fingerprint()
        for now in (0.0, 50.0, 1e9):
            s.ready(now, 1000)
            s.expired(now)
            s.next_wakeup()
            list(s.entries())
        self.assertEqual(s.fingerprint(), before)

    def test_counters_always_equal_a_recount(self) -> None:
        for seed in range(5):
            rng = random.Random(seed)
            s = QueueState()
            acks = 0
            for batch in random_history(rng, 400):
                s.apply_batch(batch)
                acks += sum(1 for rtype, *_ in batch if rtype == RT.ACK)
                self.assertEqual((s.pending, s.leased, s.dead, s.waiting), recount(s),
                                 f"seed {seed}")
                kept = [e for e in s.entries(finished=True)
                        if e.state in (JobState.DONE, JobState.CANCELLED)]
                self.assertEqual(s.kept, len(kept), f"seed {seed}")
                self.assertEqual(s.done, acks)

    def test_a_snapshot_of_any_state_replays_to_an_equal_state(self) -> None:
        for seed in range(5):
            s = replay(random_history(random.Random(100 + seed), 250))
            snap = Log(first_batch=s.last_batch + 1)
            rebuilt = replay([snap.batch(*snapshot_records(s))])
            self.assertEqual(rebuilt.fingerprint(), s.fingerprint(), f"seed {seed}")
            self.assertEqual((rebuilt.pending, rebuilt.leased, rebuilt.dead, rebuilt.waiting),
                             recount(rebuilt))


class ReadyAndExpiredTest(unittest.TestCase):
    def test_ready_returns_higher_priority_first_and_fifo_within_a_priority(self) -> None:
        s = replay([Log().batch(enq("a"), enq("b", pr=5), enq("c"), enq("d", pr=5),
                                enq("e", pr=-1), enq("f", pr=5))])
        self.assertEqual([e.id for e in s.ready(0.0, 10)], ["b", "d", "f", "a", "c", "e"])
        self.assertEqual([e.id for e in s.ready(0.0, 2)], ["b", "d"])
        self.assertEqual([e.id for e in s.ready(0.0, 10)], ["b", "d", "f", "a", "c", "e"],
                         "asking must not consume")

    def test_delayed_jobs_are_invisible_until_their_time(self) -> None:
        s = replay([Log().batch(enq("now"), enq("later", pr=9, at=100.0),
                                enq("latest", pr=9, at=200.0))])
        self.assertEqual([e.id for e in s.ready(99.999, 10)], ["now"])
        self.assertEqual([e.id for e in s.ready(100.0, 10)], ["later", "now"])
        self.assertEqual([e.id for e in s.ready(250.0, 10)], ["later", "latest", "now"])

    def test_leased_and_dead_jobs_are_not_ready_and_a_nacked_job_returns_at_its_time(self
                                                                                     ) -> None:
        log = Log()
        s = replay([log.batch(enq("a"), enq("b"), enq("d", ma=1))])
        s.apply_batch(log.batch(lease("a", 1), lease("d", 2)))
        s.apply_batch(log.batch(nack("d", 2)))
        self.assertEqual([e.id for e in s.ready(0.0, 10)], ["b"])
        s.apply_batch(log.batch(nack("a", 1, at=30.0)))
        self.assertEqual([e.id for e in s.ready(29.0, 10)], ["b"])
        self.assertEqual({e.id for e in s.ready(30.0, 10)}, {"a", "b"})
        s.apply_batch(log.batch(requeue("d", at=40.0)))
        self.assertEqual({e.id for e in s.ready(40.0, 10)}, {"a", "b", "d"})

    def test_expired_lists_leases_at_or_past_their_deadline_earliest_first(self) -> None:
        log = Log()
        s = replay([log.batch(enq("a"), enq("b"), enq("c"))])
        s.apply_batch(log.batch(lease("a", 1, until=100.0), lease("b", 2, until=50.0),
                                lease("c", 3, until=300.0)))
        self.assertEqual(s.expired(49.0), [])
        self.assertEqual([e.id for e in s.expired(100.0)], ["b", "a"])
        s.apply_batch(log.batch(extend("a", 1, until=250.0)))
        self.assertEqual([e.id for e in s.expired(100.0)], ["b"])
        self.assertEqual([e.id for e in s.expired(260.0)], ["b", "a"])
        s.apply_batch(log.batch(ack("b", 2)))
        s.apply_batch(log.batch(expire("c", 3)))
        self.assertEqual([e.id for e in s.expired(1e9)], ["a"])

    def test_a_released_and_re_leased_job_expires_only_at_its_new_deadline(self) -> None:
        log = Log()
        s = replay([log.batch(enq("a"))])
        s.apply_batch(log.batch(lease("a", 1, until=10.0)))
        s.apply_batch(log.batch(nack("a", 1, at=0.0)))
        s.apply_batch(log.batch(lease("a", 2, until=90.0)))
        self.assertEqual(s.expired(50.0), [])
        self.assertEqual([e.token for e in s.expired(90.0)], [2])


def random_history(rng: random.Random, steps: int, generated: bool = False
                   ) -> list[list[Applied]]:
    """A valid random history: every record is legal for the state it meets. With
    `generated`, unkeyed jobs get a writer's ids (seq ids) or an old version's
    (random hex) instead of made-up names."""
    log = Log()
    model = QueueState()
    token = 1
    serial = 0
    for _ in range(steps):
        records: list[tuple[int, dict[str, Any]]] = []
        touched: set[str] = set()
        for _ in range(rng.choice((1, 1, 1, 2, 3))):
            by_state: dict[JobState, list[str]] = {st: [] for st in JobState}
            for e in model.entries(finished=True):
                if e.id not in touched:
                    by_state[e.state].append(e.id)
            choices = ["enqueue", "pause"]
            if by_state[JobState.PENDING]:
                choices += ["lease", "lease", "cancel"]
            if by_state[JobState.LEASED]:
                choices += ["ack", "ack_result", "nack", "extend", "expire", "cancel",
                            "progress"]
            if by_state[JobState.DEAD]:
                choices += ["requeue", "delete"]
            if by_state[JobState.DONE] or by_state[JobState.CANCELLED]:
                choices += ["forget"]
            if not records:
                choices += ["purge"] if rng.random() < 0.05 else []
            what = rng.choice(choices)
            t = float(rng.randrange(1000))
            if what == "enqueue":
                serial += 1
                keyed = rng.random() < 0.3
                job_id = f"j{serial}"
                if generated and not keyed:
                    reserved = model.jobs.reserve()
                    assert reserved is not None
                    job_id = reserved if rng.random() < 0.8 else f"{rng.getrandbits(64):016x}"
                records.append(enq(job_id, pr=rng.randrange(-2, 3), at=t, t=t,
                                   ma=rng.randrange(1, 4), keyed=keyed,
                                   m={"e": serial} if rng.random() < 0.1 else None))
            elif what == "lease":
                job_id = rng.choice(by_state[JobState.PENDING])
                records.append(lease(job_id, token, until=t + 30))
                token += 1
            elif what in ("ack", "ack_result", "nack", "extend", "expire", "progress"):
                job_id = rng.choice(by_state[JobState.LEASED])
                tok = model.jobs[job_id].token
                if what == "ack":
                    records.append(ack(job_id, tok, t))
                elif what == "ack_result":
                    records.append(ack_result(job_id, tok, rng.choice((None, [1], "r")), t,
                                              float(rng.randrange(50))))
                elif what == "nack":
                    records.append(nack(job_id, tok, t, rng.choice((None, "e"))))
                elif what == "extend":
                    records.append(extend(job_id, tok, t + 60))
                elif what == "progress":  # format 1.2: a note kept as long as the job
                    records.append(progress(job_id, tok, rng.choice((None, [0.5, None])),
                                            rng.choice((None, {"n": t})), t))
                else:
                    records.append(expire(job_id, tok, t))
            elif what == "requeue":
                job_id = rng.choice(by_state[JobState.DEAD])
                records.append(requeue(job_id, t))
            elif what == "delete":
                records.append(delete(rng.choice(by_state[JobState.DEAD])))
            elif what == "cancel":
                job_id = rng.choice(by_state[JobState.PENDING] + by_state[JobState.LEASED])
                records.append(cancel(job_id, t, float(rng.randrange(50))))
            elif what == "forget":
                records.append(forget(rng.choice(by_state[JobState.DONE]
                                                 + by_state[JobState.CANCELLED])))
            elif what == "pause":
                records.append((RT.PAUSE if rng.random() < 0.5 else RT.RESUME, {"t": t}))
            else:
                records.append(purge(t))
                break
            touched.add(records[-1][1].get("id", ""))
            if what == "purge":
                break
        batch = log.batch(*records)
        model.apply_batch(copy.deepcopy(batch))
    return log.batches


class KeptJobsTest(unittest.TestCase):
    """Jobs kept after they finish (a result, a cancel), PAUSE/RESUME and DELETE."""

    def leased(self, job_id: str = "j", **fields: Any) -> tuple[QueueState, Log]:
        s, log = QueueState(), Log()
        s.apply_batch(log.batch(enq(job_id, **fields)))
        s.apply_batch(log.batch(lease(job_id, 1, until=50.0)))
        return s, log

    def test_ack_with_a_result_keeps_the_job_done_at_the_ack_record(self) -> None:
        s, log = self.leased()
        (_, _, offset, size), = log.batch(ack_result("j", 1, {"x": 1}, t=5.0, keep=20.0))
        s.apply_batch(log.batches[-1])
        e = s.jobs["j"]
        self.assertEqual((e.state, e.attempts, e.available_at, e.loc, e.size),
                         (JobState.DONE, 1, 25.0, offset, size))
        self.assertEqual((s.leased, s.kept, s.done, len(s.jobs)), (0, 1, 1, 0))
        self.assertEqual(s.live_bytes, size, "the enqueue's bytes are no longer live")
        self.assertEqual(s.expired(1e9), [], "a kept job holds no lease")
        self.assertEqual(s.retention_over(24.9), [])
        self.assertEqual(s.retention_over(25.0), ["j"])

    def test_a_keyed_job_acked_with_a_result_is_kept_not_remembered_as_a_key(self) -> None:
        s, _ = self.leased(keyed=True)
        s.apply_batch(Log(s.last_batch + 1).batch(ack_result("j", 1, None, keep=5.0)))
        self.assertEqual(s.done_keys, {})
        self.assertIs(s.jobs["j"].state, JobState.DONE)

    def test_forget_drops_a_kept_job_and_nothing_else(self) -> None:
        s, log = self.leased()
        s.apply_batch(log.batch(ack_result("j", 1)))
        s.apply_batch(log.batch(forget("j")))
        self.assertNotIn("j", s.jobs)
        self.assertEqual((s.kept, s.live_bytes), (0, 0))
        with self.assertRaises(ReplayError):
            s.apply_batch(log.batch(forget("j")))
        s2, log2 = QueueState(), Log()
        s2.apply_batch(log2.batch(enq("p")))
        with self.assertRaises(ReplayError):  # a live job is not finished
            s2.apply_batch(log2.batch(forget("p")))

    def test_a_kept_job_s_id_cannot_be_enqueued_again_until_forgotten(self) -> None:
        s, log = self.leased()
        s.apply_batch(log.batch(cancel("j")))
        with self.assertRaises(ReplayError):
            copy.deepcopy(s).apply_batch(copy.deepcopy(log).batch(enq("j")))
        s.apply_batch(log.batch(forget("j")))
        s.apply_batch(log.batch(enq("j")))
        self.assertIs(s.jobs["j"].state, JobState.PENDING)

    def test_cancel_of_a_leased_job_revokes_its_token(self) -> None:
        s, log = self.leased()
        s.apply_batch(log.batch(cancel("j", t=3.0, keep=7.0)))
        e = s.jobs["j"]
        self.assertEqual((e.state, e.token, e.attempts, e.available_at),
                         (JobState.CANCELLED, 0, 1, 10.0))
        self.assertEqual((s.leased, s.kept), (0, 1))
        for late in (ack("j", 1), nack("j", 1), extend("j", 1), expire("j", 1), cancel("j")):
            with self.subTest(record=late[0]), self.assertRaises(ReplayError):
                copy.deepcopy(s).apply_batch(copy.deepcopy(log).batch(late))

    def test_cancel_of_a_pending_job_takes_it_out_of_ready(self) -> None:
        s, log = QueueState(), Log()
        s.apply_batch(log.batch(enq("a"), enq("b")))
        s.apply_batch(log.batch(cancel("a")))
        self.assertEqual([e.id for e in s.ready(1e9, 10)], ["b"])
        self.assertEqual(s.pending, 1)

    def test_retention_ends_in_deadline_order_whatever_order_jobs_finished_in(self) -> None:
        s, log = QueueState(), Log()
        for name in "abc":
            s.apply_batch(log.batch(enq(name)))
        s.apply_batch(log.batch(cancel("a", t=1.0, keep=100.0),
                                cancel("b", t=2.0, keep=10.0), cancel("c", t=3.0, keep=50.0)))
        self.assertEqual(s.retention_over(1e9), ["b", "c", "a"])
        self.assertEqual(via_checkpoint(s).retention_over(1e9), ["b", "c", "a"])
        self.assertEqual(snapshot_of(s).retention_over(60.0), ["b", "c"])

    def test_retention_agrees_with_brute_force_for_many_lengths_and_forgets(self) -> None:
        rng = random.Random(5)
        s, log = QueueState(), Log()
        t = 0.0
        for n in range(400):
            job_id = f"j{n}"
            s.apply_batch(log.batch(enq(job_id)))
            t += rng.choice((0.0, 0.5, 1.0))  # times in the log never go back
            s.apply_batch(log.batch(cancel(job_id, t=t, keep=float(rng.randrange(40)))))
            if rng.random() < 0.2:  # forgotten out of order (a cancelled key enqueued again)
                kept = [e.id for e in s.entries(JobState.CANCELLED)]
                s.apply_batch(log.batch(forget(rng.choice(kept))))
            if n % 50 == 0:  # and through a checkpoint and a snapshot
                s = via_checkpoint(s) if n % 100 else snapshot_of(s)
                log = Log(first_batch=s.last_batch + 1)
                log.offset = 1 << 30
        for before in (-1.0, 10.0, 57.5, 120.0, 1e9):
            with self.subTest(before=before):
                due = sorted((e.available_at, e.seq, e.id) for e in s.entries(JobState.CANCELLED)
                             if e.available_at <= before)
                self.assertEqual(s.retention_over(before), [job_id for _, _, job_id in due])

    def test_delete_removes_a_dead_job_only(self) -> None:
        s, log = in_state(JobState.DEAD, ma=1)
        s.apply_batch(log.batch(delete("j")))
        self.assertNotIn("j", s.jobs)
        self.assertEqual((s.dead, s.live_bytes), (0, 0))
        s2, log2 = in_state(JobState.PENDING)
        with self.assertRaises(ReplayError):
            s2.apply_batch(log2.batch(delete("j")))

    def test_pause_and_resume_set_the_flag_which_snapshots_and_checkpoints_keep(self) -> None:
        s, log = QueueState(), Log()
        s.apply_batch(log.batch((RT.PAUSE, {"t": 1.0})))
        self.assertTrue(s.paused)
        self.assertTrue(via_checkpoint(s).paused)
        self.assertTrue(snapshot_of(s).paused)
        s.apply_batch(log.batch((RT.RESUME, {"t": 2.0})))
        self.assertFalse(s.paused)
        with self.assertRaises(ReplayError):
            s.apply_batch(log.batch((RT.PAUSE, {})))

    def test_malformed_finishing_records_are_rejected(self) -> None:
        cases: list[tuple[int, dict[str, Any]]] = [
            (RT.ACK, {"id": "j", "tok": 1, "t": 1.0, "r": 1}),  # "keep" missing
            (RT.ACK, {"id": "j", "tok": 1, "t": 1.0, "keep": -1.0, "r": 1}),
            (RT.ACK, {"id": "j", "tok": 1, "t": 1.0, "keep": True, "r": 1}),
            (RT.CANCEL, {"id": "j", "t": 1.0}),
            (RT.CANCEL, {"id": "j", "keep": 1.0}),
            (RT.FINISHED, {"id": "k", "pr": 0, "t": 0.0, "ma": 1, "s": "dead", "fin": 1.0,
                           "keep": 1.0}),
            (RT.FINISHED, {"id": "k", "pr": 0, "t": 0.0, "ma": 1, "s": "done", "keep": 1.0}),
            (RT.SNAPSHOT, {"tok": 1, "done": 0, "jobs": 0, "kept": 3}),
            (RT.SNAPSHOT, {"tok": 1, "done": 0, "jobs": 0, "paused": 1}),
        ]
        for record in cases:
            with self.subTest(record=record):
                s, log = self.leased()
                with self.assertRaises(ReplayError):
                    s.apply_batch(log.batch(record))

    def test_a_checkpoint_of_the_previous_format_is_not_used(self) -> None:
        s = replay([Log().batch((RT.PAUSE, {"t": 1.0}))])
        data = bytearray(checkpoint.encode(s, 0, 1 << 20, 7))
        data[:8] = b"NBCKPT02"  # knew no kept jobs and no pause: never trusted
        with self.assertRaises(checkpoint.CheckpointError):
            checkpoint.decode(bytes(data), 0, 1 << 20, lambda _: 7)

    def test_a_checkpoint_keeps_waiting_jobs_and_one_before_them_is_not_used(self) -> None:
        s = replay([Log().batch(enq("b"), enq_waiting("d", ["b"], af=True))])
        restored, _, _ = checkpoint.decode(checkpoint.encode(s, 0, 1 << 20, 7), 0, 1 << 20,
                                           lambda _: 7)
        self.assertEqual(restored, s)
        self.assertEqual(restored.waits.items(), [("d", ["b"], True)])
        data = bytearray(checkpoint.encode(s, 0, 1 << 20, 7))
        data[:8] = b"NBCKPT03"  # its codes 3 and 4 were done and cancelled: never trusted
        with self.assertRaises(checkpoint.CheckpointError):
            checkpoint.decode(bytes(data), 0, 1 << 20, lambda _: 7)


class ForgetTest(unittest.TestCase):
    def test_forgettable_lists_keys_finished_at_or_before_a_time_oldest_first(self) -> None:
        s, log = QueueState(), Log()
        for job_id, t in (("late", 30.0), ("early", 10.0), ("mid", 20.0)):
            s.apply_batch(log.batch(enq(job_id, keyed=True)))
            s.apply_batch(log.batch(lease(job_id, s.next_token)))
            s.apply_batch(log.batch(ack(job_id, s.jobs[job_id].token, t=t)))
        self.assertEqual(s.forgettable(20.0), ["early", "mid"])
        self.assertEqual(s.forgettable(20.0), ["early", "mid"], "asking changes nothing")
        s.apply_batch(log.batch(forget("early")))
        self.assertEqual(s.forgettable(100.0), ["mid", "late"])

    def test_forgetting_a_key_that_is_not_remembered_is_a_replay_error(self) -> None:
        s, log = in_state(JobState.PENDING)
        with self.assertRaises(ReplayError):
            s.apply_batch(log.batch(forget("j")))


def snapshot_of(state: QueueState, seq: bool = True) -> QueueState:
    """What replaying the snapshot compaction writes for `state` gives (optionally
    written as before snapshots carried the next seq)."""
    records = snapshot_records(state)
    if seq:
        records[-1][1]["seq"] = state.next_seq
    return replay([Log(first_batch=state.last_batch + 1).batch(*records)])


def via_checkpoint(state: QueueState, end: int = 1 << 40) -> QueueState:
    data = checkpoint.encode(state, 0, end, 1234)
    return checkpoint.decode(data, 0, end, lambda _: 1234)[0]


def brute_ready(state: QueueState, now: float, count: int) -> list[str]:
    due = [e for e in state.entries(JobState.PENDING) if e.available_at <= now]
    return [e.id for e in sorted(due, key=lambda e: (-e.priority, e.seq))][:count]


class GeneratedIdTest(unittest.TestCase):
    def test_a_generated_id_is_the_seq_in_16_hex_digits(self) -> None:
        self.assertEqual(seq_id(0x2a), "000000000000002a")
        self.assertEqual(id_seq("000000000000002a"), 0x2a)
        for other in ("00000000000002a", "000000000000002A", "0000_0000000002a", "x",
                      "0001000000000000", "9f3a5c0e12ab44d1"):
            self.assertEqual(id_seq(other), -1, other)

    def test_reserve_hands_out_consecutive_ids_that_replay_without_a_dict(self) -> None:
        s, log = QueueState(), Log()
        ids = [s.jobs.reserve() for _ in range(3)]
        self.assertEqual(ids, [seq_id(0), seq_id(1), seq_id(2)], "unique before applying")
        s.apply_batch(log.batch(*(enq(str(i)) for i in ids)))
        self.assertEqual(s.next_seq, 3)
        self.assertEqual(s.table.ids, {}, "generated ids need no dict entry")
        self.assertEqual([e.id for e in s.entries()], ids)
        self.assertEqual(s.jobs[ids[1]].seq, 1)
        self.assertEqual(s.jobs.reserve(), seq_id(3))

    def test_reserve_skips_ids_that_keys_took(self) -> None:
        s, log = QueueState(), Log()
        s.apply_batch(log.batch(enq("x"), enq(seq_id(2), keyed=True)))
        s.apply_batch(log.batch(enq(seq_id(3), keyed=True)))
        s.apply_batch(log.batch(lease(seq_id(3), 1)))
        s.apply_batch(log.batch(ack(seq_id(3), 1)))
        self.assertEqual(s.next_seq, 3, "keys take a seq, never jump to the one they spell")
        self.assertIn(seq_id(3), s.done_keys)
        self.assertEqual(s.jobs.reserve(), seq_id(4), "2 is a live key, 3 a remembered one")

    def test_reserve_many_hands_out_what_reserve_would_one_at_a_time(self) -> None:
        def histories() -> list[QueueState]:
            plain, keyed = QueueState(), QueueState()
            log = Log()
            keyed.apply_batch(log.batch(enq("x"), enq(seq_id(2), keyed=True)))
            keyed.apply_batch(log.batch(enq(seq_id(5), keyed=True)))
            keyed.apply_batch(log.batch(lease(seq_id(5), 1)))
            keyed.apply_batch(log.batch(ack(seq_id(5), 1)))  # 5: a remembered key
            return [plain, keyed]

        for count in (1, 4, 9):
            for one, many in zip(histories(), histories(), strict=True):
                expected = [one.jobs.reserve() for _ in range(count)]
                self.assertEqual(many.jobs.reserve_many(count), expected)
                self.assertEqual(many.jobs.reserve(), one.jobs.reserve(), "none twice")
        keyed = histories()[1]
        self.assertNotIn(seq_id(2), keyed.jobs.reserve_many(6), "a live key's id is skipped")

    def test_ids_of_older_writers_and_stale_generated_ids_still_replay(self) -> None:
        s, log = QueueState(), Log()
        s.apply_batch(log.batch(enq("9f3a5c0e12ab44d1"), enq(seq_id(7)), enq(seq_id(2)),
                                enq("00000000000000ff")))
        self.assertEqual(s.next_seq, 0x100, "a generated id ahead of the count moves it")
        self.assertEqual([e.id for e in s.entries()],
                         ["9f3a5c0e12ab44d1", seq_id(7), seq_id(2), "00000000000000ff"])
        self.assertEqual(sorted(s.table.ids), ["0000000000000002", "9f3a5c0e12ab44d1"])
        for job_id in ("9f3a5c0e12ab44d1", seq_id(2), seq_id(7), "00000000000000ff"):
            self.assertEqual(s.jobs[job_id].id, job_id)
        self.assertNotIn(seq_id(1), s.jobs)
        with self.assertRaises(ReplayError):
            s.apply_batch(log.batch(enq(seq_id(2))))

    def test_snapshots_carry_the_next_seq_and_old_ones_still_replay(self) -> None:
        s, log = QueueState(), Log()
        s.apply_batch(log.batch(enq(seq_id(0)), enq(seq_id(1))))
        s.apply_batch(log.batch(lease(seq_id(1), 1)))
        s.apply_batch(log.batch(ack(seq_id(1), 1)))
        self.assertEqual(snapshot_of(s).next_seq, 2, "ids are not handed out twice")
        old = snapshot_of(s, seq=False)
        self.assertEqual(old.next_seq, 1)
        self.assertEqual(old.fingerprint(), s.fingerprint())

    def test_random_histories_with_generated_ids_survive_snapshot_and_checkpoint(self) -> None:
        for seed in range(6):
            s = replay(random_history(random.Random(300 + seed), 250, generated=True))
            self.assertEqual(via_checkpoint(s).live_bytes, s.live_bytes)
            for rebuilt in (snapshot_of(s), via_checkpoint(s)):
                self.assertEqual(rebuilt.fingerprint(), s.fingerprint(), f"seed {seed}")
                self.assertEqual(rebuilt.next_seq, s.next_seq)
                self.assertEqual((rebuilt.pending, rebuilt.leased, rebuilt.dead),
                                 (s.pending, s.leased, s.dead))
                for e in s.entries():
                    self.assertEqual(rebuilt.jobs[e.id].id, e.id)


class EnqueueRunTest(unittest.TestCase):
    """enqueue_many's batch (ENQUEUE records of the next generated ids, alike but for
    id and payload) is applied in one step: to the same state as one by one."""

    @staticmethod
    def both(*batches: tuple[tuple[int, dict[str, Any]], ...]) -> tuple[QueueState, QueueState]:
        log = Log()
        built = [log.batch(*records) for records in batches]
        bulk, single = QueueState(), QueueState()
        for batch in built:
            bulk.apply_batch(copy.deepcopy(batch))
        # The same batches with the one-step path turned down: record by record.
        with mock.patch.object(state_module, "apply_enqueue_run", lambda state, batch, number: 0):
            for batch in built:
                single.apply_batch(copy.deepcopy(batch))
        return bulk, single

    def assert_same(self, bulk: QueueState, single: QueueState) -> None:
        self.assertEqual(bulk.fingerprint(), single.fingerprint())
        self.assertEqual((bulk.live_bytes, bulk.totals, bulk.next_seq, bulk.latest_time),
                         (single.live_bytes, single.totals, single.next_seq,
                          single.latest_time))
        self.assertEqual(bulk.columns(), single.columns())
        for now in (0.0, 5.0, 1e9):
            self.assertEqual([e.id for e in bulk.ready(now, 10**6)],
                             [e.id for e in single.ready(now, 10**6)], now)
        self.assertEqual(bulk.next_wakeup(), single.next_wakeup())
        for e in single.entries():
            self.assertEqual(bulk.jobs[e.id], e)

    @staticmethod
    def run_of(first: int, count: int, **fields: Any) -> tuple[tuple[int, dict[str, Any]], ...]:
        return tuple(enq(seq_id(n), p={"n": n}, **fields) for n in range(first, first + count))

    def test_a_run_is_applied_in_one_step_to_the_state_one_by_one_gives(self) -> None:
        bulk, single = self.both(self.run_of(0, 50, pr=2, at=3.0, t=1.5),
                                 self.run_of(50, 3, pr=2, at=1.0, t=1.5),  # behind the lane
                                 self.run_of(53, 40, pr=-1, at=0.5, t=2.0))
        self.assert_same(bulk, single)
        self.assertEqual(bulk.pending, 93)
        self.assertEqual(bulk.table.ids, {}, "generated ids need no dict entry")

    def test_records_that_do_not_fit_the_run_end_it_and_replay_one_by_one(self) -> None:
        cases = {
            "keyed": (*self.run_of(0, 5), enq("key", keyed=True), *self.run_of(6, 5)),
            '"k": false, then a key': (*self.run_of(0, 3), enq(seq_id(3), keyed=False),
                                       enq(seq_id(9), keyed=True)),
            "skipped seq": self.run_of(0, 4) + self.run_of(7, 4),
            "priority": self.run_of(0, 4) + self.run_of(4, 4, pr=1),
            "other record": (*self.run_of(0, 4), lease(seq_id(0), 1)),
        }
        for name, records in cases.items():
            with self.subTest(name):
                self.assert_same(*self.both(records))

    def test_a_run_over_named_ids_and_remembered_keys_replays_one_by_one(self) -> None:
        prefix = (enq(seq_id(9), keyed=True), enq(seq_id(6), keyed=True))
        bulk, single = self.both(prefix, (lease(seq_id(6), 1),), (ack(seq_id(6), 1),),
                                 self.run_of(2, 6))
        self.assert_same(bulk, single)
        self.assertNotIn(seq_id(6), bulk.done_keys, "a new job's id is no key any more")
        for state in (bulk, single):  # 9 is a live key's id
            with self.assertRaises(ReplayError):
                state.apply_batch(Log(state.last_batch + 1).batch(*self.run_of(8, 3)))

    def test_a_bad_record_in_a_run_is_refused_as_one_by_one(self) -> None:
        for bad in ({"pr": True}, {"ma": True}, {"at": True}, {"t": True}, {"ma": 0},
                    {"at": "1.0"}, {"p": None, "k": 1}):
            records = list(self.run_of(0, 4, pr=1, ma=1, at=1.0, t=1.0))
            records[2] = (RT.ENQUEUE, {**records[2][1], **bad})
            with self.assertRaises(ReplayError, msg=str(bad)):
                s = QueueState()
                s.apply_batch(Log().batch(*records))


class ColumnsTest(unittest.TestCase):
    def test_ready_agrees_with_a_brute_force_answer_whatever_lane_or_heap_holds_jobs(
            self) -> None:
        for seed in range(8):
            batches = random_history(random.Random(400 + seed), 300, generated=seed % 2 == 0)
            s = QueueState()
            for number, batch in enumerate(batches):
                s.apply_batch(batch)
                if number % 10 == 0:  # `now` never goes back: promoted jobs stay ready
                    for now in (number * 3.0, number * 3.0 + 15):
                        for count in (1, 3, 100):
                            self.assertEqual([e.id for e in s.ready(now, count)],
                                             brute_ready(s, now, count), f"seed {seed}")
            restored = via_checkpoint(s)
            self.assertEqual([e.id for e in restored.ready(500.0, 1000)],
                             brute_ready(s, 500.0, 1000))

    def test_removed_jobs_are_packed_out_and_lookups_still_work(self) -> None:
        for pattern in ("prefix", "scattered"):
            s, log = QueueState(), Log()
            ids = [seq_id(i) for i in range(3000)]
            s.apply_batch(log.batch(*(enq(i, pr=int(i.endswith("7"))) for i in ids)))
            gone = ids[:2800] if pattern == "prefix" else [i for i in ids if id_seq(i) % 15]
            for number, job_id in enumerate(gone):
                s.apply_batch(log.batch(lease(job_id, number + 1)))
                s.apply_batch(log.batch(ack(job_id, number + 1)))
            kept = [i for i in ids if i not in set(gone)]
            self.assertLess(len(s.table.seqs), 1500, "holes were packed out")
            self.assertEqual(len(s.jobs), len(kept))
            self.assertEqual([e.id for e in s.entries()], kept)
            self.assertNotIn(ids[5], s.jobs)
            self.assertEqual(s.jobs[kept[-1]].id, kept[-1])
            self.assertEqual([e.id for e in s.ready(0.0, 1000)], brute_ready(s, 0.0, 1000))
            self.assertEqual(via_checkpoint(s).fingerprint(), s.fingerprint())

    def test_many_priorities_do_not_make_many_lanes(self) -> None:
        s = replay([Log().batch(*(enq(seq_id(i), pr=i) for i in range(100)))])
        self.assertLessEqual(len(s.table.due.lanes), 16)
        self.assertEqual([e.id for e in s.ready(0.0, 5)], brute_ready(s, 0.0, 5))

    def test_entries_are_snapshots(self) -> None:
        s, log = in_state(JobState.PENDING)
        before = s.jobs["j"]
        s.apply_batch(log.batch(lease("j", 1)))
        self.assertIs(before.state, JobState.PENDING)
        self.assertIs(s.jobs["j"].state, JobState.LEASED)

    def test_relocate_moves_payload_locations_or_refuses_jobs_it_does_not_know(self) -> None:
        s, log = QueueState(), Log()
        s.apply_batch(log.batch(enq(seq_id(0)), enq("key", keyed=True), enq(seq_id(2))))
        split = log.offset
        s.apply_batch(log.batch(enq(seq_id(3))))
        cols = s.columns()
        locs = array("q", [100, 200, 300, 400])
        sizes = array("I", [50, 60, 70, 80])
        self.assertFalse(s.relocate(split, 1000, cols.seqs[:3], {}, locs[:3], sizes[:3]))
        self.assertTrue(s.relocate(split, 1000, cols.seqs[:3], cols.names, locs[:3],
                                   sizes[:3]))
        self.assertEqual([(e.loc, e.size) for e in s.entries()],
                         [(100, 50), (200, 60), (300, 70), (split + 1000, cols.size[3])])
        self.assertEqual(s.live_bytes, 50 + 60 + 70 + cols.size[3])

    def test_a_checkpoint_of_the_old_format_is_not_used(self) -> None:
        s = replay([Log().batch(enq(seq_id(0)))])
        data = bytearray(checkpoint.encode(s, 0, 1 << 20, 7))
        data[:8] = b"NBCKPT01"
        with self.assertRaises(checkpoint.CheckpointError):
            checkpoint.decode(bytes(data), 0, 1 << 20, lambda _: 7)


class TotalsTest(unittest.TestCase):
    """The lifetime totals (enqueued, retried, dead-lettered) the dashboard reports."""

    def history(self) -> QueueState:
        s, log = QueueState(), Log()
        s.apply_batch(log.batch(enq("a", ma=2), enq("b", ma=1), enq("c")))
        s.apply_batch(log.batch(lease("a", 1), lease("b", 2), lease("c", 3)))
        s.apply_batch(log.batch(nack("a", 1), expire("b", 2), ack("c", 3)))
        s.apply_batch(log.batch(lease("a", 4)))
        s.apply_batch(log.batch(nack("a", 4)))
        return s

    def test_replay_counts_enqueues_retries_and_dead_letters(self) -> None:
        s = self.history()
        self.assertEqual(s.totals, (3, 1, 2))
        self.assertEqual((s.done, s.dead), (1, 2))

    def test_snapshots_and_checkpoints_carry_the_totals(self) -> None:
        s = self.history()
        records = snapshot_records(s)
        records[-1][1]["tot"] = list(s.totals)
        self.assertEqual(replay([Log(first_batch=s.last_batch + 1).batch(*records)]).totals,
                         (3, 1, 2))
        self.assertEqual(via_checkpoint(s).totals, (3, 1, 2))
        self.assertEqual(snapshot_of(s).totals, (0, 0, 0), "a snapshot without them restarts")

    def test_bad_totals_are_refused(self) -> None:
        s = self.history()
        for bad in ([1, 2], [1, 2, -1], [1, 2, "3"], "x", [1, 2, True]):
            records = snapshot_records(s)
            records[-1][1]["tot"] = bad
            with self.subTest(bad=bad), self.assertRaises(ReplayError):
                replay([Log(first_batch=s.last_batch + 1).batch(*records)])

    def test_a_checkpoint_without_totals_is_not_used(self) -> None:
        s = self.history()
        data = checkpoint.encode(s, 0, 1 << 20, 7)
        body = data[12:]
        length = int.from_bytes(body[:8], "little")
        meta = loads(bytes(body[8:8 + length]))
        del meta["totals"]
        raw = dumps(meta).encode()
        body = len(raw).to_bytes(8, "little") + raw + body[8 + length:]
        forged = data[:8] + zlib.crc32(body).to_bytes(4, "little") + body
        with self.assertRaises(checkpoint.CheckpointError):
            checkpoint.decode(forged, 0, 1 << 20, lambda _: 7)


class SkipTest(unittest.TestCase):
    """entries(state, skip): a page of jobs deep in the table, as list_jobs(offset=) asks."""

    def test_skipping_gives_the_same_jobs_as_slicing_the_whole_list(self) -> None:
        rng = random.Random(12)
        s, log = QueueState(), Log()
        count = 70_000  # more than one counting chunk (65,536 slots)
        s.apply_batch(log.batch(*(enq(seq_id(i), ma=1) for i in range(count))))
        leased = sorted(rng.sample(range(count), 3000))
        s.apply_batch(log.batch(*(lease(seq_id(i), n + 1) for n, i in enumerate(leased))))
        settle = []
        for n, i in enumerate(leased):
            if n % 3 == 0:
                settle.append(ack(seq_id(i), n + 1))  # a hole in the table
            elif n % 3 == 1:
                settle.append(nack(seq_id(i), n + 1))  # dead (ma=1)
        s.apply_batch(log.batch(*settle))
        for state in (None, JobState.PENDING, JobState.LEASED, JobState.DEAD):
            every = [e.id for e in s.entries(state)]
            for skip in (0, 1, 999, 65_535, 65_536, 65_537, len(every) - 1, len(every),
                         len(every) + 7):
                with self.subTest(state=state, skip=skip):
                    page = [e.id for _, e in zip(range(25), s.entries(state, skip), strict=False)]
                    self.assertEqual(page, every[skip:skip + 25])


class DependenciesReplayTest(unittest.TestCase):
    """Waiting jobs in the pure replay: prerequisites struck off as they finish, a
    RELEASE only once none is left, CANCEL of a waiting job, snapshots keep them."""

    def test_a_waiting_job_is_counted_apart_and_released_after_its_prerequisites(self) -> None:
        log = Log()
        s = replay([log.batch(enq("a"), enq("b"), enq_waiting("c", ["a", "b"], at=9.0))])
        self.assertEqual((s.pending, s.waiting, s.live()), (2, 1, 3))
        self.assertIs(s.jobs["c"].state, JobState.WAITING)
        self.assertEqual(s.ready(100.0, 10)[-1].id, "b", "a waiting job is never ready")
        s.apply_batch(log.batch(lease("a", 1), lease("b", 2)))
        s.apply_batch(log.batch(ack("a", 1)))
        self.assertEqual(s.waits.waiting_for("c"), ("b",))
        with self.assertRaisesRegex(ReplayError, "still waits for b"):
            s.apply_batch(log.batch(release("c"), number=log.number))
        s2 = replay(log.batches[:3])
        s2.apply_batch(log.batch(ack("b", 2), release("c"), number=4))
        c = s2.jobs["c"]
        self.assertEqual((c.state, c.available_at), (JobState.PENDING, 9.0),
                         "its own delay still holds")
        self.assertEqual((s2.pending, s2.waiting, s2.waits.by_job), (1, 0, {}))

    def test_a_failed_prerequisite_is_struck_off_and_a_cancel_carries_its_error(self) -> None:
        log = Log()
        s = replay([log.batch(enq("a", ma=1), enq_waiting("c", ["a"]),
                              enq_waiting("d", ["a"], af=True)),
                    log.batch(lease("a", 1))])
        s.apply_batch(log.batch(nack("a", 1),
                                (RT.CANCEL, {"id": "c", "t": 1.0, "keep": 5.0,
                                             "err": "prerequisite a was dead-lettered"}),
                                release("d")))
        self.assertEqual((s.jobs["c"].state, s.jobs["c"].last_error),
                         (JobState.CANCELLED, "prerequisite a was dead-lettered"))
        self.assertIs(s.jobs["d"].state, JobState.PENDING)
        self.assertEqual((s.dead, s.pending, s.waiting, s.kept), (1, 1, 0, 1))
        self.assertEqual((s.waits.by_job, s.waits.dependents), ({}, {}))

    def test_a_batch_must_settle_the_dependents_it_frees(self) -> None:
        # The writer releases or cancels a dependent in the batch that settles it; a
        # batch without that record (a damaged log) is refused, never left waiting
        # for nothing (which a snapshot could not even say).
        cases = {
            "released": ([enq_waiting("c", ["a"])], ack("a", 1)),
            "released (allow_failure)": ([enq_waiting("c", ["a"], af=True)], nack("a", 1)),
            "cancelled": ([enq_waiting("c", ["a"])], nack("a", 1)),
            "released (on_error)": ([enq_waiting("c", ["a", "b"], of=True)], nack("a", 1)),
        }
        for label, (waiting, finish) in cases.items():
            with self.subTest(label):
                log = Log()
                s = replay([log.batch(enq("a", ma=1), enq("b"), *waiting),
                            log.batch(lease("a", 1))])
                with self.assertRaisesRegex(ReplayError, "leaves job 'c' waiting"):
                    s.apply_batch(log.batch(finish))
        log = Log()  # a prerequisite of two finished, the other unfinished: still waits
        s = replay([log.batch(enq("a"), enq("b"), enq_waiting("c", ["a", "b"])),
                    log.batch(lease("a", 1))])
        s.apply_batch(log.batch(ack("a", 1)))
        self.assertEqual(s.waits.waiting_for("c"), ("b",))

    def test_a_waiting_enqueue_names_only_unfinished_jobs(self) -> None:
        # A `w` naming a job never enqueued, or one already finished, would wait for
        # ever: writers never write it, so replay refuses it as damage.
        for label, earlier in {"unknown": [enq("x")],
                               "acked": [enq("a"), lease("a", 1), ack("a", 1)]}.items():
            with self.subTest(label):
                log = Log()
                s = replay([log.batch(*earlier)])
                with self.assertRaisesRegex(ReplayError, "waits for 'a', which is not"):
                    s.apply_batch(log.batch(enq_waiting("c", ["a"])))
        log = Log()  # earlier in the same batch is fine (enqueue_graph)
        s = replay([log.batch(enq("a"), enq_waiting("b", ["a"]), enq_waiting("c", ["b"]))])
        self.assertEqual(s.waits.waiting_for("c"), ("b",))

    def test_snapshot_records_keep_the_waits(self) -> None:
        log = Log()
        s = replay([log.batch(enq("a"), enq("b"), enq_waiting("c", ["a", "b"], af=True)),
                    log.batch(lease("a", 1)), log.batch(ack("a", 1))])
        rebuilt = replay([Log().batch(*snapshot_records(s))])
        self.assertEqual(rebuilt, s)
        self.assertEqual(rebuilt.waits.items(), [("c", ["b"], True)])

    def test_malformed_prerequisites_are_corruption(self) -> None:
        for bad in ([], "a", [1], ["a", "a"], ["c"]):
            with self.subTest(w=bad), self.assertRaisesRegex(ReplayError, "prerequisites"):
                replay([Log().batch(enq("a"), enq_waiting("c", bad))])  # type: ignore[arg-type]
        with self.assertRaisesRegex(ReplayError, "af"):
            replay([Log().batch(enq("a"), enq_waiting("c", ["a"], af=1))])  # type: ignore[arg-type]
        with self.assertRaisesRegex(ReplayError, "pending, expected waiting"):
            replay([Log().batch(enq("a"), release("a"))])

    def test_a_failure_mode_job_is_released_only_by_a_death(self) -> None:
        log = Log()
        s = replay([log.batch(enq("a", ma=1), enq("b", ma=1), enq("c"),
                              enq_waiting("h", ["a", "b", "c"], of=True)),
                    log.batch(lease("a", 1), lease("b", 2), lease("c", 3))])
        self.assertEqual(s.waits.items(), [("h", ["a", "b", "c"], False, "failure")])
        early = copy.deepcopy(s)
        with self.assertRaisesRegex(ReplayError, "still waits for a, b, c"):
            early.apply_batch(log.batch(release("h")))
        log.number -= 1  # that batch was refused: the next one takes its number
        s.apply_batch(log.batch(ack("c", 3)))
        with self.assertRaisesRegex(ReplayError, "still waits for a, b"):
            copy.deepcopy(s).apply_batch(log.batch(release("h")))
        log.number -= 1
        s.apply_batch(log.batch(nack("a", 1), release("h")))
        self.assertIs(s.jobs["h"].state, JobState.PENDING, "released with b unfinished")
        self.assertEqual((s.waits.by_job, s.waits.dependents), ({}, {}))
        s.apply_batch(log.batch(nack("b", 2)))  # a second death: nothing left to release
        self.assertEqual((s.dead, s.pending, s.waiting), (2, 1, 0))

    def test_a_failure_mode_job_is_kept_by_snapshots_and_checkpoints(self) -> None:
        log = Log()
        s = replay([log.batch(enq("a"), enq_waiting("h", ["a"], of=True),
                              enq_waiting("g", ["a"], af=True), enq_waiting("f", ["a"]))])
        rebuilt = replay([Log().batch(*snapshot_records(s))])
        self.assertEqual(rebuilt, s)
        restored = QueueState()
        restored.waits.restore([["h", ["a"], False, "failure"], ["g", ["a"], True],
                                ["f", ["a"], False]])  # the three-item form still reads
        self.assertEqual(restored.waits.fingerprint(), s.waits.fingerprint())
        for bad in (["h", ["a"], False, "sometimes"], ["h", ["a"], False, "failure", 1],
                    ["h", ["a"], "no"]):
            with self.subTest(item=bad), self.assertRaises(ValueError):
                QueueState().waits.restore([bad])

    def test_malformed_failure_mode_fields_are_corruption(self) -> None:
        for fields in ({"of": 1}, {"of": True, "af": True}, {"of": "yes"}):
            rtype, rec = enq_waiting("c", ["a"])
            rec = {**{k: v for k, v in rec.items() if k != "p"}, **fields, "p": "x"}
            with self.subTest(fields=fields), self.assertRaisesRegex(ReplayError, "of"):
                replay([Log().batch(enq("a"), (rtype, rec))])

    def test_the_planner_releases_in_the_ack_batch_and_cascades_cancels(self) -> None:
        from nobroker.file.state.batch import Batch
        from nobroker.file.state.commands import plan_ack, plan_cancel, plan_enqueue
        rng = random.Random(1)
        state = QueueState()

        def commit(plan: Callable[[Batch], object]) -> list[tuple[int, dict[str, Any]]]:
            batch = Batch(state.last_batch + 1, keep=7.0)
            plan(batch)
            state.apply_batch(batch.encode(16 + 10_000 * state.last_batch)[1])
            return [(rtype, dict(record)) for rtype, record in batch.records()]

        def enqueue(job_id: str, after: list[str], allow: bool = False) -> None:
            commit(lambda b: plan_enqueue(state, b, 1.0, '"x"', priority=0, delay=0.0,
                                          max_attempts=3, job_id=job_id, key_retention=0.0,
                                          rng=rng, depends_on=after,
                                          mode="any" if allow else "success"))

        enqueue("a", [])
        enqueue("b", ["a"])
        enqueue("c", ["b"])
        enqueue("d", ["a"], allow=True)
        with self.assertRaises(JobNotFoundError):
            enqueue("e", ["nope"])
        self.assertEqual(state.waiting, 3)
        records = commit(lambda b: plan_cancel(state, b, 2.0, "a", 5.0))
        self.assertEqual([(RT(t), r["id"], r.get("err")) for t, r in records],
                         [(RT.CANCEL, "a", None),
                          (RT.CANCEL, "b", "prerequisite a was cancelled"),
                          (RT.CANCEL, "c", "prerequisite b was cancelled"),
                          (RT.RELEASE, "d", None)])
        self.assertEqual((state.waiting, state.pending, state.kept), (0, 1, 3))
        enqueue("f", ["a"])  # a cancelled prerequisite settles a new job at once
        self.assertEqual(state.jobs["f"].last_error, "prerequisite a was cancelled")
        enqueue("g", ["a"], allow=True)
        self.assertIs(state.jobs["g"].state, JobState.PENDING)
        enqueue("h", ["d", "g"])
        leased = state.ready(10.0, 2)
        commit(lambda b: [b.add_lease(e.id, n + 1, 50.0, 3.0) for n, e in enumerate(leased)])
        records = commit(lambda b: (plan_ack(state, b, 4.0, "d", 1),
                                    plan_ack(state, b, 4.0, "g", 2)))
        self.assertEqual([(RT(t), r["id"]) for t, r in records],
                         [(RT.ACK, "d"), (RT.ACK, "g"), (RT.RELEASE, "h")],
                         "released once, in the batch of the last prerequisite's ack")


class RevivalReplayTest(unittest.TestCase):
    """Dependents a failure cancelled (format 1.2): replay keeps what they wait for and
    what keeps them cancelled; REVIVE (after a REQUEUE) only when nothing does."""

    def chain(self) -> tuple[QueueState, Log]:
        """p|j|k: p dies; j and k are cancelled, revivable; "x" (which j also waits
        for) is still pending."""
        s, log = QueueState(), Log()
        s.apply_batch(log.batch(enq("p", ma=1), enq("x"), lease("p", 1),
                                enq_waiting("j", ["p", "x"]), enq_waiting("k", ["j"])))
        s.apply_batch(log.batch(nack("p", 1), revivable_cancel("j"), revivable_cancel("k")))
        return s, log

    def test_a_requeue_and_revives_make_the_chain_wait_again(self) -> None:
        s, log = self.chain()
        self.assertEqual(s.dormant.items(), [["j", ["x"], ["p"], None, None],
                                             ["k", [], ["j"], None, None]])
        self.assertEqual((s.kept, s.waiting, s.dead), (2, 0, 1))
        for rebuilt in (snapshot_of(s), via_checkpoint(s)):
            self.assertEqual(rebuilt, s)
        s.apply_batch(log.batch(requeue("p"), revive("j", ["x", "p"]), revive("k", ["j"])))
        j, k = s.jobs["j"], s.jobs["k"]
        self.assertEqual((j.state, j.available_at, j.last_error, k.state),
                         (JobState.WAITING, 7.0, None, JobState.WAITING))
        self.assertEqual((s.waits.waiting_for("j"), s.waits.waiting_for("k")),
                         (("x", "p"), ("j",)))
        self.assertEqual((s.kept, s.waiting, s.pending, s.dormant.by_job), (0, 2, 2, {}))
        self.assertEqual(recount(s), (s.pending, s.leased, s.dead, s.waiting))
        for rebuilt in (snapshot_of(s), via_checkpoint(s)):
            self.assertEqual(rebuilt, s)

    def test_what_happens_to_the_other_prerequisites_meanwhile_is_kept(self) -> None:
        s, log = self.chain()
        s.apply_batch(log.batch(lease("x", 2)))
        s.apply_batch(log.batch(ack("x", 2)))  # done, and forgotten: struck off
        self.assertEqual(s.dormant.by_job["j"].unmet, {})
        s.apply_batch(log.batch(requeue("p"), revive("j", ["p"])))
        self.assertEqual(s.waits.waiting_for("j"), ("p",))
        s2, log2 = self.chain()  # x dies too: j stays cancelled after p's requeue
        s2.apply_batch(log2.batch(lease("x", 2)))
        s2.apply_batch(log2.batch(nack("x", 2)))
        s2.apply_batch(log2.batch(lease("x", 3)))
        s2.apply_batch(log2.batch(nack("x", 3)))
        s2.apply_batch(log2.batch(lease("x", 4)))
        s2.apply_batch(log2.batch(nack("x", 4)))
        self.assertEqual(list(s2.dormant.by_job["j"].failed), ["p", "x"])
        with self.assertRaisesRegex(ReplayError, "failed"):
            s2.apply_batch(log2.batch(requeue("p"), revive("j", ["p"])))

    def test_a_gone_failure_leaves_its_dependents_cancelled_for_good(self) -> None:
        s, log = self.chain()
        s.apply_batch(log.batch(delete("p")))
        self.assertEqual(list(s.dormant.by_job), ["k"], "j can never wait again")
        s.apply_batch(log.batch(forget("j")))
        self.assertEqual(s.dormant.by_job, {}, "nor k, whose failure j is gone")

    def test_a_revived_job_has_its_limit_keys_again(self) -> None:
        s, log = QueueState(), Log()
        rtype, fields = enq_waiting("j", ["p"])
        limited = {**{k: v for k, v in fields.items() if k != "p"}, "ck": "c", "p": "x"}
        s.apply_batch(log.batch(enq("p", ma=1), lease("p", 1), (rtype, limited)))
        seq = s.jobs["j"].seq
        cancel_type, cancel_fields = revivable_cancel("j")
        cancel_fields = {**{k: v for k, v in cancel_fields.items() if k != "p"}, "ck": "c",
                         "p": "x"}
        s.apply_batch(log.batch(nack("p", 1), (cancel_type, cancel_fields)))
        self.assertEqual((s.limited.keys_of(seq), s.dormant.by_job["j"].keys), (None, (None, "c")))
        self.assertEqual(via_checkpoint(s), s)
        s.apply_batch(log.batch(requeue("p"), revive("j", ["p"])))
        self.assertEqual(s.limited.keys_of(seq), (None, "c"))
        self.assertEqual(via_checkpoint(s), s)

    def test_bad_revivals_are_corruption(self) -> None:
        s, log = self.chain()
        with self.assertRaisesRegex(ReplayError, "which waits for"):  # p is still dead
            s.apply_batch(log.batch(revive("j", ["x", "p"]), number=log.number))
        s, log = self.chain()
        with self.assertRaisesRegex(ReplayError, "which waits for"):  # not what it waits for
            s.apply_batch(log.batch(requeue("p"), revive("j", ["p"])))
        s2, log2 = in_state(JobState.CANCELLED)
        s2.apply_batch(log2.batch(enq("p", ma=1), lease("p", 1)))
        with self.assertRaisesRegex(ReplayError, "not revivable"):  # cancelled by hand
            s2.apply_batch(log2.batch(nack("p", 1), requeue("p"), revive("j", ["p"])))
        s3, log3 = in_state(JobState.WAITING)
        with self.assertRaisesRegex(ReplayError, "no failed"):  # nothing failed
            s3.apply_batch(log3.batch(revivable_cancel("j")))


if __name__ == "__main__":
    unittest.main()
