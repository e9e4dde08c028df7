"""The limits' row: what a rate limit and a concurrency limit on an unsaturated key
cost a lease, next to the same lease of an unlimited job (issue 24: <= 1.1x).

Both sides run the same loop (`job = q.ack_and_lease(job)`, one fsync per job)
on a queue of their own, interleaved in rounds (A B C D, then D C B A, ...).
The queues hold the same jobs (calls of task "job"); only the limited queues
declare that task, one with `concurrency=`, one with `rate_limit=`, one with
both, each high enough never to hold one back (a row each): the rows measure
the bookkeeping (a LIMIT record once, the job's keys on its ENQUEUE, its key's
due index, the window or the holders counted on every lease), not waiting.
Automatic compaction is off on all: it would run in whichever window its log
crossed the threshold in (a limited log, its records a few bytes longer,
crossed it first), which a row would report as the limit's cost; compaction
has rows of its own.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from statistics import median
from typing import Any

from tools.bench.common import fmt_per_op, interleave
from tools.bench.context import Context, Row, nobroker_api, verdict


def _noop(n: int) -> int:
    return n


def _interleaved_loops(queues: dict[str, Any], n: int, rounds: int,
                       meter: Callable[[], float] | None = None,
                       metered: dict[str, list[float]] | None = None
                       ) -> dict[str, list[float]]:
    """Each queue's time for `n` ack_and_lease round trips, interleaved over `rounds`;
    the queues are closed afterwards. With `meter` (a reading that grows, such as a
    server's CPU seconds), what it grew by in each round goes into `metered[label]`."""
    def loop(label: str, q: Any) -> Callable[[], float]:
        def run() -> float:
            job = q.lease_one()
            before = meter() if meter else 0.0
            t = time.perf_counter()
            for _ in range(n):
                job = q.ack_and_lease(job)
                if job is None:
                    raise RuntimeError("queue ran dry during ack_and_lease")
            elapsed = time.perf_counter() - t
            if meter and metered is not None:
                metered.setdefault(label, []).append(meter() - before)
            q.ack(job)
            return elapsed
        return run

    contenders = [(label, loop(label, q)) for label, q in queues.items()]
    try:  # alternate the order, so that neither side always runs second
        results: dict[str, list[float]] = {label: [] for label, _ in contenders}
        for turn in range(rounds):
            for label, values in interleave(1, contenders[::-1] if turn % 2 else contenders
                                            ).items():
                results[label] += values
        return results
    finally:
        for q in queues.values():
            q.close()


LIMITED = {  # what the limited queue's task declares, a row each (issue 24: "a rate
    # limit or concurrency limit"); none is ever reached
    "concurrency": ("a concurrency-limited job", {"concurrency": 100_000}),
    "rate": ("a rate-limited job", {"rate_limit": (100_000, 1.0)}),
    "both": ("a rate- and concurrency-limited job",
             {"rate_limit": (100_000, 1.0), "concurrency": 100_000}),
}


def wl_limits(ctx: Context) -> list[Row]:
    """ack_and_lease round trips: limited (unsaturated) vs unlimited jobs, a row for a
    concurrency limit, a rate limit and both, each against one unlimited queue
    interleaved with all three."""
    nb = nobroker_api()
    cfg = ctx.cfg
    n = cfg.ack_ops
    need = cfg.rounds * n + 50
    queues: dict[str, Any] = {}
    for label in ("unlimited", *LIMITED):
        q = nb.Queue(str(ctx.new_dir(f"limits-{label}")), auto_compact=None)
        if label in LIMITED:
            q.task(name="job", **LIMITED[label][1])(_noop)
        q.enqueue_many([{"task": "job", "args": [i], "kwargs": {}} for i in range(need)])
        queues[label] = q

    res = _interleaved_loops(queues, n, cfg.rounds)
    plain_t = median(res["unlimited"])
    rows = []
    for label, (what, _) in LIMITED.items():
        limited_t = median(res[label])
        ratio = limited_t / plain_t
        rows.append(Row("limits", f"lease of {what} (unsaturated)",
                        fmt_per_op(limited_t, n), f"unlimited: {fmt_per_op(plain_t, n)}",
                        ratio, "<= 1.1x (time)", verdict(ratio <= 1.1),
                        note=f"{n} ack_and_lease round trips/round, one consumer",
                        data={"ops": n, "unlimited": res["unlimited"], label: res[label]}))
    return rows


FULL_KEYS = 10_000  # computed concurrency keys (customers), each at its limit


def wl_limits_many_keys(ctx: Context) -> list[Row]:
    """ack_and_lease round trips of one free key's jobs beside 10,000 full concurrency
    keys, vs the same without them: what the full keys cost a lease (limits.Parking)."""
    nb = nobroker_api()
    cfg = ctx.cfg
    n = cfg.ack_ops
    need = cfg.rounds * n + 50
    queues: dict[str, Any] = {}
    for label, full in (("no full keys", False), ("10,000 full keys", True)):
        q = nb.Queue(str(ctx.new_dir("limits-keys")), visibility_timeout=3600)
        q.task(name="per_customer", concurrency=1, concurrency_key=lambda who: who)(_noop)
        if full:
            q.enqueue_many([{"task": "per_customer", "args": [f"c{i}"], "kwargs": {}}
                            for i in range(FULL_KEYS) for _ in range(2)])
            if len(q.lease(FULL_KEYS)) != FULL_KEYS:
                raise RuntimeError("the full keys were not all leased")
        q.enqueue_many([{"task": "plain", "args": [i], "kwargs": {}} for i in range(need)])
        queues[label] = q

    res = _interleaved_loops(queues, n, cfg.rounds)
    full_t, plain_t = median(res["10,000 full keys"]), median(res["no full keys"])
    ratio = full_t / plain_t
    return [Row("limits_many_keys", "lease beside 10,000 full concurrency keys",
                fmt_per_op(full_t, n), f"no full keys: {fmt_per_op(plain_t, n)}", ratio,
                "<= 1.1x (time)", verdict(ratio <= 1.1),
                note=f"{n} ack_and_lease round trips/round; the full keys' groups parked",
                data={"ops": n, **res})]
