"""tools/bench/run.py's progress rows (issue 24): what current_job().progress() costs.

A report that is written is one fenced record under the job's lease, the same
kind of write as `extend`: the first row times N reports written one by one
(`interval=0`: no coalescing) against N extends of the same lease,
interleaved. The second row times a task's loop reporting every item with the
default coalescing (at most one write a second), per call: what a loop over
many items pays for reporting each.
"""

from __future__ import annotations

import time

from tools.bench.common import fmt_per_op, interleave, median
from tools.bench.context import Context, Row, nobroker_api, require


def wl_progress(ctx: Context) -> list[Row]:
    """progress() written every time vs extend(), then progress() coalesced."""
    nb = nobroker_api()
    require(nb.Queue, "get")
    try:
        from nobroker.tasks import RunningJob
    except ImportError:
        from tools.bench.context import Missing
        raise Missing("nobroker.tasks.RunningJob") from None
    n = min(ctx.cfg.enqueue_ops, 500)
    d = ctx.new_dir("progress")
    with nb.Queue(str(d)) as q:
        q.enqueue({"n": 1})
        job = q.lease_one(visibility_timeout=3600)
        assert job is not None
        every = RunningJob(job, q.backend, interval=0.0)  # each report a write
        coalesced = RunningJob(job, q.backend)  # the Worker's: one write a second

        def progress_run() -> float:
            t = time.perf_counter()
            for i in range(n):
                every.progress(i / n, "item")
            return time.perf_counter() - t

        def extend_run() -> float:
            t = time.perf_counter()
            for _ in range(n):
                q.extend(job, 3600)
            return time.perf_counter() - t

        def coalesced_run() -> float:
            loops = n * 20
            t = time.perf_counter()
            for i in range(loops):
                coalesced.progress(i / loops, "item")
            coalesced.flush()
            return (time.perf_counter() - t) / 20

        res = interleave(ctx.cfg.rounds, [("progress", progress_run), ("extend", extend_run),
                                          ("coalesced", coalesced_run)])
        q.ack(job)
    ratio = median(res["progress"]) / median(res["extend"])
    per_call = median(res["coalesced"]) / n
    return [
        Row("progress", "progress() written (a PROGRESS record)",
            fmt_per_op(median(res["progress"]), n),
            f"extend(), the same fenced write: {fmt_per_op(median(res['extend']), n)}",
            ratio, note=f"{n} ops/round", data=res),
        Row("progress", "progress() in a loop, coalesced (1 write/s)",
            f"{per_call * 1e6:.2f} us/call", note=f"{n * 20} calls/round, then a flush",
            data={"coalesced": res["coalesced"]}),
    ]
