"""Generated workloads: seeded random mixes and ACE-style call sequences.

Part of the crash-state explorer; the theory is in harness/explorer/__init__.py.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Sequence

from nobroker import Job
from nobroker.dependencies import GraphNode

from .driver import Driver, Workload
from .workloads import WORKLOADS, _held, payload


def random_workload(seed: int, length: int = 50, handles: int = 2) -> Workload:
    """A seeded random mix of exactly `length` calls over `handles` handles.

    Enqueues (single, batched, keyed), leases, acks, nacks (max_attempts=2, so
    jobs reach the DLQ), extends, clock jumps (the next call then reclaims
    expired leases), compactions, requeue_dead, purge and reads.
    """

    def run(d: Driver) -> None:
        rng = random.Random(seed)
        hs = [d.open(max_attempts=2) for _ in range(handles)]
        held: list[Job] = []
        for _ in range(length):
            h = rng.choice(hs)
            roll = rng.random()
            if roll > 0.56 and roll < 0.74 and not held:
                roll = 0.4  # nothing held to settle: lease instead
            if roll < 0.20:
                d.call(h, "enqueue", payload(rng.randrange(1000), rng.choice((40, 200, 700))),
                       priority=rng.randrange(3))
            elif roll < 0.28:
                d.call(h, "enqueue_many", [payload(i, rng.randrange(30, 400))
                                           for i in range(rng.randrange(2, 8))])
            elif roll < 0.31:
                d.call(h, "enqueue", payload(1, 60), job_id=f"key{rng.randrange(4)}")
            elif roll < 0.47:
                if rng.random() < 0.3:
                    d.advance(rng.choice((10, 40)))  # leases run out: this call reclaims
                held += _held(d.call(h, "lease", rng.randrange(1, 3),
                                     visibility_timeout=rng.choice((5, 30))))
            elif roll < 0.56:
                d.call(h, "ack", held.pop(rng.randrange(len(held)))) if held else \
                    d.call(h, "stats")
            elif roll < 0.66:
                d.call(h, "nack", held.pop(rng.randrange(len(held))), error="e",
                       delay=rng.choice((0, 3)))
            elif roll < 0.70:
                index = rng.randrange(len(held))
                got = d.call(h, "extend", held[index], 20)
                if isinstance(got, Job):
                    held[index] = got
            elif roll < 0.74:
                d.call(h, "ack_many", held[:2])
                del held[:2]
            elif roll < 0.82:
                d.call(h, "compact")
            elif roll < 0.89:
                d.call(h, "requeue_dead")
            elif roll < 0.94:
                d.call(h, "purge")
            else:
                d.call(h, "stats")

    run.__name__ = f"random{seed}x{length}"
    return run


WORKLOADS["mixed50"] = random_workload(34, 50)
WORKLOADS["mixed50"].__name__ = "mixed50"

def _ace_expire(d: Driver, h: int) -> None:
    d.advance(15)  # past every lease's deadline: this lease call reclaims them
    d.call(h, "lease", 2)


_ACE_OPS: dict[str, Callable[[Driver, int, list[Job]], None]] = {
    "enqueue": lambda d, h, held: d.call(h, "enqueue", payload(5, 300)),
    "enqueue_many": lambda d, h, held: d.call(h, "enqueue_many",
                                              [payload(i, 250) for i in range(3)]),
    "lease": lambda d, h, held: held.extend(_held(d.call(h, "lease", 1,
                                                         visibility_timeout=10))),
    "ack": lambda d, h, held: d.call(h, "ack", held.pop()) if held else None,
    "nack": lambda d, h, held: d.call(h, "nack", held.pop(), delay=0) if held else None,
    "nack_dead": lambda d, h, held: d.call(h, "nack", held.pop(), error="rejected",
                                           dead=True) if held else None,  # NACK with dl
    "snooze": lambda d, h, held: d.call(h, "snooze", held.pop(), 0) if held else None,
    "depend": lambda d, h, held: d.call(h, "enqueue", payload(6, 200),
                                        depends_on=[held[-1].id]) if held else None,
    "graph": lambda d, h, held: d.call(h, "enqueue_graph", [
        GraphNode(payload(7, 200)), GraphNode(payload(8, 200), (0,)),
        GraphNode(payload(9, 100), (0, *([held[-1].id] if held else [])), "failure")]),
    "extend": lambda d, h, held: d.call(h, "extend", held[-1], 30) if held else None,
    "progress": lambda d, h, held: d.call(h, "backend.write_notes", held[-1], (0.5, "half"),
                                          {"step": 1}) if held else None,
    "expire": lambda d, h, held: _ace_expire(d, h),
    "compact": lambda d, h, held: d.call(h, "compact"),
    "requeue_dead": lambda d, h, held: d.call(h, "requeue_dead"),
    "purge": lambda d, h, held: d.call(h, "purge"),
    "ack_result": lambda d, h, held: d.call(h, "ack", held.pop(), result={"r": 1})
    if held else None,
    "cancel": lambda d, h, held: d.call(h, "cancel", held[-1].id) if held else None,
    "pause": lambda d, h, held: d.call(h, "pause"),
}


def ace_workloads(length: int = 2, ops: Sequence[str] | None = None,
                  seeded: bool = True) -> dict[str, Workload]:
    """Every sequence of up to `length` ops on two handles, from a small seeded queue (ACE)."""
    names = list(ops or _ACE_OPS)
    out: dict[str, Workload] = {}

    def make(sequence: tuple[tuple[str, int], ...]) -> Workload:
        def run(d: Driver) -> None:
            hs = [d.open(max_attempts=1), d.open(max_attempts=1)]
            held: list[Job] = []
            if seeded:  # one pending, one leased, one dead job to act on
                d.call(hs[0], "enqueue_many", [payload(i, 120) for i in range(3)])
                held += _held(d.call(hs[0], "lease", 1, visibility_timeout=10))
                for job in _held(d.call(hs[0], "lease", 1, visibility_timeout=10)):
                    d.call(hs[0], "nack", job, delay=0)
            for op, h in sequence:
                _ACE_OPS[op](d, hs[h], held)
        return run

    def sequences(n: int) -> Iterator[tuple[tuple[str, int], ...]]:
        if n == 0:
            yield ()
            return
        for rest in sequences(n - 1):
            for op in names:
                for h in (0, 1):
                    yield (*rest, (op, h))

    for n in range(1, length + 1):
        for sequence in sequences(n):
            if any(h == 1 for _, h in sequence[:1]):
                continue  # by symmetry the first op runs on handle 0
            key = "ace:" + "+".join(f"{op}@{h}" for op, h in sequence)
            fn = make(sequence)
            fn.__name__ = key
            out[key] = fn
    return out
