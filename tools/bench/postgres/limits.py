"""The limits' row on PostgreSQL: a limited, unsaturated ack_and_lease against an
unlimited one, as tools/bench/limits.py measures it on files (issue 24: <= 1.1x).

    python make.py bench-postgres-limits [--ops N] [--rounds R] [--kind KIND] [--rate C/S]
                                         [--server-cpu]
    python make.py bench-postgres-limits --full-keys K [--rate-full] [--rounds R]

make.py starts a throwaway server (tools/postgres/cluster.py) and runs this in
.dev/pg-venv. Each side runs `job = q.ack_and_lease(job)` N times a round on a
queue of its own (a fresh schema each), interleaved over R rounds; a limited
side's jobs call a task declared with limits high enough never to hold one
back: a concurrency key only (`concurrency`), a rate limit only (`rate`), or
both (`both`); by default all three, each against the same unlimited side,
all interleaved. Its rate limit is 100,000 a second, so the window's ring
grows through a run (a start is an INSERT); `--rate 200/0.0001` declares one
whose ring of 200 slots wraps every 200 starts (an UPDATE), never full either.
Prints one line a kind, `KIND: limited ... us, unlimited ... us per
ack_and_lease: R.RRx (target <= 1.1x)`, the medians and their ratio; with
--server-cpu a second, the server's CPU time per ack_and_lease (every
`postgres` process's, read from /proc before and after each side's round:
steadier than the wall clock on a shared machine, which other programs slow;
its tick is 10 ms, so give rounds of --ops 2000 or more).
With --full-keys K, instead: the median time of a limited lease of one job beside
K concurrency keys each at its cap (1) with a job pending (issue 24's many-keys
case: the walk parks them, as the file backend does), and of an idle worker's
look for its next due time (`q.wait(0)`) beside them; with --rate-full, beside
K keys with room whose task's rate window is full (a task limited by rate and
per customer: the walk steps past all of its pairs at once).
For an A/B against other code, run it directly with `--src OTHER/src` (its
nobroker, imported first; PYTHONPATH cannot: importing `tools` puts this
checkout's src/ first) and NOBROKER_TEST_POSTGRES_URL set, from this checkout:

    python -m tools.bench.postgres.limits --src /path/to/main/src
"""

from __future__ import annotations

import argparse
import os
import sys
import uuid
from statistics import median
from typing import Any

from tools.bench.common import proc_cpu_seconds
from tools.bench.limits import _interleaved_loops, _noop

KINDS = ("concurrency", "rate", "both")  # what a limited side's task declares


def _declare(q: Any, kind: str, rate: tuple[int, float]) -> None:
    """Declare task "limited" on `q` with the limits of `kind`, never reached."""
    limits: dict[str, Any] = {}
    if kind in ("concurrency", "both"):
        limits.update(concurrency=100_000, concurrency_key="shared")
    if kind in ("rate", "both"):
        limits.update(rate_limit=rate)
    q.task(name="limited", **limits)(_noop)


def server_cpu() -> float:
    """CPU seconds (user + system) of every process named postgres on this machine:
    the throwaway server's backends and background writers, measured in CPU time,
    which the other programs of a shared machine do not add to as they add to the
    wall clock (the server must run here: make.py's does)."""
    total = 0.0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as f:
                if f.read().startswith("postgres"):
                    total += proc_cpu_seconds(int(pid))
        except OSError:  # gone meanwhile
            continue
    return total


def measure(url: str, ops: int, rounds: int, kinds: tuple[str, ...] = KINDS,
            rate: tuple[int, float] = (100_000, 1.0), cpu: bool = False
            ) -> dict[str, dict[str, float]]:
    """For each of `kinds`: the median seconds per `ops` round trips of its side and
    of the unlimited side (one, interleaved with every kind's), and their ratio; with
    `cpu`, the same of the server's CPU seconds (`server_cpu`) too."""
    import nobroker as nb

    need = rounds * ops + 50
    queues: dict[str, Any] = {}
    for label in ("unlimited", *kinds):
        joiner = "&" if "?" in url else "?"
        q = nb.Queue(f"{url}{joiner}schema=bench_{uuid.uuid4().hex[:10]}", "limits")
        if label != "unlimited":
            _declare(q, label, rate)
        q.enqueue_many([{"task": "plain" if label == "unlimited" else "limited", "args": [i],
                         "kwargs": {}} for i in range(need)])
        queues[label] = q
    spent: dict[str, list[float]] = {}
    res = _interleaved_loops(queues, ops, rounds, server_cpu if cpu else None, spent)
    plain_t = median(res["unlimited"])
    got = {kind: {"limited": median(res[kind]), "unlimited": plain_t,
                  "ratio": median(res[kind]) / plain_t} for kind in kinds}
    if cpu:
        plain_cpu = median(spent["unlimited"])
        for kind in kinds:
            got[kind].update(limited_cpu=median(spent[kind]), unlimited_cpu=plain_cpu,
                             cpu_ratio=median(spent[kind]) / plain_cpu)
    return got


def beside_full_keys(url: str, keys: int, rounds: int, rate_full: bool = False
                     ) -> tuple[float, float]:
    """Median seconds of a limited lease of one free job (acked after, untimed)
    beside `keys` full concurrency keys, each with a job pending (or, `rate_full`,
    beside `keys` concurrency keys with room whose task's rate window is full);
    then of an idle wait's look (`q.wait(0)`: nothing leasable) beside them."""
    import time

    import nobroker as nb

    joiner = "&" if "?" in url else "?"
    q = nb.Queue(f"{url}{joiner}schema=bench_{uuid.uuid4().hex[:10]}", "limits",
                 visibility_timeout=3600)
    rate = {"rate_limit": (1, 3600.0)} if rate_full else {}
    q.task(name="per", concurrency=1, concurrency_key=lambda who: who, **rate)(_noop)
    q.enqueue_many([{"task": "per", "args": [n], "kwargs": {}}
                    for n in range(keys) for _ in range(2)])
    while q.lease(1000):  # one holder a key, each full, a job of each pending (with
        pass              # rate_full, one holder in all: the window full, the keys not)
    q.enqueue_many([{"task": "plain", "args": [n], "kwargs": {}} for n in range(rounds)])
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        (job,) = q.lease(1)
        times.append(time.perf_counter() - start)
        q.ack(job)
    waits = []
    for _ in range(rounds):
        start = time.perf_counter()
        if q.wait(0):
            raise RuntimeError("a job was leasable beside the full keys")
        waits.append(time.perf_counter() - start)
    return median(times), median(waits)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ops", type=int, default=500, help="round trips per round (500)")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds (5)")
    p.add_argument("--kind", choices=(*KINDS, "all"), default="all",
                   help="what the limited task declares (all: each, one line a kind)")
    p.add_argument("--rate", default="100000/1",
                   help="a limited task's rate limit, COUNT/SECONDS (100000/1: never full)")
    p.add_argument("--full-keys", type=int, default=0,
                   help="time a lease beside this many full concurrency keys instead")
    p.add_argument("--rate-full", action="store_true",
                   help="with --full-keys: the keys have room, their rate window is full")
    p.add_argument("--server-cpu", action="store_true",
                   help="also the server's CPU time per ack_and_lease (a local server)")
    p.add_argument("--url", default=os.environ.get("NOBROKER_TEST_POSTGRES_URL"))
    p.add_argument("--src", help="import nobroker from this src/ (an A/B run)")
    args = p.parse_args(argv)
    if args.src:
        if any(m == "nobroker" or m.startswith("nobroker.") for m in sys.modules):
            p.error("nobroker was imported before --src could apply")
        sys.path.insert(0, os.path.abspath(args.src))
    if not args.url:
        p.error("no --url and no NOBROKER_TEST_POSTGRES_URL (run it with make.py)")
    if args.rate_full and not args.full_keys:
        p.error("--rate-full needs --full-keys")
    if args.full_keys:
        took, waited = beside_full_keys(args.url, args.full_keys, args.rounds, args.rate_full)
        beside = ("concurrency keys of a full rate key" if args.rate_full
                  else "full concurrency keys")
        print(f"a limited lease beside {args.full_keys} {beside}: "
              f"{took * 1e3:.1f} ms (median of {args.rounds})")
        print(f"an idle wait's look beside them (q.wait(0)): {waited * 1e3:.1f} ms "
              f"(median of {args.rounds})")
        return 0
    kinds = KINDS if args.kind == "all" else (args.kind,)
    count, _, period = args.rate.partition("/")
    rate = (int(count), float(period or 1.0))
    for kind, got in measure(args.url, args.ops, args.rounds, kinds, rate,
                             args.server_cpu).items():
        print(f"{kind}: limited {got['limited'] / args.ops * 1e6:.0f} us, unlimited "
              f"{got['unlimited'] / args.ops * 1e6:.0f} us per ack_and_lease: "
              f"{got['ratio']:.2f}x (target <= 1.1x)")
        if args.server_cpu:
            print(f"{kind}: server CPU limited {got['limited_cpu'] / args.ops * 1e6:.0f} us, "
                  f"unlimited {got['unlimited_cpu'] / args.ops * 1e6:.0f} us per "
                  f"ack_and_lease: {got['cpu_ratio']:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
