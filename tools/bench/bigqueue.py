"""tools/bench/run.py's rows on the big queue (cfg.big_n pending jobs, built once by
Context.big_queue): cold open to the first job, memory per pending job, stats()
at size, and compaction while another process enqueues.
"""

from __future__ import annotations

import gc
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tools.bench.common import (
    child_error,
    fmt_time,
    framed_sizes,
    interleave,
    json_loads_log,
    median,
    reap,
    rss_bytes,
    small_payload,
    small_payloads,
    spawn,
)
from tools.bench.context import ENQUEUE_TYPE, Context, Row, nobroker_api, require, verdict


def _build_and_crash(directory: str, jobs: int) -> None:
    """Process body for wl_cold_open: enqueue `jobs` jobs, then die like kill -9."""
    nb = nobroker_api()
    q = nb.Queue(directory, auto_compact=None)
    done = 0
    while done < jobs:
        k = min(10_000, jobs - done)
        q.enqueue_many(small_payloads(done, k))
        done += k
    os._exit(9)  # no close(): whatever checkpoint exists was saved while running


def wl_cold_open(ctx: Context) -> list[Row]:
    """Cold open of a log with N pending jobs, to the first job in hand.

    nobroker: ``Queue(dir)`` + ``lease_one()`` (which appends one LEASE record
    and fsyncs); close is not timed. Three times: as the queue was left by a
    clean close() (which saves a checkpoint); as a process that built the
    same queue and then died by os._exit left it (only the checkpoints a live
    handle saves as its log grows); and from a copy with every ``*.ckpt``
    file deleted before each open (a full replay, the worst case).
    Baseline: read the log files, split the records, json.loads each payload.
    Page cache is warm for all.
    """
    nb = nobroker_api()
    cfg = ctx.cfg
    d = ctx.big_queue()
    bare = ctx.root / "cold-no-checkpoint"
    shutil.copytree(d, bare, ignore=shutil.ignore_patterns("*.ckpt"))
    had_checkpoint = any(d.glob("*.ckpt"))
    crashed = ctx.new_dir("crashed")
    builder = spawn().Process(target=_build_and_crash, args=(str(crashed), cfg.big_n))
    builder.start()
    builder.join()
    crashed_copy = ctx.root / "cold-crashed-copy"

    def crashed_run() -> float:
        # A fresh copy each round: opening saves nothing, but lease_one writes.
        shutil.rmtree(crashed_copy, ignore_errors=True)
        shutil.copytree(crashed, crashed_copy)
        return open_run(crashed_copy, False)()

    def open_run(where: Path, strip: bool) -> Callable[[], float]:
        def run() -> float:
            if strip:
                for p in where.glob("*.ckpt"):
                    p.unlink()
            t = time.perf_counter()
            q = nb.Queue(str(where))
            job = q.lease_one()
            elapsed = time.perf_counter() - t
            q.close()
            if job is None:
                raise RuntimeError("cold open: lease_one returned None")
            return elapsed
        return run

    records: list[int] = []

    def loads_run() -> float:
        t = time.perf_counter()
        records.append(json_loads_log(d))
        return time.perf_counter() - t

    res = interleave(cfg.rounds, [("nobroker", open_run(d, False)),
                                  ("crashed", crashed_run),
                                  ("no_checkpoint", open_run(bare, True)),
                                  ("json_loads", loads_run)])
    shutil.rmtree(bare, ignore_errors=True)
    shutil.rmtree(crashed_copy, ignore_errors=True)
    nb_t, crash_t, bare_t, js_t = (median(res["nobroker"]), median(res["crashed"]),
                                   median(res["no_checkpoint"]), median(res["json_loads"]))
    base = f"json.loads of {records[-1]:,} records: {fmt_time(js_t)}"
    return [
        Row("cold_open", f"cold open, {cfg.big_n:,} pending, to first job", fmt_time(nb_t),
            base, nb_t / js_t, "<= 1.0x (time)", verdict(nb_t / js_t <= 1.0),
            note=("after a clean close(); "
                  f"{'with' if had_checkpoint else 'no'} checkpoint file; warm page cache"),
            data={"jobs": cfg.big_n, **res}),
        Row("cold_open", f"cold open, {cfg.big_n:,} pending, after the writer was killed",
            fmt_time(crash_t), base, crash_t / js_t, "<= 1.0x (time)",
            verdict(crash_t / js_t <= 1.0),
            note="built by a process that then died by os._exit(9): no close()"),
        Row("cold_open", f"cold open, {cfg.big_n:,} pending, no checkpoint at all",
            fmt_time(bare_t), base, bare_t / js_t, "info", "info",
            note="*.ckpt deleted before each open; full replay (the worst case)"),
    ]


def _child_memory(directory: str, mode: str, out: Any) -> None:
    """Process body for wl_memory: open the queue, report memory growth."""
    try:
        import tracemalloc

        nobroker = nobroker_api()
        # warm-up on a one-job queue: lazy imports and caches are not per-job memory
        with nobroker.Queue(tempfile.mkdtemp(dir=os.path.dirname(directory))) as w:
            w.enqueue({"warm": 1})
            w.ack(w.lease_one())
            w.stats()
        gc.collect()
        if mode == "tracemalloc":
            tracemalloc.start()
        rss0 = rss_bytes()
        q = nobroker.Queue(directory)
        gc.collect()
        rss1 = rss_bytes()
        traced1 = tracemalloc.get_traced_memory()[0] if mode == "tracemalloc" else 0
        q.lease_one()  # a queue in use: whatever the first lease builds counts too
        gc.collect()
        rss2 = rss_bytes()
        traced2 = tracemalloc.get_traced_memory()[0] if mode == "tracemalloc" else 0
        s = q.stats()
        jobs = int(getattr(s, "pending", 0)) + int(getattr(s, "leased", 0))
        q.close()
        out.put(("ok", {"rss_open": rss1 - rss0, "rss_delta": rss2 - rss0,
                        "traced_open": traced1, "traced": traced2, "jobs": jobs}))
    except BaseException as exc:
        out.put(("error", child_error(exc)))


def run_child(target: Callable[..., None], *args: Any, timeout: float = 600) -> Any:
    """Run target(*args, out_queue) in a spawned process and return what it put."""
    mp = spawn()
    out = mp.Queue()
    p = mp.Process(target=target, args=(*args, out))
    p.start()
    try:
        status, value = out.get(timeout=timeout)
    finally:
        reap(p, 30)
    if status != "ok":
        raise RuntimeError(value)
    return value


def wl_memory(ctx: Context) -> list[Row]:
    """Resident memory per pending job after opening a queue of N pending jobs.

    In a fresh process, after a warm-up on a one-job queue (so lazy imports
    do not count): RSS (from /proc/self/statm) before ``Queue(dir)`` and after
    it plus the first ``lease_one()`` (a queue in use), after gc.collect(),
    divided by the pending+leased jobs. A second process measures the Python
    heap kept (tracemalloc) the same way. The judged figure is the RSS growth,
    which is what the machine pays.
    """
    nobroker_api()
    d = ctx.big_queue()
    rss = run_child(_child_memory, str(d), "rss")
    traced = run_child(_child_memory, str(d), "tracemalloc")
    jobs = max(1, rss["jobs"])
    per_rss = rss["rss_delta"] / jobs
    per_traced = traced["traced"] / max(1, traced["jobs"])
    disk = framed_sizes(d).get(ENQUEUE_TYPE, [])
    disk_per = sum(disk) / len(disk) if disk else float("nan")
    return [Row("memory", f"resident memory per pending job ({jobs:,} jobs)",
                f"{per_rss:,.0f} B/job RSS", f"on disk: {disk_per:,.0f} B/job", None,
                "<= 150 B", verdict(per_rss <= 150),
                note=(f"Python heap kept (tracemalloc): {per_traced:,.0f} B/job; "
                      f"RSS right after open, before the first lease: "
                      f"{rss['rss_open'] / jobs:,.0f} B/job"),
                data={"rss": rss, "tracemalloc": traced})]


def wl_stats(ctx: Context) -> list[Row]:
    """stats(): time per call on the big queue vs on a 1,000-job queue (O(1) check)."""
    nb = nobroker_api()
    cfg = ctx.cfg
    big = ctx.big_queue()
    small = ctx.new_dir("small")
    with nb.Queue(str(small)) as q:
        q.enqueue_many(small_payloads(0, 1_000))
    calls = cfg.stats_calls
    qb = nb.Queue(str(big))
    qs = nb.Queue(str(small))
    try:
        require(qb, "stats")

        def timed(q: Any) -> Callable[[], float]:
            def run() -> float:
                stats = q.stats
                t = time.perf_counter()
                for _ in range(calls):
                    stats()
                return (time.perf_counter() - t) / calls
            return run

        res = interleave(cfg.rounds, [("big", timed(qb)), ("small", timed(qs))])
    finally:
        qb.close()
        qs.close()
    big_t, small_t = median(res["big"]), median(res["small"])
    ratio = big_t / small_t
    ok = big_t <= 20e-6 and ratio <= 2.0
    return [Row("stats", f"stats() at {cfg.big_n:,} jobs", f"{fmt_time(big_t)}/call",
                f"at 1,000 jobs: {fmt_time(small_t)}/call", ratio,
                "<= 20 us and <= 2x (time)", verdict(ok),
                note="O(1): the ratio to the small queue should stay near 1",
                data={"calls": calls, **res})]


def _child_enqueuer(directory: str, ready: Any, stop: Any, out: Any) -> None:
    """Process body for wl_compaction: enqueue nonstop, timing every call."""
    try:
        samples: list[tuple[float, float]] = []
        with nobroker_api().Queue(directory) as q:
            i = 0
            while not stop.is_set():
                t = time.monotonic()
                q.enqueue(small_payload(i))
                samples.append((t, time.monotonic() - t))
                i += 1
                if i == 20:
                    ready.set()
        out.put(("ok", samples))
    except BaseException as exc:
        ready.set()
        out.put(("error", child_error(exc)))


def wl_compaction(ctx: Context) -> list[Row]:
    """compact() of N live jobs while another process keeps enqueuing.

    The other process times every durable enqueue. "Blocked" is the longest
    single enqueue call that overlapped the compact() call; the baseline is
    the same process's median enqueue before compaction started. Each round
    compacts the same queue again (all its jobs stay live). At most 3 rounds:
    one round costs a compaction plus the other process's replay of the log.
    """
    nb = nobroker_api()
    cfg = ctx.cfg
    d = ctx.big_queue()
    mp = spawn()
    blocked: list[float] = []
    durations: list[float] = []
    normal: list[float] = []
    during: list[int] = []
    results: list[str] = []
    with nb.Queue(str(d)) as q:
        require(q, "compact")
        for _ in range(min(cfg.rounds, 3)):
            ready, stop, out = mp.Event(), mp.Event(), mp.Queue()
            proc = mp.Process(target=_child_enqueuer, args=(str(d), ready, stop, out))
            proc.start()
            try:
                if not ready.wait(300):
                    raise RuntimeError("enqueuing process did not start")
                time.sleep(0.2)
                t0 = time.monotonic()
                result = q.compact()
                t1 = time.monotonic()
                time.sleep(0.2)
                stop.set()
                status, samples = out.get(timeout=120)
                if status != "ok":
                    raise RuntimeError(f"enqueuing process failed: {samples}")
            finally:
                stop.set()
                reap(proc, 30)
            over = [dur for (s, dur) in samples if s < t1 and s + dur > t0]
            before = [dur for (s, dur) in samples if s + dur <= t0]
            blocked.append(max(over) if over else 0.0)
            during.append(len(over))
            normal.append(median(before) if before else float("nan"))
            durations.append(t1 - t0)
            results.append(repr(result))
    b = median(blocked)
    return [Row("compaction", f"compaction of {cfg.big_n:,} live jobs: other process blocked",
                fmt_time(b), f"enqueue outside compaction: {fmt_time(median(normal))}", None,
                "<= 200 ms", verdict(b <= 0.200),
                note=(f"compact() took {fmt_time(median(durations))}; worst block "
                      f"{fmt_time(max(blocked))}; {median(during):.0f} enqueues overlapped"),
                data={"blocked": blocked, "compact_seconds": durations, "normal": normal,
                      "enqueues_during": during, "results": results})]
