"""The tour of examples/demo.py, paced for a screen recording.

    python make.py video-demo              # all scenes, with pauses and typed commands
    python make.py video-demo --scenes 5   # only scene 5 (the kill -9 one)
    python make.py video-demo --fast       # no pauses: what the tests run

It runs exactly the scenes of demo.py, and checks the same claims, so the
recording can never show something the demo does not prove. The pacing is
the only difference: commands appear as if typed, results get a moment to
sink in, and each scene opens with a title card after a pause.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import demo  # examples/ is not a package: demo.py is found next to this file

PACE = 1.2  # seconds to let a result sink in
TYPING = 0.025  # seconds per typed character
BETWEEN = 2.5  # seconds of quiet before a new scene
TITLES = ["Enqueue: priorities and delays", "A worker", "Retries, backoff, dead letters",
          "Requeue from the DLQ", "kill -9 mid-job", "Compaction", "Inspect the raw log",
          "Tasks, a periodic tick, a result"]


def title_card(number: int, pause: float) -> None:
    if pause:
        time.sleep(pause)
    print("\n" * 2 + f"   +{'-' * 46}+")
    print(f"   |  scene {number}: {TITLES[number - 1]:<35}|")
    print(f"   +{'-' * 46}+", flush=True)
    if pause:
        time.sleep(pause / 2)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="nobroker's tour, paced for recording.")
    parser.add_argument("--scenes", type=demo.parse_scenes, default=demo.parse_scenes(None),
                        metavar="N[,N...]", help="run only these scenes (1-8)")
    parser.add_argument("--fast", action="store_true", help="skip every pause (for tests)")
    args = parser.parse_args(argv)
    pace, typing, between = (0.0, 0.0, 0.0) if args.fast else (PACE, TYPING, BETWEEN)
    title_card(args.scenes[0], 0.0)
    return demo.run_tour(args.scenes, pace=pace, typing=typing,
                         between=lambda number: title_card(number, between))


if __name__ == "__main__":
    sys.exit(main())
