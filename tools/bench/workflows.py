"""tools/bench/run.py's workflow-engine rows (issue 22): a graph of B independent
nodes vs enqueue_many of the same payloads, and the members of one node waiting
for B prerequisites drained vs B plain jobs (the engine's per-finish cost).

The nodes are built before the clock starts; the canvas's own rows (chains,
groups, chords of task signatures) measure the layer above.
"""

from __future__ import annotations

import importlib
import time
from typing import Any

from tools.bench.common import fmt_per_op, fmt_time, interleave, median
from tools.bench.context import Context, Missing, Row, nobroker_api, require, verdict

DRAIN_CHUNK = 100  # lease(count) and ack_many per call while draining


def _graph_node() -> Any:
    try:
        return importlib.import_module("nobroker.dependencies").GraphNode
    except (ImportError, AttributeError):
        raise Missing("nobroker.dependencies.GraphNode") from None


def wl_graph(ctx: Context) -> list[Row]:
    """enqueue_graph of B nodes without prerequisites (one fsync) vs enqueue_many of the
    same B payloads (one fsync), interleaved in one queue."""
    nb, node = nobroker_api(), _graph_node()
    cfg = ctx.cfg
    b = cfg.batch
    d = ctx.new_dir("graph")
    with nb.Queue(str(d)) as q:
        require(q, "enqueue_graph", "enqueue_many")

        def graph_run() -> float:
            nodes = [node(p) for p in ctx.payloads(b)]
            t = time.perf_counter()
            q.enqueue_graph(nodes)
            return time.perf_counter() - t

        def many_run() -> float:
            payloads = ctx.payloads(b)
            t = time.perf_counter()
            q.enqueue_many(payloads)
            return time.perf_counter() - t

        res = interleave(cfg.rounds, [("enqueue_graph", graph_run), ("enqueue_many", many_run)])
    graph_t, many_t = median(res["enqueue_graph"]), median(res["enqueue_many"])
    ratio = graph_t / many_t
    return [Row("graph", f"enqueue_graph of {b:,} independent nodes (one fsync)",
                fmt_per_op(graph_t, b), f"enqueue_many: {fmt_per_op(many_t, b)}", ratio,
                "<= 1.3x (time)", verdict(ratio <= 1.3),
                note=f"per job; {fmt_time(graph_t)} per call", data={"batch": b, **res})]


def _drain(q: Any, count: int) -> float:
    """Seconds to lease and ack_many `count` jobs, DRAIN_CHUNK at a time."""
    done = 0
    t = time.perf_counter()
    while done < count:
        jobs = q.lease(count=min(DRAIN_CHUNK, count - done))
        if not jobs:
            raise RuntimeError(f"queue ran dry after {done} of {count} jobs")
        q.ack_many(jobs)
        done += len(jobs)
    return time.perf_counter() - t


def wl_fanin(ctx: Context) -> list[Row]:
    """B members of one node that waits for all of them (mode "success"), drained by
    lease + ack_many of 100, vs B plain jobs drained the same way; the node's release
    is in the last ack's write. Each member's finish must cost O(1), not a look at
    the members left."""
    nb, node = nobroker_api(), _graph_node()
    cfg = ctx.cfg
    b = cfg.batch
    d = ctx.new_dir("fanin")
    with nb.Queue(str(d)) as q:
        require(q, "enqueue_graph", "lease", "ack_many")

        def fanin_run() -> float:
            nodes = [node(p) for p in ctx.payloads(b)]
            nodes.append(node({"callback": True}, tuple(range(b))))
            q.enqueue_graph(nodes)
            elapsed = _drain(q, b)
            _drain(q, 1)  # the released node, not timed as a member
            return elapsed

        def plain_run() -> float:
            q.enqueue_many(ctx.payloads(b))
            return _drain(q, b)

        res = interleave(cfg.rounds, [("fanin", fanin_run), ("plain", plain_run)])
    fan_t, plain_t = median(res["fanin"]), median(res["plain"])
    ratio = plain_t / fan_t
    return [Row("fanin", f"draining {b:,} prerequisites of one node",
                fmt_per_op(fan_t, b), f"{b:,} plain jobs: {fmt_per_op(plain_t, b)}", ratio,
                ">= 0.8x (speed)", verdict(ratio >= 0.8),
                note=f"lease(count={DRAIN_CHUNK}) + ack_many", data={"batch": b, **res})]
