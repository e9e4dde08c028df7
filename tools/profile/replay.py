"""What reading another process's batches costs a handle: peer replay, A/B.

A writer drains N jobs the way a prefetching worker does (ack_many_and_lease of
K jobs a call, one batch each), into one log, its calls taken in turns by
`--writers` handles (two: what a reader beside two busy peers finds); then each
source tree named (default: this checkout's src/ against /work/main's, or any
`--src` paths) times, in its own interpreter and in turns, the read-forward of
exactly those batches (what refresh does: the scan into QueueState.apply_batch,
or following.read_forward in a tree that has one, as branch peerskip-pairs),
from a state replayed up to where the writer began. By default one read holds
them all; `--reads R` reads R batches at a time, as a handle meets them between
its own calls (profile-worker's runs find mostly one, some two or three).
Thread CPU, best of `--rounds`, per job (one LEASE and one ACK record each):

    python -m tools.profile.replay --batch 1 --batch 16
    python -m tools.profile.replay --batch 16 --reads 1 --reads 3 --writers 2
    python -m tools.profile.replay --src /work/main/src --src src --jobs 4000
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile

from tools.bench.common import REPO

# Runs under the source tree timed (PYTHONPATH): argv = directory, mark, rounds, jobs,
# batches per read (0: all in one).
_TIMER = """
import copy, functools, sys, time
from nobroker.file.disk.fs import FileSystem
from nobroker.file.log.logfile import LogFile
from nobroker.file.state.state import QueueState
try:  # what following.refresh reads with
    from nobroker.file.following import read_forward
except ImportError:  # a tree before it: the scan straight into apply_batch
    def read_forward(log, state):
        return log.scan(state.apply_batch, state.last_batch, full=False)
directory, mark, rounds, jobs, reads = sys.argv[1], *map(int, sys.argv[2:6])
log = LogFile.open(FileSystem(), directory, "default", 0, readonly=True)
state = QueueState()
log.scan(state.apply_batch, 0, limit=mark)
start, crc = log.end, log.crc
ends = []  # where each batch after the mark ends: reads stop at every `reads`th
log.scan(lambda batch: ends.append(batch[-1][2] + batch[-1][3]), state.last_batch, full=False)
limits = [*ends[reads - 1::reads], None] if reads else [None]
best = float("inf")
for _ in range(rounds):
    fresh = copy.deepcopy(state)
    log.end, log.crc = start, crc
    began = time.thread_time()
    for limit in limits:
        log.scan = functools.partial(LogFile.scan, log, limit=limit)
        read_forward(log, fresh)
    best = min(best, time.thread_time() - began)
    del log.scan
print(best / jobs * 1e6)
"""


def build(directory: str, batch: int, jobs: int, writers: int = 1) -> tuple[int, int]:
    """Fill a queue in `directory`, drained by `writers` handles in turns; returns the
    log offset where the drain begins, and how many jobs its calls leased (at least
    `jobs`: every writer finishes its turn; each acked by the next call but the last)."""
    sys.path.insert(0, str(REPO / "src"))
    import nobroker

    queues = [nobroker.Queue(directory, fsync=False, auto_compact=None)
              for _ in range(writers)]
    queues[0].enqueue_many([{"n": n} for n in range(jobs + batch * writers)])
    mark: int = queues[0].backend.handle.live_log().end  # type: ignore[attr-defined]
    held = [queue.lease(batch) for queue in queues]
    done = 0
    while done < jobs:
        for index, queue in enumerate(queues):
            held[index] = queue.ack_many_and_lease(held[index], batch)
            done += len(held[index])
    for queue in queues:
        queue.close()
    return mark, done


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", action="append", help="source trees to time (A, B, ...)")
    parser.add_argument("--batch", type=int, action="append", help="jobs per peer batch")
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--turns", type=int, default=3, help="interleaved turns per tree")
    parser.add_argument("--reads", type=int, action="append",
                        help="batches per read (default: all in one read)")
    parser.add_argument("--writers", type=int, default=1, help="handles writing in turns")
    args = parser.parse_args()
    trees = args.src or ["/work/main/src", str(REPO / "src")]
    results: dict[str, dict[str, float]] = {}
    for batch in args.batch or [1, 16]:
        with tempfile.TemporaryDirectory() as directory:
            mark, jobs = build(directory, batch, args.jobs, args.writers)
            for reads in args.reads or [0]:
                label = f"batch {batch}" + (f", reads of {reads}" if reads else "")
                row = results.setdefault(label, {})
                for tree in trees * args.turns:
                    out = subprocess.run(
                        [sys.executable, "-c", _TIMER, directory, str(mark),
                         str(args.rounds), str(jobs), str(reads)],
                        env={"PYTHONPATH": tree}, check=True, capture_output=True,
                        text=True).stdout
                    row[tree] = min(row.get(tree, float("inf")), float(out))
    for label, row in results.items():
        print(label, "  ".join(f"{tree}: {us:.1f} us/job" for tree, us in row.items()))
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
