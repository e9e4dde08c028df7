"""The replay state's limited jobs (state/limited.py), tested without a disk.

Records as the log reader hands them over (test_state's Log); the limits as a
process declares them (nobroker.limits.Limits). What is checked: a limited
job is leasable only within its keys' limits, the holders and windows follow
every record that starts or ends a lease, a saturated key's backlog is never
looked at, and bad fields are corruption.
"""

from __future__ import annotations

import unittest
from typing import Any

from harness.support import FakeClock, TempDirTestCase, file_queue

from file.test_state import Log, ack, cancel, enq, expire, lease, nack, purge, requeue, snooze
from nobroker import JobState
from nobroker.file.generations import checkpoint
from nobroker.file.log.records import RecordType
from nobroker.file.state.state import QueueState, ReplayError, replay
from nobroker.limits import Limits


def limited(job_id: str, rk: str | None = None, ck: str | None = None,
            **kwargs: Any) -> tuple[int, dict[str, Any]]:
    rtype, fields = enq(job_id, **kwargs)
    payload = fields.pop("p")
    if rk is not None:
        fields["rk"] = rk
    if ck is not None:
        fields["ck"] = ck
    fields["p"] = payload
    return rtype, fields


def declare(rk: str, lim: int, per: float, st: list[float] | None = None
            ) -> tuple[int, dict[str, Any]]:
    fields: dict[str, Any] = {"rk": rk, "lim": lim, "per": per}
    if st is not None:
        fields["st"] = st
    return RecordType.LIMIT, fields


def limits(*, rate: dict[str, tuple[int, float]] | None = None,
           concurrency: dict[str, int] | None = None) -> Limits:
    declared = Limits()
    for name, (count, period) in (rate or {}).items():
        declared.declare_task(f"task-{name}", rate_limit=(count, period), rate_limit_key=name)
    for name, holders in (concurrency or {}).items():
        declared.declare_task(f"c-{name}", concurrency=holders, concurrency_key=name)
    return declared


def ids(state: QueueState, now: float, count: int, declared: Limits) -> list[str]:
    return [entry.id for entry in state.ready(now, count, declared)]


class ConcurrencyTest(unittest.TestCase):
    def test_a_key_holds_at_most_its_limit_and_every_way_out_of_a_lease_frees_it(self) -> None:
        log = Log()
        log.batch(*(limited(f"j{n}", ck="k") for n in range(6)))
        declared = limits(concurrency={"k": 2})
        state = replay(log.batches)
        self.assertEqual(ids(state, 0.0, 10, declared), ["j0", "j1"])
        log.batch(lease("j0", 1), lease("j1", 2))
        state = replay(log.batches)
        self.assertEqual(state.limited.in_use, {"k": 2})
        self.assertEqual(ids(state, 0.0, 10, declared), [])
        for ending, nxt, tok in [(ack("j0", 1), "j2", 3), (nack("j1", 2, at=0.0), "j1", 4),
                                 (snooze("j2", 3, at=0.0), "j2", 5),
                                 (expire("j1", 4, at=0.0), "j1", 6)]:
            log.batch(ending)
            state = replay(log.batches)
            self.assertEqual(state.limited.in_use, {"k": 1}, ending)
            self.assertIn(nxt, ids(state, 1.0, 10, declared))
            log.batch(lease(nxt, tok))
        log.batch(cancel("j1"), cancel("j2"))
        self.assertEqual(replay(log.batches).limited.in_use, {})

    def test_a_process_that_declared_no_limit_leases_limited_jobs_in_order(self) -> None:
        log = Log()
        log.batch(enq("a"), limited("b", ck="k"), limited("c", ck="k"), enq("d"))
        log.batch(lease("b", 1))
        self.assertEqual(ids(replay(log.batches), 0.0, 10, Limits()), ["a", "c", "d"])
        self.assertEqual([e.id for e in replay(log.batches).ready(0.0, 10)], ["a", "c", "d"])

    def test_a_saturated_keys_backlog_is_never_looked_at(self) -> None:
        log = Log()
        log.batch(*(limited(f"busy{n}", ck="busy") for n in range(10_000)))
        log.batch(lease("busy0", 1))
        log.batch(limited("free", ck="free"))
        state = replay(log.batches)
        busy = next(keys for keys in state.limited.groups if keys[1] == "busy")

        class Untouchable:
            def ready(self, *args: object) -> None:
                raise AssertionError("the saturated key's jobs were looked at")

            def next_wakeup(self, *args: object) -> None:
                raise AssertionError("the saturated key's jobs were looked at")

        state.limited.groups[busy] = Untouchable()  # type: ignore[assignment]
        declared = limits(concurrency={"busy": 1, "free": 1})
        self.assertEqual(ids(state, 0.0, 5, declared), ["free"])

    def test_requeued_and_purged_limited_jobs_follow_their_keys(self) -> None:
        log = Log()
        log.batch(limited("a", ck="k", ma=1), limited("b", ck="k"))
        log.batch(lease("a", 1))
        log.batch(nack("a", 1))  # dead on its only attempt: its slot frees
        declared = limits(concurrency={"k": 1})
        self.assertEqual(ids(replay(log.batches), 9.0, 5, declared), ["b"])
        log.batch(requeue("a", at=0.0))
        self.assertEqual(ids(replay(log.batches), 9.0, 5, declared), ["a"])
        log.batch(purge())
        state = replay(log.batches)
        self.assertEqual((state.limited.keys, state.limited.groups), ({}, {}))


class RateWindowTest(unittest.TestCase):
    def test_a_window_counts_the_lease_times_of_its_key_and_keeps_the_latest(self) -> None:
        log = Log()
        log.batch(declare("r", 2, 10.0), *(limited(f"j{n}", rk="r") for n in range(5)),
                  enq("plain"))
        for n, at in enumerate((1.0, 2.0, 11.5)):
            log.batch(lease(f"j{n}", n + 1, t=at))
        log.batch(lease("plain", 9, t=11.6))  # not the key's
        state = replay(log.batches)
        self.assertEqual(list(state.limited.windows["r"].starts), [2.0, 11.5])
        declared = limits(rate={"r": (2, 10.0)})
        self.assertEqual(ids(state, 11.9, 5, declared), [])  # 2.0 and 11.5 in (1.9, 11.9]
        self.assertEqual(state.next_wakeup(declared, 11.9), 12.0)
        self.assertEqual(ids(state, 12.0, 5, declared), ["j3"])  # 2.0 left: (2.0, 12.0]
        self.assertEqual(ids(state, 12.0, 5, limits(rate={"r": (3, 10.0)})), ["j3", "j4"])

    def test_the_queue_window_counts_every_lease(self) -> None:
        log = Log()
        log.batch(declare("", 1, 5.0), enq("a"), enq("b"))
        log.batch(lease("a", 1, t=1.0))
        state = replay(log.batches)
        declared = Limits()
        declared.declare_queue((1, 5.0))
        self.assertEqual(ids(state, 5.0, 5, declared), [])
        self.assertEqual(ids(state, 6.0, 5, declared), ["b"])

    def test_a_snapshot_limit_record_carries_its_starts(self) -> None:
        log = Log()
        log.batch(declare("r", 3, 10.0, st=[1.0, 2.0]), limited("a", rk="r"))
        log.batch(lease("a", 1, t=3.0), declare("r", 2, 10.0))  # a smaller count keeps the latest
        self.assertEqual(list(replay(log.batches).limited.windows["r"].starts), [2.0, 3.0])

    def test_bad_limit_fields_are_corruption(self) -> None:
        for bad in ([limited("a", rk="")], [limited("a", ck=7)],  # type: ignore[arg-type]
                    [declare("r", 0, 1.0)], [declare("r", 1, 0.0)],
                    [declare("r", 1, 1.0, st=["x"])]):  # type: ignore[list-item]
            log = Log()
            log.batch(*bad)
            with self.subTest(bad=bad), self.assertRaises(ReplayError):
                replay(log.batches)

    def test_replay_in_pieces_gives_the_same_state(self) -> None:
        log = Log()
        log.batch(declare("r", 2, 10.0), *(limited(f"j{n}", rk="r", ck="k") for n in range(4)))
        log.batch(lease("j0", 1, t=1.0), lease("j1", 2, t=1.5))
        log.batch(ack("j0", 1), expire("j1", 2, at=0.0))
        whole = replay(log.batches)
        pieces = QueueState()
        for batch in log.batches:
            pieces.apply_batch(batch)
        self.assertEqual(whole, pieces)
        self.assertEqual(whole.limited.fingerprint(), ((), (("r", 2, 10.0, (1.0, 1.5)),), ()))


class CheckpointTest(unittest.TestCase):
    def test_a_checkpoint_keeps_the_keys_holders_and_windows(self) -> None:
        log = Log()
        log.batch(declare("r", 2, 10.0), declare("", 5, 1.0),
                  *(limited(f"j{n}", rk="r", ck=f"k{n % 2}") for n in range(6)), enq("plain"))
        log.batch(lease("j0", 1, t=1.0), lease("j1", 2, t=1.5), lease("plain", 3, t=1.6))
        log.batch(ack("j0", 1))
        state = replay(log.batches)
        data = checkpoint.encode(state, 0, 1 << 20, 7)
        restored, _, _ = checkpoint.decode(data, 0, 1 << 20, lambda _: 7)
        self.assertEqual(restored, state)
        declared = limits(rate={"r": (2, 10.0)}, concurrency={"k0": 1, "k1": 1})
        self.assertEqual(ids(restored, 2.0, 9, declared), ids(state, 2.0, 9, declared))
        self.assertEqual(ids(restored, 12.0, 9, declared), ["j2"])  # k1 still held by j1
        self.assertEqual(restored.limited.in_use, {"k1": 1})

    def test_a_checkpoint_whose_limited_jobs_do_not_fit_its_columns_is_not_used(self) -> None:
        log = Log()
        log.batch(limited("a", ck="k"))
        state = replay(log.batches)
        state.limited.keys[99] = (None, "k")  # a job the columns do not hold
        with self.assertRaises(checkpoint.CheckpointError):
            checkpoint.decode(checkpoint.encode(state, 0, 1 << 20, 7), 0, 1 << 20, lambda _: 7)


class ReopenTest(TempDirTestCase):
    """On disk: the windows and holders come back from a checkpoint, a compaction's
    snapshot, and a replay of the whole log alike."""

    def open(self, clock: FakeClock, **options: Any) -> Any:
        q = file_queue(self.tmp / "q", clock=clock, limits=limits(
            rate={"r": (2, 10.0)}, concurrency={"k": 1}), **options)
        self.addCleanup(q.close)
        return q

    def test_limits_hold_across_a_reopen_whichever_way_the_state_comes_back(self) -> None:
        clock = FakeClock()
        q = self.open(clock, checkpoint_after_bytes=0)  # close() leaves a checkpoint
        q.enqueue_many([{"task": "task-r", "args": [n], "kwargs": {}} for n in range(4)])
        q.enqueue_many([{"task": "c-k", "args": [n], "kwargs": {}} for n in range(2)])
        self.assertEqual(len(q.lease(9)), 3)  # two of the window's, one holder
        q.close()
        self.assertTrue((self.tmp / "q" / "default.000000.ckpt").exists())
        for way in ({}, {"checkpoints": False}, "compact"):
            with self.subTest(way=way):
                again = self.open(clock, **(way if isinstance(way, dict) else {}))
                if way == "compact":
                    again.compact()
                    again.close()
                    again = self.open(clock)
                self.assertEqual(again.lease(9), [])
                again.close()
        clock.advance(10.0)
        self.assertEqual(len(self.open(clock).lease(9)), 2)  # the window's; k still held


class RevivedCapTest(TempDirTestCase):
    """A dependent a death cancelled keeps its stored cap ("cc") while cancelled (its
    CANCEL, a compaction's FINISHED, a checkpoint) and has it again once a requeue
    revives it: a process that did not declare the key reports it."""

    def test_a_revived_dependent_keeps_the_cap_its_enqueue_stored(self) -> None:
        directory = self.tmp / "q"
        with file_queue(directory, checkpoint_after_bytes=0) as q:  # close(): a checkpoint
            capped = q.task(name="capped", concurrency=2, concurrency_key=lambda who: who)(
                lambda who: None)
            first = q.enqueue("first", max_attempts=1)
            dependent = capped.apply_async(("acme",), depends_on=first)
            q.nack(q.lease(1)[0], error="boom")
            self.assertIs(q.get(dependent.id).state, JobState.CANCELLED)
        for way in ("replay", "checkpoint", "compact"):
            with self.subTest(way=way), file_queue(directory,
                                                   checkpoints=way == "checkpoint") as q:
                if way == "compact":
                    q.compact()
                (dormant,) = q.backend.export_dormant()  # type: ignore[attr-defined]
                self.assertEqual((dormant.keys, dormant.cap), ((None, "capped\x00acme"), 2))
        with file_queue(directory) as q:
            self.assertEqual(q.requeue_dead(first.id), 1)
        with file_queue(directory, checkpoints=False) as q:  # the REVIVE replayed
            self.assertEqual(q.backend.export_limits(),  # type: ignore[attr-defined]
                             {dependent.id: ((None, "capped\x00acme"), 2)})
            q.ack(q.lease(1)[0])  # first: the dependent runs
            self.assertEqual([j.id for j in q.lease(5)], [dependent.id])
            self.assertEqual([(u.key, u.value, u.used, u.limit) for u in q.limit_use()
                              if u.kind == "concurrency"], [("capped", "acme", 1, 2)])


if __name__ == "__main__":
    unittest.main()
