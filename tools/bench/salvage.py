"""How long salvage takes, next to opening the same log undamaged.

Builds a queue of `--jobs` pending jobs (batches of 1,000, no checkpoint),
flips one byte in the middle of its log, and times, in one run, a cold open
of an undamaged copy without a checkpoint (the baseline: replaying every
record) and `salvage()` of the damaged one (which reads the file whole,
finds its intact batches, replays them, writes a new generation and replays
that). The ratio is the figure; the machine's speed drifts too much for the
absolute times to mean much.

    python3 make.py bench-salvage             # 100,000 jobs
    python3 make.py bench-salvage --jobs 20000
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

from nobroker import Queue
from nobroker.file.repair.salvage import salvage


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="nobroker-bench-salvage-",
                            dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    try:
        damaged, clean = os.path.join(root, "damaged"), os.path.join(root, "clean")
        with Queue(damaged, auto_compact=None) as q:
            for start in range(0, args.jobs, 1000):
                q.enqueue_many([{"n": n, "pad": "x" * 40}
                                for n in range(start, min(start + 1000, args.jobs))])
        for entry in os.listdir(damaged):
            if entry.endswith(".ckpt"):
                os.unlink(os.path.join(damaged, entry))
        shutil.copytree(damaged, clean)
        started = time.perf_counter()
        Queue(clean, auto_compact=None).close()
        opened = time.perf_counter() - started
        path = os.path.join(damaged, "default.000000.log")
        with open(path, "r+b") as handle:
            data = bytearray(handle.read())
            size = len(data.rstrip(b"\0"))
            data[size // 2] ^= 1
            handle.seek(0)
            handle.write(data)
        started = time.perf_counter()
        report = salvage(damaged)
        took = time.perf_counter() - started
        print(f"{args.jobs:,} jobs, log of {size:,} bytes: salvage {took:.2f} s; cold open "
              f"of the undamaged log without a checkpoint {opened:.2f} s; ratio "
              f"{took / opened:.1f}x")
        print(report.describe().splitlines()[0])
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
