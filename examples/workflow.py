"""A fan-out/fan-in workflow: count the words of a few files side by side, then add them up.

    python examples/workflow.py

writes four small files (one of them is "lost" before it is read), starts a
worker process on this module, and runs two chords over them:

- over the three files that exist: every member runs, and the callback
  receives their counts in member order;
- over all four: the member for the lost file dies (FileNotFoundError, one
  attempt), so the callback never runs: `get()` raises TaskFailed naming that
  member and its task, and the `on_error` handler runs once with its id and
  error.

The same module is what the worker imports (`nobroker work workflow`), so
tasks have explicit names (the tour runs as `__main__`). The queue lives in
$NOBROKER_DIR (default: a scratch directory the tour removes).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))  # this checkout's nobroker, installed or not

if __name__ == "__main__" and "NOBROKER_DIR" not in os.environ:  # the tour: a scratch queue
    os.environ["NOBROKER_DIR"] = tempfile.mkdtemp(prefix="nobroker-workflow-")
    _SCRATCH = True
else:
    _SCRATCH = False

from nobroker import Queue, TaskFailed, chord  # noqa: E402

DIRECTORY = os.path.abspath(os.environ.get("NOBROKER_DIR", "./jobs"))
q = Queue(DIRECTORY, "workflow")


@q.task(name="workflow.count_words", max_attempts=1)
def count_words(path: str) -> int:
    """Fan-out: one job per file. A missing file raises: this member dies."""
    return len(Path(path).read_text(encoding="utf-8").split())


@q.task(name="workflow.total")
def total(counts: list[int]) -> dict[str, int]:
    """Fan-in: the chord callback, given every member's result in member order."""
    return {"files": len(counts), "words": sum(counts)}


@q.task(name="workflow.report_failure")
def report_failure(label: str, *, job_id: str, error: str) -> None:
    """on_error: called once, with the dead job's id and error after its own arguments."""
    with open(os.path.join(DIRECTORY, "failures.log"), "a", encoding="utf-8") as log:
        log.write(f"{label}: job {job_id}: {error}\n")


def main() -> int:
    texts = {"a.txt": "one two three", "b.txt": "four five", "c.txt": "six",
             "lost.txt": "never read"}
    files = Path(DIRECTORY, "files")
    files.mkdir(parents=True, exist_ok=True)
    for name, text in texts.items():
        (files / name).write_text(text, encoding="utf-8")
    (files / "lost.txt").unlink()  # gone before its member runs
    paths = [str(files / name) for name in texts]

    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE.parent / "src"), str(HERE)]))
    worker = subprocess.Popen([sys.executable, "-m", "nobroker", "--dir", DIRECTORY,
                               "--queue", "workflow", "work", "workflow", "--concurrency", "2",
                               "-q"], cwd=HERE, env=env, stderr=subprocess.DEVNULL)
    try:
        good = chord([count_words.s(p) for p in paths[:3]], total.s()).delay()
        print(f"3 files: {good.get(timeout=30)}; per file: {good.parent.get(timeout=30)}")

        bad = chord([count_words.s(p) for p in paths], total.s()).on_error(
            report_failure.s("word count")).delay()
        try:
            bad.get(timeout=30)
        except TaskFailed as failed:
            lost = bad.parent.results[3]
            print(f"4 files: {failed.task} failed: {failed.last_error}")
            print(f"the failed member is the lost file's: {failed.job_id == lost.id}")
        print(f"the callback never ran: {bad.state}")
        for member in bad.parent.results[:3]:  # they run on after the failure was told
            member.get(timeout=30)
        print(f"the other members finished: {bad.parent.completed_count()} of "
              f"{len(bad.parent)}")
        log = Path(DIRECTORY, "failures.log")
        deadline = time.monotonic() + 30  # the handler runs in the worker, after the death
        while not (log.exists() and log.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.02)
        print(f"on_error ran once: {log.read_text(encoding='utf-8').strip()}")
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(30)
        q.close()
        if _SCRATCH:
            shutil.rmtree(DIRECTORY, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
