"""How long the dashboard takes to answer on a big queue (default: 1,000,000 jobs).

Fills a scratch queue (fsync off: only the setup, never the dashboard, is
hurried), starts a Dashboard on it in this process, and times each request
a queue page makes, over real HTTP on 127.0.0.1: the page itself, its
script, the queue summary, the chart's series, the first page of jobs, a
deep page, one job, /metrics and the first event of the stream. Each is
run `--repeat` times; the median and the worst are printed. With
`--browser` (run it with .dev/web-venv/bin/python, which has Playwright),
it also opens the queue page in headless Chromium and reads how long it
took, by the browser's own clock, from the start of the navigation until
the counts, the chart and the first page of jobs were drawn (the page
records that moment in `<html data-drawn>`); and, for scale, until a
trivial JSON page (/healthz) finished loading.

Figures are for this machine at this moment; compare them within one run.
"""

from __future__ import annotations

import argparse
import http.client
import os
import shutil
import statistics
import sys
import tempfile
import time

from nobroker import Queue
from nobroker.dashboard import Dashboard

CHUNK = 20_000


def fill(directory: str, jobs: int) -> float:
    started = time.perf_counter()
    with Queue(directory, fsync=False, max_attempts=1, auto_compact=None) as q:
        for start in range(0, jobs, CHUNK):
            q.enqueue_many([{"n": i, "to": f"user{i}@example.com"}
                            for i in range(start, min(jobs, start + CHUNK))])
        for job in q.lease(100):
            q.nack(job, error="boom")  # a dead-letter queue to show
    return time.perf_counter() - started


def timed_get(port: int, path: str, *, first_line_only: bool = False) -> float:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        started = time.perf_counter()
        conn.request("GET", path)
        response = conn.getresponse()
        if first_line_only:  # an event stream never ends: stop at its first event
            while not response.readline().startswith(b"data: "):
                pass
        else:
            response.read()
        elapsed = time.perf_counter() - started
        if response.status != 200:
            raise SystemExit(f"bench_dashboard.py: GET {path} answered {response.status}")
        return elapsed
    finally:
        conn.close()


def browser_open(url: str, repeat: int) -> tuple[list[float], list[float]]:
    """(times to draw the queue page, times to show /healthz, a trivial JSON page)."""
    from playwright.sync_api import sync_playwright

    times: list[float] = []
    trivial: list[float] = []
    profile = tempfile.mkdtemp(prefix="nobroker-chromium-")
    try:
        with sync_playwright() as p:
            context = p.chromium.launch_persistent_context(
                profile, executable_path="/usr/bin/chromium", headless=True,
                args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                      "--no-first-run", "--disable-background-networking",
                      "--disable-component-update", "--disable-sync"])
            page = context.new_page()
            for _ in range(repeat + 1):  # the first opening warms the browser up
                page.goto(url.split("/q/")[0] + "/healthz")
                trivial.append(page.evaluate("performance.getEntriesByType('navigation')[0]"
                                             ".loadEventEnd") / 1000)
                page.goto(url)
                page.wait_for_selector("html[data-drawn]", state="attached", timeout=120_000)
                times.append(float(page.get_attribute("html", "data-drawn") or "nan") / 1000)
            context.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    return times[1:], trivial[1:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_dashboard.py", description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--browser", action="store_true",
                        help="also time the queue page in headless Chromium (needs Playwright)")
    args = parser.parse_args(argv)
    scratch = tempfile.mkdtemp(prefix="nobroker-bench-dashboard-")
    try:
        directory = os.path.join(scratch, "q")
        print(f"filling a queue with {args.jobs:,} jobs ... {fill(directory, args.jobs):.1f} s")
        started = time.perf_counter()
        dash = Dashboard(directory, port=0, interval=1.0)
        dash.start()  # opens (replays) the queue and takes the first sample
        print(f"dashboard start (open the queue, first sample): "
              f"{time.perf_counter() - started:.2f} s")
        try:
            deep = max(0, args.jobs - 1000)
            paths = [("page /q/default", "/q/default"), ("app.js", "/static/app.js"),
                     ("queue summary", "/api/queues/default"),
                     ("chart series", "/api/queues/default/series?step=10"),
                     ("overview", "/api/overview"),
                     ("jobs, first page of 50", "/api/queues/default/jobs?limit=50"),
                     ("dead jobs, first page", "/api/queues/default/jobs?state=dead&limit=50"),
                     (f"jobs at offset {deep:,}",
                      f"/api/queues/default/jobs?limit=50&offset={deep}"),
                     ("one job", "/api/queues/default/jobs/0000000000000400"),
                     ("/metrics", "/metrics")]
            print(f"\n{'request':<32}{'median ms':>12}{'worst ms':>12}")
            for label, path in paths:
                times = [timed_get(dash.port, path) for _ in range(args.repeat)]
                print(f"{label:<32}{statistics.median(times) * 1000:>12.1f}"
                      f"{max(times) * 1000:>12.1f}")
            times = [timed_get(dash.port, "/api/events?queue=default", first_line_only=True)
                     for _ in range(args.repeat)]
            print(f"{'first event of the stream':<32}{statistics.median(times) * 1000:>12.1f}"
                  f"{max(times) * 1000:>12.1f}")
            if args.browser:
                times, trivial = browser_open(f"{dash.url}q/default", args.repeat)
                for label, values in (("Chromium: /healthz loaded", trivial),
                                      ("Chromium: queue page drawn", times)):
                    print(f"{label:<32}{statistics.median(values) * 1000:>12.1f}"
                          f"{max(values) * 1000:>12.1f}")
        finally:
            dash.close()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
