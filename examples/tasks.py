"""A tasks module, the way a Celery, RQ or Huey user would write one, on nobroker.

Run a worker on it (from this directory, or with examples/ on PYTHONPATH):

    nobroker work tasks --pool process --concurrency 2

or run the short tour at the bottom, which starts that worker itself, sends
it work, waits for results, cancels a job and stops it again:

    python examples/tasks.py

Every task has an explicit `name=`: the tour runs this file as `__main__`
while its worker imports it as `tasks`, and a task's default name
("module.qualname") would differ between the two. In an application whose
tasks live in an imported module, the default is fine.

The queue lives in $NOBROKER_DIR (default ./jobs), named "tasks".
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))  # this checkout's nobroker, installed or not

if __name__ == "__main__" and "NOBROKER_DIR" not in os.environ:  # the tour: a scratch queue
    os.environ["NOBROKER_DIR"] = tempfile.mkdtemp(prefix="nobroker-tasks-")
    _SCRATCH = True
else:
    _SCRATCH = False

from nobroker import Queue, Retry, TaskFailed  # noqa: E402
from nobroker.tasks import current_job  # noqa: E402

DIRECTORY = os.path.abspath(os.environ.get("NOBROKER_DIR", "./jobs"))
q = Queue(DIRECTORY, "tasks")


@q.task(name="tasks.send_email", max_attempts=3)
def send_email(to: str, subject: str = "") -> dict[str, Any]:
    """A plain task: its return value (JSON) is the job's result."""
    return {"sent": True, "to": to, "subject": subject}


@q.task(name="tasks.fetch", timeout=10)
async def fetch(url: str) -> dict[str, Any]:
    """An async task: it runs on the worker's event loop, never blocking a thread."""
    await asyncio.sleep(0.05)  # stands in for an HTTP request
    return {"url": url, "status": 200}


@q.task(name="tasks.render_report", timeout=1.0, max_attempts=2)
def render_report(pages: int) -> int:
    """A task with a hard time limit: under --pool process a run over 1 s is killed."""
    time.sleep(pages * 0.1)
    return pages


@q.task(name="tasks.sync_orders", lock=True)
def sync_orders(account: str) -> dict[str, Any]:
    """One run at a time across every worker (lock=True); an API that answers
    "429, retry after 0.2 s" the first time is retried after 0.2 s, not the backoff."""
    job = current_job()
    attempt = job.attempts if job else 1
    if attempt == 1:
        raise Retry("rate limited by the orders API", delay=0.2)
    return {"account": account, "attempt": attempt}


@q.periodic(name="tasks.heartbeat", every=60)
def heartbeat() -> None:
    """Every minute. A tick missed while no worker ran runs once when one starts."""
    job = current_job()
    with open(os.path.join(DIRECTORY, "heartbeats.log"), "a") as log:
        log.write(f"{job.id if job else '?'}\n")


@q.periodic(name="tasks.nightly_cleanup", cron="30 3 * * *")
def nightly_cleanup() -> None:
    """03:30 UTC every night."""


# -- the tour ---------------------------------------------------------------

def main() -> int:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE.parent / "src"), str(HERE)]))
    print(f"queue: {DIRECTORY} (queue 'tasks')")
    print(f"send_email('me@example.com') runs right here: {send_email('me@example.com')}")
    r = send_email.delay("ada@example.com", subject="hi")
    print(f"send_email.delay(...) -> {r!r}: {q.get(r.id).payload}")
    later = send_email.apply_async(args=("bob@example.com",), delay=3600, job_id="remind-bob")
    slow = render_report.apply_async(args=(50,))  # 5 s of work against a 1 s limit
    page = fetch.delay("https://example.com/")
    orders = sync_orders.delay("acme")
    worker = subprocess.Popen([sys.executable, "-m", "nobroker", "--dir", DIRECTORY,
                               "--queue", "tasks", "work", "tasks", "--pool", "process",
                               "--concurrency", "2", "-q"], cwd=HERE, env=env)
    try:
        print(f"send_email result: {r.get(timeout=30)}")
        print(f"fetch result:      {page.get(timeout=30)}")
        print(f"sync_orders result: {orders.get(timeout=30)} (Retry asked for 0.2 s)")
        print(f"cancel the reminder due in an hour: {later.cancel()} -> {later.state}")
        try:
            print(f"render_report: {slow.get(timeout=30)}")
        except TaskFailed as exc:
            print(f"render_report failed as it should: {exc.last_error}")
        beats = Path(DIRECTORY, "heartbeats.log")
        deadline = time.monotonic() + 30
        while not (beats.exists() and beats.read_text().strip()):
            if time.monotonic() > deadline:
                raise TimeoutError("the heartbeat tick did not run")
            time.sleep(0.02)
        print(f"heartbeat ran at worker start: {beats.read_text().split()[0]}")
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(30)
        q.close()
        if _SCRATCH:
            shutil.rmtree(DIRECTORY, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
