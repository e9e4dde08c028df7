"""enqueue_graph on the file log: one batch and one fsync for the whole graph, and
the planner's records (file/state/graphs.py), checked without a disk.

The rules themselves (modes, order, errors) are the contract's
(tests/contract/graph_contract.py); this is what only the file engine can show.
"""

from __future__ import annotations

import os
import random
import unittest
from typing import Any

from harness.support import TempDirTestCase, file_queue

from nobroker import JobNotFoundError, NobrokerError
from nobroker.dependencies import NO_FAILURE, GraphNode, checked_nodes
from nobroker.file.disk.fs import FileSystem
from nobroker.file.inspection import read_records
from nobroker.file.log.records import RecordType as RT
from nobroker.file.state.batch import Batch
from nobroker.file.state.commands import plan_ack, plan_nack
from nobroker.file.state.graphs import plain_runs, plan_graph
from nobroker.file.state.state import QueueState, replay


class CountingFS(FileSystem):
    """Counts the syncs of log data (fsync and fdatasync of any file)."""

    def __init__(self) -> None:
        self.syncs = 0

    def fsync(self, fd: int) -> None:
        self.syncs += 1
        super().fsync(fd)

    def fdatasync(self, fd: int) -> None:
        self.syncs += 1
        super().fdatasync(fd)


class OneWriteTest(TempDirTestCase):
    def test_a_graph_is_one_batch_and_one_fsync_as_one_enqueue_is(self) -> None:
        fs = CountingFS()
        with file_queue(self.tmp / "q", fs=fs, checkpoints=False) as q:
            first = q.enqueue("first")
            before = fs.syncs
            q.enqueue("one")
            one_enqueue = fs.syncs - before
            before = fs.syncs
            jobs = q.enqueue_graph([GraphNode(i, (i - 1,) if i % 3 else (first.id,))
                                    if i else GraphNode(0) for i in range(200)])
            self.assertEqual(fs.syncs - before, one_enqueue, "one fsync, as one enqueue")
            self.assertGreaterEqual(one_enqueue, 1)
        batches: list[list[Any]] = [[]]
        for raw in read_records(os.path.join(self.tmp / "q", "default.000000.log")):
            batches[-1].append(raw)
            if not raw.more:
                batches.append([])
        graph = batches[-2]
        self.assertEqual([r.payload["id"] for r in graph], [j.id for j in jobs])
        self.assertEqual({r.type for r in graph}, {"ENQUEUE"})
        self.assertEqual([("w" in r.payload) for r in graph], [i > 0 for i in range(200)])


class PlainRunsTest(unittest.TestCase):
    def test_runs_are_the_nodes_enqueue_many_could_write_together(self) -> None:
        high, also_high = 1000, int("1000")  # equal options, other objects: one run
        assert high is not also_high
        nodes = [GraphNode("a"), GraphNode("b", priority=0), GraphNode("c", (0,)),
                 GraphNode("d", priority=high), GraphNode("e", priority=also_high),
                 GraphNode("f", delay=2.0), GraphNode("g", job_id="key"), GraphNode("h"),
                 GraphNode("i", max_attempts=5)]
        self.assertEqual(plain_runs(nodes), [(0, 2), (3, 5), (5, 6), (7, 8), (8, 9)])
        self.assertEqual(plain_runs([GraphNode("x", (0,))]), [])
        self.assertEqual(plain_runs([]), [])


def plan(state: QueueState, nodes: list[GraphNode], now: float = 1.0
         ) -> list[tuple[RT, dict[str, Any]]]:
    """plan_graph's records for `nodes`, applied to `state` as a commit would."""
    checked = checked_nodes(nodes)
    return commit(state, lambda batch: plan_graph(
        state, batch, now, [f'"{i}"' for i in range(len(checked))], checked,
        random.Random(0), 3))


_APPLIED: dict[int, list[Any]] = {}  # id(state) -> the batches applied to it


def commit(state: QueueState, planner: Any) -> list[tuple[RT, dict[str, Any]]]:
    """Plan a batch, apply it to `state` as the handle would; its records."""
    batch = Batch(state.last_batch + 1, keep=9.0)
    planner(batch)
    applied = batch.encode(16 + 100_000 * state.last_batch)[1]
    state.apply_batch(applied)
    _APPLIED.setdefault(id(state), []).append(applied)
    return [(RT(rtype), dict(record)) for rtype, record in batch.records()]


def replayed(state: QueueState) -> QueueState:
    """The state replay rebuilds from the batches committed to `state`."""
    return replay(_APPLIED[id(state)])


class PlannerTest(unittest.TestCase):
    """The graph planner and the failure mode over the pure replay state."""

    def test_nodes_are_planned_in_order_and_replay_to_the_same_state(self) -> None:
        state = QueueState()
        records = plan(state, [GraphNode("a"), GraphNode("b", (0,)),
                               GraphNode("c", (0, 1), mode="any"),
                               GraphNode("d", (2,), mode="failure")])
        ids = [r["id"] for _, r in records]
        self.assertEqual([(t, "w" in r, r.get("af"), r.get("of")) for t, r in records],
                         [(RT.ENQUEUE, False, None, None), (RT.ENQUEUE, True, None, None),
                          (RT.ENQUEUE, True, True, None), (RT.ENQUEUE, True, None, True)])
        self.assertEqual(records[2][1]["w"], ids[:2])
        self.assertEqual((state.pending, state.waiting), (1, 3))
        self.assertEqual(state.waits.items()[-1], (ids[3], [ids[2]], False, "failure"))
        self.assertEqual(len({r["b"] for _, r in records}), 1, "one batch")
        self.assertEqual(replayed(state), state)

    def test_refusals_come_before_any_record(self) -> None:
        state = QueueState()
        plan(state, [GraphNode("x", job_id="x")])
        for nodes, error in [([GraphNode("a"), GraphNode("b", ("gone",))], JobNotFoundError),
                             ([GraphNode("a"), GraphNode("b", job_id="x")], NobrokerError)]:
            batch = Batch(state.last_batch + 1)
            checked = checked_nodes(nodes)
            with self.subTest(error=error), self.assertRaises(error):
                plan_graph(state, batch, 1.0, ['"a"', '"b"'], checked, random.Random(0), 3)
            self.assertEqual(len(batch), 0)

    def test_the_failure_node_mode_replays_as_planned(self) -> None:
        state = QueueState()
        ids = [r["id"] for _, r in plan(state, [
            GraphNode("a", max_attempts=1), GraphNode("b"),
            GraphNode("h", (0, 1), mode="failure"), GraphNode("g", (1,), mode="failure")])]
        commit(state, lambda b: [b.add_lease(e.id, n + 1, 50.0, 2.0)
                                 for n, e in enumerate(state.ready(5.0, 2))])
        died = commit(state, lambda b: plan_nack(state, b, 3.0, ids[0], 1, "boom", None,
                                                 _NoBackoff(), random.Random(0)))
        self.assertEqual([(t, r["id"]) for t, r in died], [(RT.NACK, ids[0]),
                                                           (RT.RELEASE, ids[2])])
        acked = commit(state, lambda b: plan_ack(state, b, 4.0, ids[1], 2))
        self.assertEqual([(t, r["id"], r.get("err")) for t, r in acked],
                         [(RT.ACK, ids[1], None), (RT.CANCEL, ids[3], NO_FAILURE)])
        self.assertEqual((state.waiting, state.pending, state.dead), (0, 1, 1))
        self.assertEqual(state.waits.dependents, {})
        self.assertEqual(replayed(state), state)


class _NoBackoff:
    def delay(self, attempts: int, rng: Any) -> float:
        return 0.0


if __name__ == "__main__":
    unittest.main()
