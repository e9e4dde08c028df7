"""tools/bench/run.py's canvas rows (issue 22, "Performance"), each a ratio in one run
(the engine's own rows, enqueue_graph and a node's many prerequisites, are
workflows.py's):

- group_enqueue: `group(...).delay()` of N no-op members (one write) vs
  `q.enqueue_many` of the same N task payloads;
- chord_drain: a Worker draining a chord of N no-op members, callback
  included, vs draining N plain task jobs running the same no-op;
- chain_run: a chain of 100 no-op steps, delay() to the last step's get(),
  vs 100 sequential `delay().get()` round trips, one Worker process running
  both.

Signatures are built before the clock starts; "plain jobs" are task jobs
running the same no-op.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from tools.bench.common import (
    child_error,
    fmt_per_op,
    fmt_time,
    interleave,
    median,
    noop,
    reap,
    spawn,
)
from tools.bench.context import Context, Row, nobroker_api, require, verdict, worker_class

__all__ = ["wl_group_enqueue", "wl_chord_drain", "wl_chain_run"]

CHAIN_STEPS = 100
_JOB = {"task": "bench.noop", "args": [], "kwargs": {}}


def wl_group_enqueue(ctx: Context) -> list[Row]:
    """One group of cfg.batch members vs enqueue_many of their payloads, interleaved."""
    nb = nobroker_api()
    require(nb, "group")
    n = ctx.cfg.batch
    with nb.Queue(str(ctx.new_dir("group-enqueue"))) as q:
        task = q.task(name="bench.noop")(noop)

        def group_run() -> float:
            canvas = nb.group(task.s(i) for i in range(n))  # built before the clock
            t = time.perf_counter()
            canvas.delay()
            return time.perf_counter() - t

        def many_run() -> float:
            payloads = [{"task": "bench.noop", "args": [i], "kwargs": {}} for i in range(n)]
            t = time.perf_counter()
            q.enqueue_many(payloads)
            return time.perf_counter() - t

        res = interleave(ctx.cfg.rounds, [("group", group_run), ("many", many_run)])
    ratio = median(res["group"]) / median(res["many"])
    return [Row("group_enqueue", f"group of {n:,} no-op members .delay()",
                fmt_per_op(median(res["group"]), n),
                f"enqueue_many: {fmt_per_op(median(res['many']), n)}", ratio,
                "<= 1.3x (time)", verdict(ratio <= 1.3), note="one durable write each",
                data=res)]


def wl_chord_drain(ctx: Context) -> list[Row]:
    """A Worker (one slot, in a thread) draining a chord of cfg.batch members and its
    callback vs draining cfg.batch plain task jobs; enqueueing is not timed."""
    nb = nobroker_api()
    require(nb, "chord")
    worker_cls = worker_class()
    n = ctx.cfg.batch

    def drained(enqueue: Callable[[Any, Any], int]) -> float:
        """A fresh queue (what earlier rounds kept would weigh on the later ones), filled
        by `enqueue(queue, task)`, drained by a Worker; the drain is timed."""
        with nb.Queue(str(ctx.new_dir("chord-drain"))) as q:
            jobs = enqueue(q, q.task(name="bench.noop")(noop))
            worker = worker_cls(q, max_jobs=jobs, handle_signals=False)
            t = time.perf_counter()
            stats = worker.run()
            elapsed = time.perf_counter() - t
        if stats.succeeded != jobs:
            raise RuntimeError(f"drained {stats}, expected {jobs} jobs")
        return elapsed

    def chord_jobs(q: Any, task: Any) -> int:
        nb.chord([task.s() for _ in range(n)], task.s()).delay()
        return n + 1

    def plain_jobs(q: Any, task: Any) -> int:
        q.enqueue_many([_JOB] * n)
        return n

    res = interleave(ctx.cfg.rounds, [("chord", lambda: drained(chord_jobs)),
                                      ("plain", lambda: drained(plain_jobs))])
    chord_t, plain_t = median(res["chord"]), median(res["plain"])
    ratio = (n / chord_t) / (n / plain_t)
    return [Row("chord_drain", f"chord of {n:,} no-op members, drained",
                f"{n / chord_t:,.0f} members/s", f"{n:,} plain jobs: {n / plain_t:,.0f} jobs/s",
                ratio, ">= 0.8x (speed)", verdict(ratio >= 0.8),
                note="callback included; Worker concurrency 1", data=res)]


def _child_worker(directory: str, ready: Any, out: Any) -> None:
    """Process body for wl_chain_run: Worker(q) running the no-op task."""
    try:
        nb = nobroker_api()
        q = nb.Queue(directory)
        q.task(name="bench.noop")(noop)
        worker = worker_class()(q)
        ready.put(os.getpid())
        worker.run()
        out.put(("ok", None))
    except BaseException as exc:
        out.put(("error", child_error(exc)))


def wl_chain_run(ctx: Context) -> list[Row]:
    """A chain of 100 no-op steps vs 100 sequential delay().get(), one Worker process."""
    nb = nobroker_api()
    require(nb, "chain")
    d = ctx.new_dir("chain-run")
    mp = spawn()
    ready, out = mp.Queue(), mp.Queue()
    q = nb.Queue(str(d))
    task = q.task(name="bench.noop")(noop)
    proc = mp.Process(target=_child_worker, args=(str(d), ready, out))
    proc.start()
    try:
        ready.get(timeout=60)
        task.delay().get(timeout=60)  # the worker is up and has run a job

        def chain_run() -> float:
            canvas = nb.chain(task.s() for _ in range(CHAIN_STEPS))
            t = time.perf_counter()
            canvas.delay().get(timeout=120)
            return time.perf_counter() - t

        def roundtrips() -> float:
            t = time.perf_counter()
            for _ in range(CHAIN_STEPS):
                task.delay().get(timeout=30)
            return time.perf_counter() - t

        res = interleave(ctx.cfg.rounds, [("chain", chain_run), ("roundtrips", roundtrips)])
    finally:
        q.close()
        proc.terminate()
        reap(proc, 10)
    ratio = median(res["chain"]) / median(res["roundtrips"])
    return [Row("chain_run", f"chain of {CHAIN_STEPS} no-op steps, delay -> get",
                fmt_time(median(res["chain"])),
                f"{CHAIN_STEPS} x delay().get(): {fmt_time(median(res['roundtrips']))}", ratio,
                "<= 1.3x (time)", verdict(ratio <= 1.3), note="Worker in another process",
                data=res)]

