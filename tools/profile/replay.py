"""What reading another process's batches costs a handle: peer replay, A/B.

A writer drains N jobs the way a prefetching worker does (ack_many_and_lease of
K jobs a call, one batch each), into one log; then each source tree named
(default: this checkout's src/ against /work/main's, or any `--src` paths)
times, in its own interpreter and in turns, the read-forward of exactly those
batches (LogFile.scan into QueueState.apply_batch, what following.refresh does),
from a state replayed up to where the writer began. Thread CPU, best of
`--rounds`, per job (one LEASE and one ACK record each):

    python -m tools.profile.replay --batch 1 --batch 16
    python -m tools.profile.replay --src /work/main/src --src src --jobs 4000
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile

from tools.bench.common import REPO

# Runs under the source tree timed (PYTHONPATH): argv = directory, mark, rounds, jobs.
_TIMER = """
import copy, sys, time
from nobroker.file.disk.fs import FileSystem
from nobroker.file.log.logfile import LogFile
from nobroker.file.state.state import QueueState
directory, mark, rounds, jobs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
log = LogFile.open(FileSystem(), directory, "default", 0, readonly=True)
state = QueueState()
log.scan(state.apply_batch, 0, limit=mark)
start, crc = log.end, log.crc
best = float("inf")
for _ in range(rounds):
    fresh = copy.deepcopy(state)
    log.end, log.crc = start, crc
    began = time.thread_time()
    log.scan(fresh.apply_batch, fresh.last_batch, full=False)
    best = min(best, time.thread_time() - began)
print(best / jobs * 1e6)
"""


def build(directory: str, batch: int, jobs: int) -> int:
    """Fill a queue in `directory`; returns the log offset where the drain begins."""
    sys.path.insert(0, str(REPO / "src"))
    import nobroker

    queue = nobroker.Queue(directory, fsync=False, auto_compact=None)
    queue.enqueue_many([{"n": n} for n in range(jobs + batch)])
    mark: int = queue.backend.handle.live_log().end  # type: ignore[attr-defined]
    held, done = queue.lease(batch), 0
    while done < jobs:
        held = queue.ack_many_and_lease(held, batch)
        done += len(held)
    queue.close()
    return mark


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", action="append", help="source trees to time (A, B, ...)")
    parser.add_argument("--batch", type=int, action="append", help="jobs per peer batch")
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--turns", type=int, default=3, help="interleaved turns per tree")
    args = parser.parse_args()
    trees = args.src or ["/work/main/src", str(REPO / "src")]
    results: dict[str, dict[str, float]] = {}
    for batch in args.batch or [1, 16]:
        with tempfile.TemporaryDirectory() as directory:
            mark = build(directory, batch, args.jobs)
            for tree in trees * args.turns:
                out = subprocess.run(
                    [sys.executable, "-c", _TIMER, directory, str(mark), str(args.rounds),
                     str(args.jobs)], env={"PYTHONPATH": tree}, check=True,
                    capture_output=True, text=True).stdout
                row = results.setdefault(f"batch {batch}", {})
                row[tree] = min(row.get(tree, float("inf")), float(out))
    for label, row in results.items():
        print(label, "  ".join(f"{tree}: {us:.1f} us/job" for tree, us in row.items()))
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
