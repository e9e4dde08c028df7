"""The named workloads: each a function of a Driver, registered in WORKLOADS.

Part of the crash-state explorer; the theory is in harness/explorer/__init__.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nobroker import Job
from nobroker.dependencies import GraphNode
from nobroker.limits import Limits

from .driver import Driver, Workload

WORKLOADS: dict[str, Workload] = {}


def workload(name: str) -> Callable[[Workload], Workload]:
    def register(fn: Workload) -> Workload:
        fn.__name__ = name
        WORKLOADS[name] = fn
        return fn
    return register


def payload(i: int, size: int) -> dict[str, Any]:
    """A payload whose JSON is about `size` bytes (records then straddle sectors)."""
    return {"n": i, "pad": "x" * max(0, size - 20)}


def _held(result: Any) -> list[Job]:
    return [j for j in result if isinstance(j, Job)] if isinstance(result, list) else []


@workload("first_enqueue")
def _w_first_enqueue(d: Driver) -> None:
    h = d.open()
    d.call(h, "enqueue", payload(1, 60))


@workload("lease_ack")
def _w_lease_ack(d: Driver) -> None:
    h = d.open()
    d.call(h, "enqueue", payload(1, 300))
    d.call(h, "enqueue", payload(2, 700))
    for job in _held(d.call(h, "lease", 1)):
        d.call(h, "ack", job)
    for job in _held(d.call(h, "lease", 1)):
        d.call(h, "ack", job)


@workload("enqueue_many")
def _w_enqueue_many(d: Driver) -> None:
    h = d.open()
    d.call(h, "enqueue", payload(0, 50))
    d.call(h, "enqueue_many", [payload(i, 40 + 37 * i) for i in range(20)])
    leased = _held(d.call(h, "lease", 5))
    d.call(h, "ack_many", leased)
    d.call(h, "enqueue_many", [payload(100 + i, 500) for i in range(3)])


@workload("ack_many_and_lease")
def _w_ack_many_and_lease(d: Driver) -> None:
    """The prefetch acker's write: a batch of ACKs and the next LEASE together."""
    h = d.open()
    d.call(h, "enqueue_many", [payload(i, 120 + 60 * i) for i in range(6)])
    leased = _held(d.call(h, "lease", 2))
    leased = _held(d.call(h, "ack_many_and_lease", leased, 3))  # acks 2, leases 3
    d.call(h, "ack_many_and_lease", leased, 5)  # acks 3, leases the one left


@workload("enqueue_many_keyed")
def _w_enqueue_many_keyed(d: Driver) -> None:
    """enqueue_many's runs beside keyed jobs: a key spelling an id the first run would
    take (the writer skips it; replay's one-step run ends there and goes on one by
    one), a repeated key, and a delayed batch of another priority."""
    h = d.open()
    d.call(h, "enqueue", payload(0, 60), job_id="0000000000000006")
    d.call(h, "enqueue_many", [payload(i, 30 + 29 * (i % 7)) for i in range(24)])
    d.call(h, "enqueue", payload(1, 60), job_id="order-1")
    d.call(h, "enqueue", payload(1, 60), job_id="order-1")  # known: writes nothing
    d.call(h, "enqueue_many", [payload(50 + i, 200) for i in range(6)], priority=3,
           delay=5)
    for job in _held(d.call(h, "lease", 3)):
        d.call(h, "ack", job)


@workload("expire_reclaim")
def _w_expire(d: Driver) -> None:
    h = d.open()
    d.call(h, "enqueue", payload(1, 100))
    first = _held(d.call(h, "lease", 1, visibility_timeout=10))
    d.advance(20)
    second = _held(d.call(h, "lease", 1, visibility_timeout=10))  # EXPIRE + LEASE
    for job in first:
        d.call(h, "ack", job)  # stale token: NotLeasedError, writes nothing
    for job in second:
        d.call(h, "ack", job)


@workload("dlq_requeue")
def _w_dlq(d: Driver) -> None:
    h = d.open(max_attempts=2)
    d.call(h, "enqueue", payload(1, 200))
    d.call(h, "enqueue", payload(2, 200))
    for _ in range(2):
        for job in _held(d.call(h, "lease", 1)):
            d.call(h, "nack", job, error="boom", delay=0)
    d.call(h, "dlq")
    d.call(h, "requeue_dead")
    for job in _held(d.call(h, "lease", 2)):
        d.call(h, "ack", job)


@workload("nack_dead")
def _w_nack_dead(d: Driver) -> None:
    """A NACK with `dl` (dead on its first of three attempts) beside a plain NACK."""
    h = d.open(max_attempts=3)
    d.call(h, "enqueue_many", [payload(1, 200), payload(2, 200)])
    for dead in (True, False):
        for job in _held(d.call(h, "lease", 1)):
            d.call(h, "nack", job, error="rejected" if dead else "boom", delay=0, dead=dead)
    d.call(h, "requeue_dead")
    for job in _held(d.call(h, "lease", 2)):
        d.call(h, "ack", job)


@workload("purge")
def _w_purge(d: Driver) -> None:
    h = d.open()
    d.call(h, "enqueue_many", [payload(i, 150) for i in range(5)])
    leased = _held(d.call(h, "lease", 1))
    d.call(h, "purge")
    for job in leased:
        d.call(h, "ack", job)
    d.call(h, "enqueue", payload(9, 100))


@workload("extend")
def _w_extend(d: Driver) -> None:
    h = d.open()
    d.call(h, "enqueue", payload(1, 100))
    leased = _held(d.call(h, "lease", 1, visibility_timeout=10))
    d.advance(5)
    for job in leased:
        extended = d.call(h, "extend", job, 30)
        d.advance(20)
        d.call(h, "lease", 1)  # nothing: the lease was extended
        if isinstance(extended, Job):
            d.call(h, "ack", extended)


@workload("progress")
def _w_progress(d: Driver) -> None:
    """PROGRESS records and ENQUEUE's "m" (format 1.2): a note kept with a result, with
    a key, across a compaction, and one refused from a stale holder."""
    h = d.open()
    d.call(h, "enqueue", payload(1, 100), meta={"otel": {"traceparent": "00-ab-cd-01"}})
    d.call(h, "enqueue", payload(2, 100), job_id="keyed")
    leased = _held(d.call(h, "lease", 2, visibility_timeout=10))
    for step, job in enumerate(leased):
        d.call(h, "backend.write_notes", job, (0.5, f"step {step}"), {"n": step})
    if leased:
        d.call(h, "ack", leased[0], result={"r": 1})
    d.call(h, "compact")
    for job in leased[1:]:
        d.call(h, "backend.write_notes", job, (1.0, None), {})
        d.call(h, "ack", job)
    d.call(h, "enqueue", payload(3, 100))
    stale = _held(d.call(h, "lease", 1, visibility_timeout=5))
    d.advance(10)
    d.call(h, "lease", 1)  # reclaims the lease: the old holder's note is refused
    for job in stale:
        d.call(h, "backend.write_notes", job, (0.1, "stale"), {})


@workload("compaction")
def _w_compaction(d: Driver) -> None:
    h = d.open()
    d.call(h, "compact")  # first compaction: creates NAME.current
    d.call(h, "enqueue_many", [payload(i, 120) for i in range(3)])
    leased = _held(d.call(h, "lease", 2, visibility_timeout=50))
    d.call(h, "ack", leased[0]) if leased else None
    d.call(h, "compact")  # replaces NAME.current, deletes generation 0's leftovers
    d.call(h, "enqueue", payload(7, 300))
    d.call(h, "compact")
    for job in _held(d.call(h, "lease", 5)):
        d.call(h, "ack", job)


@workload("keyed_compaction")
def _w_keyed(d: Driver) -> None:
    h = d.open()
    d.call(h, "enqueue", payload(1, 80), job_id="k1")
    for job in _held(d.call(h, "lease", 1)):
        d.call(h, "ack", job)
    d.call(h, "compact")
    d.call(h, "enqueue", payload(1, 80), job_id="k1")  # remembered: writes nothing
    d.call(h, "enqueue", payload(2, 80), job_id="k2")
    d.call(h, "compact")


@workload("big_compaction")
def _w_big_compaction(d: Driver) -> None:
    h = d.open()
    d.call(h, "enqueue_many", [payload(i, 200) for i in range(30)])
    leased = _held(d.call(h, "lease", 10))
    d.call(h, "ack_many", leased[:5])
    d.call(h, "compact")
    d.call(h, "enqueue", payload(99, 100))


@workload("two_handles")
def _w_two_handles(d: Driver) -> None:
    a, b = d.open(), d.open()
    d.call(a, "enqueue", payload(1, 100))
    d.call(b, "enqueue", payload(2, 100))
    leased = _held(d.call(b, "lease", 1))
    d.call(a, "compact")
    for job in leased:
        d.call(b, "ack", job)  # b must notice the new generation
    d.call(a, "enqueue", payload(3, 100))
    d.call(b, "compact")
    for job in _held(d.call(a, "lease", 2)):
        d.call(a, "ack", job)


@workload("racing_compactions")
def _w_racing_compactions(d: Driver) -> None:
    # a's compaction writes generation 1, and before its switch b compacts to
    # generation 1 first (one thread, so the compaction lock is b's too: the
    # race the rescue at open can still run). a throws its file and its
    # checkpoint away, retries into generation 2; b and a then follow it.
    a, b = d.open(), d.open()
    d.call(a, "enqueue_many", [payload(i, 150) for i in range(4)])
    leased = _held(d.call(b, "lease", 2))
    d.call(b, "ack", leased[0]) if leased else None
    d.before_next_fsync(lambda: (d.call(b, "compact"), None)[1])
    d.call(a, "compact")
    for job in leased[1:]:
        d.call(b, "ack", job)  # b follows a's generation 2 here
    d.call(a, "enqueue", payload(9, 200))
    for job in _held(d.call(b, "lease", 5)):
        d.call(a, "ack", job)


@workload("writer_dies_midwrite")
def _w_dies_midwrite(d: Driver) -> None:
    a, b = d.open(), d.open()
    d.call(a, "enqueue", payload(1, 100))
    d.crash_next("write", keep=700)
    d.call(a, "enqueue_many", [payload(10 + i, 300) for i in range(4)])  # a dies mid-write
    d.call(b, "enqueue", payload(2, 100))  # b cuts the torn tail, then appends
    for job in _held(d.call(b, "lease", 3)):
        d.call(b, "ack", job)


@workload("writer_dies_before_fsync")
def _w_dies_before_fsync(d: Driver) -> None:
    a, b = d.open(), d.open()
    d.call(a, "enqueue", payload(1, 100))
    d.crash_next("fsync")
    d.call(a, "enqueue", payload(2, 600))  # written, never fsynced by a
    d.call(b, "enqueue", payload(3, 100))  # b reads it, appends, fsyncs both
    for job in _held(d.call(b, "lease", 3)):
        d.call(b, "ack", job)


@workload("fsync_fails")
def _w_fsync_fails(d: Driver) -> None:
    h = d.open()
    d.call(h, "enqueue", payload(1, 100))
    d.fail_next("fsync")
    d.call(h, "enqueue", payload(2, 900))  # StorageError: indeterminate; the handle is poisoned
    d.call(h, "enqueue", payload(3, 100))  # refused: QueueClosedError


@workload("fsync_fails_reopen")
def _w_fsync_fails_reopen(d: Driver) -> None:
    h = d.open()
    d.call(h, "enqueue", payload(1, 100))
    d.fail_next("fsync")
    d.call(h, "enqueue", payload(2, 900))  # StorageError; the pages are clean but not on disk
    d.close(h)
    g = d.open()  # same process, same page cache: reads job 2 back
    d.call(g, "enqueue", payload(3, 100))
    for job in _held(d.call(g, "lease", 3)):
        d.call(g, "ack", job)


@workload("fsync_false")
def _w_fsync_false(d: Driver) -> None:
    h = d.open(fsync=False)
    d.call(h, "enqueue_many", [payload(i, 90) for i in range(4)])
    for job in _held(d.call(h, "lease", 2)):
        d.call(h, "ack", job)
    d.call(h, "compact")
    d.call(h, "enqueue", payload(9, 400))


@workload("group_commit")
def _w_group_commit(d: Driver) -> None:
    a, b = d.open(), d.open()
    d.call(a, "enqueue", payload(1, 100))
    # a writes its batch and releases the lock; before its fsync starts, b writes,
    # fsyncs and returns (its fsync covers a's batch too); then a's fsync runs.
    d.before_next_fsync(lambda: d.call(b, "enqueue_many", [payload(10 + i, 300)
                                                            for i in range(3)]))
    d.call(a, "enqueue", payload(2, 700))
    d.before_next_fsync(lambda: (d.call(b, "lease", 2), None)[1])
    d.call(a, "enqueue", payload(3, 500))
    for job in _held(d.call(a, "lease", 5)):
        d.call(b, "ack", job)


@workload("checkpoints")
def _w_checkpoints(d: Driver) -> None:
    # Checkpoints at every close and every 1 KiB logged, instead of after MiBs.
    often = {"checkpoint_after_bytes": 0, "checkpoint_every_bytes": 1024}
    h = d.open(**often)
    d.call(h, "enqueue_many", [payload(i, 200) for i in range(3)])
    d.close(h)  # writes NAME.000000.ckpt
    g = d.open(**often)  # loads it
    for job in _held(d.call(g, "lease", 1)):
        d.call(g, "ack", job)
    d.call(g, "enqueue_many", [payload(10 + i, 400) for i in range(3)])  # auto checkpoint
    d.call(g, "compact")  # the new generation's checkpoint
    d.close(g)
    k = d.open(fsync=False, **often)  # an un-synced log above a checkpoint
    d.call(k, "enqueue", payload(30, 300))
    d.close(k)
    d.call(d.open(**often), "stats")


@workload("checkpoint_after_switch")
def _w_checkpoint_after_switch(d: Driver) -> None:
    # a compacts; its checkpoints in the new generation (in the background, then at
    # close) go beside the switch's, which b, still on generation 0, follows by.
    often = {"checkpoint_after_bytes": 0, "checkpoint_every_bytes": 1024}
    a, b = d.open(**often), d.open(**often)
    d.call(a, "enqueue_many", [payload(i, 200) for i in range(3)])
    d.call(b, "stats")
    d.call(a, "compact")
    d.call(a, "enqueue_many", [payload(10 + i, 400) for i in range(3)])  # auto checkpoint
    d.close(a)  # and the one at close
    for job in _held(d.call(b, "lease", 1)):  # b follows the switch here
        d.call(b, "ack", job)
    d.close(b)
    d.call(d.open(**often), "stats")


@workload("results_compaction")
def _w_results(d: Driver) -> None:
    # Results kept with finished jobs (ACK with "r"), across a compaction (FINISHED
    # records) and until their retention runs out (FORGET); a keyed job's result gone
    # before its id ("rkeep", 1.2).
    h = d.open(result_ttl=100.0, key_retention=300.0)
    d.call(h, "enqueue", payload(8, 100), job_id="key-1", priority=5)
    for job in _held(d.call(h, "lease", 1)):
        d.call(h, "ack", job, result={"brief": True})
    d.call(h, "enqueue_many", [payload(i, 150) for i in range(3)])
    leased = _held(d.call(h, "lease", 1))
    for job in leased:
        d.call(h, "ack", job, result={"sum": 3, "pad": "r" * 300})
    for job in _held(d.call(h, "lease", 1)):
        nxt = d.call(h, "ack_and_lease", job, result=None)
        if isinstance(nxt, Job):
            d.call(h, "ack", nxt, result=[1, 2], result_ttl=500.0)
    d.call(h, "compact")
    d.advance(200)  # the first two results' retention ends: the next write forgets them
    d.call(h, "enqueue", payload(9, 100))
    d.call(h, "compact")
    if leased:
        d.call(h, "get", leased[0].id)


@workload("cancel_pause")
def _w_cancel_pause(d: Driver) -> None:
    # CANCEL of a pending and of a leased job (the holder's ack is then refused),
    # PAUSE/RESUME across a compaction, DELETE of dead jobs.
    a, b = d.open(max_attempts=1), d.open(max_attempts=1)
    jobs = d.call(a, "enqueue_many", [payload(i, 200) for i in range(4)])
    held = _held(d.call(b, "lease", 2))
    if isinstance(jobs, list) and len(jobs) == 4:
        d.call(a, "cancel", jobs[3].id)
    if held:
        d.call(a, "cancel", held[0].id)
        d.call(b, "ack", held[0], result="late")  # NotLeasedError: writes nothing
    d.call(a, "pause")
    d.call(b, "enqueue", payload(7, 300))
    d.call(b, "lease", 1)  # paused: nothing
    d.call(a, "compact")
    d.call(b, "resume")
    for job in held[1:] + _held(d.call(b, "lease", 1)):
        d.call(b, "nack", job, error="boom")  # dead on its only attempt
    d.call(a, "delete_dead")
    d.call(a, "compact")


@workload("dependencies")
def _w_dependencies(d: Driver) -> None:
    # A chord's shape: c waits for a and b, whose acks come from two handles; its
    # release is in the batch of the second ack. A dying step cancels its dependent
    # (and that one's) in the NACK's batch; allow_failure releases instead. A
    # compaction keeps a waiting job and what it waits for.
    a, b = d.open(max_attempts=1), d.open(max_attempts=1)
    jobs = d.call(a, "enqueue_many", [payload(i, 200) for i in range(3)])
    if not (isinstance(jobs, list) and len(jobs) == 3):
        return
    first, second, doomed = jobs
    chord = d.call(a, "enqueue", payload(10, 300), depends_on=[first.id, second.id])
    d.call(b, "enqueue", payload(11, 100), depends_on=[doomed.id])
    d.call(b, "enqueue", payload(12, 100), depends_on=[doomed.id], allow_failure=True)
    if isinstance(chord, Job):
        d.call(a, "enqueue", payload(13, 100), depends_on=[chord.id])
    held_a, held_b = _held(d.call(a, "lease", 1)), _held(d.call(b, "lease", 2))
    d.call(a, "compact")
    for job in held_a:
        d.call(a, "ack", job)
    for job in held_b:
        if job.id == doomed.id:
            d.call(b, "nack", job, error="boom")  # dead on its only attempt
        else:
            d.call(b, "ack", job, result=1)
    d.call(b, "compact")


@workload("workflows")
def _w_workflows(d: Driver) -> None:
    # One enqueue_graph (one batch): a chord (members 0 and 1, callback 2) with an
    # on_error handler (3, mode "failure" over all three), and a chain whose first
    # step dies (4): its next step (5) is cancelled and its handler (6) released in
    # the NACK's batch. The chord's last two members are acked by two handles at
    # once: b's ack is written while a's batch waits for its fsync (group commit),
    # so exactly one of the two batches holds the callback's RELEASE. The
    # callback's ack cancels handler 3 (nothing died) in its own batch.
    a, b = d.open(max_attempts=1), d.open(max_attempts=1)
    jobs = d.call(a, "enqueue_graph", [
        GraphNode(payload(0, 200)), GraphNode(payload(1, 200)),
        GraphNode(payload(2, 300), (0, 1)), GraphNode(payload(3, 100), (0, 1, 2), "failure"),
        GraphNode(payload(4, 200)), GraphNode(payload(5, 200), (4,)),
        GraphNode(payload(6, 100), (4, 5), "failure")])
    if not (isinstance(jobs, list) and len(jobs) == 7):
        return
    held = {job.id: job for job in _held(d.call(a, "lease", 3))}
    first, second, step = (held.get(jobs[i].id) for i in (0, 1, 4))
    if first is not None and second is not None:
        d.before_next_fsync(lambda: d.call(b, "ack", second, result=1))
        d.call(a, "ack", first, result=0)
    d.call(a, "compact")
    if step is not None:
        d.call(b, "nack", step, error="boom")  # dead on its only attempt
    for job in _held(d.call(b, "lease", 2)):  # the callback and handler 6
        d.call(a, "ack", job, result=2)
    d.call(b, "compact")


@workload("revive")
def _w_revive(d: Driver) -> None:
    # A chain whose first step (0) dies: its next steps (1, 2) are cancelled, revivable
    # (CANCELs with their payloads), in the NACK's batch. A compaction keeps them
    # (FINISHED with w/wf and the payload); the other handle's requeue revives both
    # (REQUEUE, then two REVIVEs, one batch); a compaction keeps them waiting (JOB,
    # the payload read from a FINISHED record); then the chain runs in order.
    a, b = d.open(max_attempts=1), d.open(max_attempts=1)
    jobs = d.call(a, "enqueue_graph", [GraphNode(payload(0, 200)),
                                       GraphNode(payload(1, 300), (0,)),
                                       GraphNode(payload(2, 100), (1,))])
    if not (isinstance(jobs, list) and len(jobs) == 3):
        return
    for job in _held(d.call(a, "lease", 1)):
        d.call(a, "nack", job, error="boom")  # dead on its only attempt
    d.call(a, "compact")
    d.call(b, "requeue_dead", jobs[0].id)
    d.call(b, "compact")
    for _ in range(3):
        for job in _held(d.call(b, "lease", 1)):
            d.call(a, "ack", job, result=1)


@workload("limits")
def _w_limits(d: Driver) -> None:
    # A rate-limited task and a concurrency key, declared alike by two handles: the
    # keyed ENQUEUEs, the LIMIT records before the leases, and the windows and holders
    # replay rebuilds from them, across a crash and through a compaction's snapshot.
    declared = Limits()
    declared.declare_task("rated", rate_limit=(2, 60.0))
    declared.declare_task("held", concurrency=1, concurrency_key=lambda n: f"c{n % 2}")
    a, b = d.open(limits=declared), d.open(limits=declared)
    d.call(a, "enqueue_many", [{"task": "rated", "args": [i], "kwargs": {}} for i in range(4)])
    for n in (1, 3, 2):
        d.call(b, "enqueue", {"task": "held", "args": [n], "kwargs": {}})
    held_a = _held(d.call(a, "lease", 4))  # two rated, one of each concurrency key
    d.call(b, "lease", 4)  # nothing: the window is full, both keys held
    d.call(a, "compact")
    for job in held_a:
        d.call(a, "ack", job)
    d.call(b, "lease", 4)  # the freed key's next job
