"""The fuzzers' corpus: real queues' files (build_corpus) and their frames.

The theory is in tests/file/test_fuzz.py.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from typing import Any

from harness.support import FakeClock
from nobroker import BackoffPolicy, Queue
from nobroker.dependencies import GraphNode
from nobroker.file.log.framing import (
    FILE_HEADER,
    MAX_RECORD,
    MORE,
    RECORD,
    decode_record,
    encode_record,
)

NAME = "default"
LOG0, LOG1 = f"{NAME}.000000.log", f"{NAME}.000001.log"
# The compacted seed's checkpoint is the one its compaction published at the switch.
CURRENT, CKPT1 = f"{NAME}.current", f"{NAME}.000001.switch.ckpt"
IGNORED = (f"{NAME}.lock", f"{NAME}.wake", f"{NAME}.sync")  # created by any open; not data
CASE_SECONDS = 10  # a case that takes longer is a hang
MEMORY_SAMPLE = 17  # every 17th case runs under tracemalloc
MEMORY_LIMIT = MAX_RECORD + (1 << 20)  # one record read at the size limit, plus change

# (seed, case) pairs that once failed. Replayed on every run, forever.
REGRESSIONS: list[tuple[int, int]] = [
    (2, 3166),  # JOB record with attempts 10**30: compaction raised OverflowError
    (2, 10312),  # forged CRC-valid checkpoint without "jobs": KeyError from Queue()
    (2, 16589),  # forged checkpoint with state code 255: IndexError from Queue()
    (2, 18971),  # forged checkpoint without "next_token": KeyError from Queue()
    (3, 12896),  # forged checkpoint with a job at offset < 0: raw OSError reading it
    (3, 33528),  # JOB record whose state "s" is {}: TypeError (unhashable) from replay
    (3, 33605),  # JOB record whose state "s" is [1]: the same
    (10007, 0),  # ENQUEUE with "at" 10**30 (an int): accepted by the fast replay path,
    (10007, 1300),  # ... then a checkpoint gave it back as a float: another state
    (10007, 2788),  # "until" 2**53 + 1: int in replay, float from a checkpoint
    (750974, 7700),  # KEY record twice in a snapshot: two FORGETs planned for one key,
    (750974, 20514),  # ... the second failed to apply: a raw ReplayError from enqueue
]


# --------------------------------------------------------------------------
# the corpus: real files from real workloads


Files = dict[str, bytes]


@dataclass
class Corpus:
    seeds: dict[str, Files]

    def logs(self) -> list[bytes]:
        return [files[name] for files in self.seeds.values()
                for name in (LOG0, LOG1) if name in files]


def _trim(data: bytes) -> bytes:
    """A log without its preallocated zero tail (most mutations aim at real bytes)."""
    return data.rstrip(b"\0") if len(data) > FILE_HEADER.size else data


def _workload(q: Queue, clock: FakeClock, flavour: int) -> None:
    q.enqueue({"n": 1, "text": "hello"}, priority=flavour)
    q.enqueue({"n": 2, "nested": {"a": [1, 2, {"b": None}]}}, job_id=f"key-{flavour}")
    q.enqueue_many([{"n": 3}, {"n": 4, "s": "\u00e9\ud800"}, {"n": 5}])
    q.enqueue("delayed", delay=50.0)
    doomed = q.enqueue({"n": 6}, max_attempts=1)
    jobs = q.lease(3)
    clock.advance(1)
    q.ack(jobs[0])
    q.nack(jobs[1], error="boom", delay=0.0)
    q.extend(jobs[2], 60.0)
    clock.advance(100)  # expire what is left, make the delayed job ready
    for job in q.lease(10):
        if job.id == doomed.id:
            q.nack(job, error="dead")
        else:
            q.ack(job)
    q.requeue_dead()
    q.enqueue({"n": 7, "last": True})
    if flavour:
        q.lease(1)
    if flavour == 2:  # kept results and cancels, a deleted dead job, a pause: compacted next
        q.enqueue_many([{"n": 8}, {"n": 9}])
        for index, job in enumerate(q.lease(2)):
            q.ack(job, result={"index": index, "text": "d\u00e9j\u00e0"} if index else None)
        q.cancel(q.list_jobs("pending")[0].id)
        for job in q.lease(1):
            q.cancel(job.id)
        doomed = q.enqueue({"n": 11}, max_attempts=3, priority=100)
        for job in q.lease(1):
            q.nack(job, error="dead too", dead=True)  # a NACK with dl: attempts left
        q.delete_dead(doomed.id)
        chain = q.enqueue({"n": 12}, max_attempts=1, priority=400)
        q.enqueue({"n": 13}, depends_on=chain)  # its death cancels it, revivable
        for job in q.lease(1):
            q.nack(job, error="dead")  # a CANCEL with "p"; compacted: FINISHED with "wf"
        # PROGRESS records (format 1.2): notes the snapshot then carries in a FINISHED
        # record (kept with a result) and a JOB record (still leased).
        noted = q.enqueue_many([{"n": 12}, {"n": 13}], priority=100)
        q.enqueue({"n": 14}, meta={"otel": {"traceparent": "00-ab-cd-01"}})  # ENQUEUE's "m"
        for job in q.lease(2):
            q.backend.write_notes(job, (0.5, "half \u00e9"), {"step": [1, {"a": None}]})
            if job.id == noted[0].id:
                q.ack(job, result="noted")
        q.pause()


def _job_control(q: Queue) -> None:
    """CANCEL, DELETE, PAUSE/RESUME, SNOOZE, an ACK with a result and dependencies (a
    waiting ENQUEUE, a RELEASE, a CANCEL with err, a graph with an on_error node and
    its RELEASE by a death, a REVIVE), in a generation's own log."""
    jobs = q.enqueue_many([{"n": 20}, {"n": 21}, {"n": 22}], max_attempts=1, priority=200)
    q.enqueue({"n": 23}, depends_on=jobs[1])  # released by second's ack
    q.enqueue({"n": 24}, depends_on=jobs[0], priority=300)  # cancelled with first
    q.enqueue({"n": 25}, depends_on=[jobs[2]], allow_failure=True)  # stays waiting
    # A graph (one batch): third's on_error handler ("of"), released when third dies
    # below, and a node waiting for that handler.
    q.enqueue_graph([GraphNode({"n": 26}, (jobs[2].id,), "failure"), GraphNode({"n": 27}, (0,))])
    first, second = q.lease(2)
    q.snooze(first, 0.0, error="later")  # its only attempt, given back untried
    (first,) = q.lease(1)
    q.cancel(first.id)
    q.ack(second, result={"ok": [1, 2]}, result_ttl=3600.0)
    for job in q.lease(1):
        q.nack(job, error="dead")
        q.delete_dead(job.id)
    q.requeue_dead()  # REQUEUEs and, for the chain cancelled above, a REVIVE
    q.pause()
    q.resume()


def _limits(q: Queue, clock: FakeClock) -> None:
    """Rate and concurrency limits (format 1.2): ENQUEUEs with "rk"/"ck", LIMIT records
    before the leases, and, compacted, a snapshot's JOBs with their keys and its LIMIT
    records with their starts."""
    q.task(name="rated", rate_limit=(2, 60.0))(lambda n: n)
    q.task(name="held", concurrency=1, concurrency_key=lambda n: f"c{n % 2}")(lambda n: n)
    q.enqueue_many([{"task": "rated", "args": [n], "kwargs": {}} for n in range(3)])
    for n in range(3):
        q.enqueue({"task": "held", "args": [n], "kwargs": {}})
    held = q.lease(5)
    clock.advance(1)
    q.ack(held[0])
    q.compact()
    q.lease(2)


def _brief_result(q: Queue) -> None:
    """An ACK with "rkeep" (1.2): a keyed job whose id outlives its result. Last, so
    that the records before it (which REGRESSIONS' cases damage) stay where they were."""
    q.enqueue({"n": 20}, job_id="key-result", priority=1000)
    for job in q.lease(1):
        q.ack(job, result="brief", result_ttl=5.0)


def build_corpus(root: str, seed: int = 0) -> Corpus:
    """Real queue files from three workloads (deterministic for a given seed)."""
    seeds: dict[str, Files] = {}
    options: dict[str, Any] = {"visibility_timeout": 30.0, "auto_compact": None,
                               "backoff": BackoffPolicy(base=1.0, jitter=0.0)}
    for label, flavour, compacted in (("gen0", 0, False), ("other", 1, False),
                                      ("compacted", 2, True)):
        directory = os.path.join(root, label)
        clock = FakeClock(1_000_000.0 + flavour * 1000)
        # Job ids and jitter come from the queue's rng: seeded, the files are the same.
        with Queue(directory, clock=clock, rng=random.Random(seed * 100 + flavour),
                   **options) as q:
            _workload(q, clock, flavour)
            if flavour == 1:
                _limits(q, clock)
            if compacted:
                q.compact()
                q.enqueue({"after": "compaction"})
                q.resume()
                q.lease(1)
                _job_control(q)
                _brief_result(q)
        files: Files = {}
        for entry in sorted(os.listdir(directory)):
            if entry in IGNORED or ".torn-" in entry:
                continue
            with open(os.path.join(directory, entry), "rb") as handle:
                data = handle.read()
            files[entry] = _trim(data) if entry.endswith(".log") else data
        seeds[label] = files
    return Corpus(seeds)


# --------------------------------------------------------------------------
# frames


@dataclass
class Frame:
    offset: int
    size: int  # header + payload
    type_byte: int
    payload: bytes


def frames(data: bytes) -> list[Frame]:
    found = []
    pos = FILE_HEADER.size
    while True:
        outcome, type_byte, payload, nxt = decode_record(data, pos)
        if outcome != RECORD:
            return found
        found.append(Frame(pos, nxt - pos, type_byte, payload))
        pos = nxt


def boundaries(data: bytes) -> list[int]:
    found = frames(data)
    return [FILE_HEADER.size] + [f.offset + f.size for f in found]


def reframe(type_byte: int, payload: bytes) -> bytes:
    """A frame with a correct CRC for any type byte (MORE bit included)."""
    return encode_record(type_byte & 0x7F, payload, more=bool(type_byte & MORE))
