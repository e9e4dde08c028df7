"""The dashboard in a real browser: headless Chromium driven by Playwright.

What a user does, checked the way a user would see it: the page follows a
live queue while a worker drains it in another process (counts and the
chart change without a reload); a dead job requeued by a click is in the
log afterwards (a fresh Queue and the raw records say so); a change made
without the token is refused and changes nothing; a payload and an id that
are HTML are shown as text and never run. /metrics is also read by
prometheus_client's own parser here, since that is a third-party package.

Needs Playwright and prometheus_client (requirements-web.txt) and Debian's
/usr/bin/chromium; `python3 make.py test-web` installs the first two into
.dev/web-venv and runs this module. Playwright's own browser downloads are
never used: Chromium is launched by its path with a fresh profile.
Without them the module is skipped, and tests/run.py says so loudly.
Screenshots go to .dev/screenshots/.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import unittest
import urllib.request
from typing import Any
from unittest import mock

from harness.support import REPO, SRC, TempDirTestCase, seed_limited_queue, tree_digest

from nobroker import Queue
from nobroker.dashboard import Dashboard
from nobroker.file.inspection import current_log_path, read_records

CHROMIUM = os.environ.get("NOBROKER_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync"]
SCREENSHOTS = REPO / ".dev" / "screenshots"
TOKEN = "browser-test-token-0123456789"
XSS = "<script>window.__xss = 1; alert(1)</script>"
XSS_ID = '"><img src=x onerror="window.__xss=2">'
WAIT_MS = 60_000  # the machine is shared: generous, and every wait is on a condition


def _missing() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
        import prometheus_client  # noqa: F401
    except ImportError as exc:
        return f"{exc.name} is not installed"
    if not os.path.exists(CHROMIUM):
        return f"{CHROMIUM} is missing"
    return None


MISSING = _missing()
# make.py test-web sets this: there, a missing browser is a failure, not a skip.
REQUIRED = os.environ.get("NOBROKER_REQUIRE_BROWSER") == "1"
SKIP_REASON = f"browser suite skipped ({MISSING}): run python3 make.py test-web"

HANDLER = textwrap.dedent('''
    import time

    def handle(job):
        time.sleep(0.05)  # slow enough that the page sees the counts move
''')


@unittest.skipIf(MISSING is not None and not REQUIRED, SKIP_REASON)
class DashboardBrowserTest(TempDirTestCase):
    def setUp(self) -> None:
        super().setUp()
        if MISSING is not None:
            self.fail(f"the browser suite cannot run: {MISSING}")
        from playwright.sync_api import sync_playwright

        self.qdir = self.tmp / "queues"
        self.qdir.mkdir()
        with Queue(self.qdir, max_attempts=1) as q:
            q.enqueue({"html": XSS}, job_id=XSS_ID)
            q.enqueue({"n": 1}, job_id="poison-1")
            for _ in range(2):
                job = q.lease_one()
                assert job is not None
                q.nack(job, error=f"failed: {XSS}")
        self.dash = Dashboard(str(self.qdir), port=0, token=TOKEN, interval=0.25)
        self.dash.start()
        self.addCleanup(self.dash.close)
        self.base = self.dash.url.rstrip("/")

        self.problems: list[str] = []
        self.dialogs: list[str] = []
        self.profile = tempfile.mkdtemp(prefix="nobroker-chromium-")
        self.addCleanup(shutil.rmtree, self.profile, True)
        self.playwright = sync_playwright().start()
        self.addCleanup(self.playwright.stop)
        self.context = self.playwright.chromium.launch_persistent_context(
            self.profile, executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS,
            viewport={"width": 1280, "height": 1000})
        self.addCleanup(self.context.close)
        self.outside: list[str] = []
        self.context.route("**/*", self.only_ours)
        self.page = self.context.new_page()
        self.page.on("pageerror", lambda exc: self.problems.append(f"page error: {exc}"))
        self.page.on("console", lambda msg: self.problems.append(f"console: {msg.text}")
                     if msg.type == "error" else None)
        self.page.on("dialog", self.on_dialog)

    def only_ours(self, route: Any) -> None:
        if route.request.url.startswith(self.base + "/"):
            route.continue_()
        else:  # nothing may be fetched from anywhere else
            self.outside.append(route.request.url)
            route.abort()

    def on_dialog(self, dialog: Any) -> None:
        self.dialogs.append(f"{dialog.type}: {dialog.message}")
        if dialog.type == "confirm":
            dialog.accept()
        else:
            dialog.dismiss()

    def tearDown(self) -> None:
        self.assertEqual(self.outside, [], "the page fetched something from elsewhere")
        super().tearDown()

    def shot(self, name: str) -> None:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(SCREENSHOTS / f"dashboard-{name}.png"), full_page=True)

    def count(self, key: str) -> int:
        text = self.page.inner_text(f"#cards [data-count={key}] .n")
        return int(text.replace(",", ""))

    def series_sum(self, key: str) -> int:
        value = self.page.get_attribute(f"#chart polyline[data-series={key}]", "data-sum")
        return int(value or 0)

    def wait_js(self, expression: str) -> None:
        """Poll `expression` in the page until it is true (Playwright's own
        wait_for_function compiles a string, which our CSP rightly forbids)."""
        deadline = time.monotonic() + WAIT_MS / 1000
        while not self.page.evaluate(expression):
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {expression}")
            self.page.wait_for_timeout(100)

    def reap(self, worker: subprocess.Popen[bytes]) -> None:
        if worker.poll() is None:
            worker.kill()
        _, err = worker.communicate(timeout=60)
        if err.strip():
            print(f"worker's stderr:\n{err.decode(errors='replace')}")

    def files(self) -> dict[str, tuple[int, str]]:
        return tree_digest(self.qdir)

    # -- the scenarios ------------------------------------------------------

    def test_the_page_follows_a_live_queue_while_a_worker_drains_it(self) -> None:
        with Queue(self.qdir, "work") as q:
            q.enqueue_many([{"i": i} for i in range(60)])
        self.page.goto(f"{self.base}/")
        self.page.wait_for_selector("tr[data-queue=work]", timeout=WAIT_MS)
        self.assertEqual(self.page.inner_text("tr[data-queue=work] [data-count=pending]"), "60")
        self.shot("overview")
        self.page.click("tr[data-queue=work] a")
        self.page.wait_for_selector("#cards [data-count=done]", timeout=WAIT_MS)
        self.page.wait_for_selector("#chart polyline[data-series=succeeded]", state="attached",
                                    timeout=WAIT_MS)
        self.page.evaluate("window.__same_page = true")
        self.assertEqual(self.count("done"), 0)
        self.assertEqual(self.series_sum("succeeded"), 0)

        (self.tmp / "slow_handler.py").write_text(HANDLER)
        env = {**os.environ, "PYTHONPATH": str(SRC)}
        worker = subprocess.Popen([sys.executable, "-m", "nobroker", "--dir", str(self.qdir),
                                   "--queue", "work", "work", "slow_handler:handle", "-q"],
                                  cwd=self.tmp, env=env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE)
        self.addCleanup(self.reap, worker)
        self.wait_js("Number(document.querySelector('#cards [data-count=done] .n')"
                     ".textContent.replace(/,/g, '')) > 0")
        self.wait_js("Number(document.querySelector("
                     "'#chart polyline[data-series=succeeded]').dataset.sum) > 0")
        with Queue(self.qdir, "work") as q:
            q.enqueue_many([{"late": i} for i in range(5)])
        self.wait_js("Number(document.querySelector("
                     "'#chart polyline[data-series=enqueued]').dataset.sum) >= 5")
        self.wait_js("Number(document.querySelector('#cards [data-count=done] .n')"
                     ".textContent.replace(/,/g, '')) === 65")
        self.shot("queue-live")
        self.assertTrue(self.page.evaluate("window.__same_page === true"), "no reload")
        self.assertEqual(self.page.inner_text("#live"), "live")
        worker.send_signal(signal.SIGTERM)
        _, err = worker.communicate(timeout=60)
        self.assertEqual(worker.returncode, 0, err)
        self.assertEqual(self.series_sum("succeeded"), 65)
        self.assertEqual(self.problems, [])

    def test_requeueing_a_dead_job_in_the_page_lands_in_the_log(self) -> None:
        self.page.goto(f"{self.base}/q/default?state=dead#token={TOKEN}")
        self.assertNotIn("token", self.page.url, "the token leaves the address bar")
        row = self.page.locator("tr[data-job='poison-1']")
        row.wait_for(timeout=WAIT_MS)
        self.assertEqual(self.count("dead"), 2)
        row.locator("button[data-action=requeue]").click()
        self.page.wait_for_selector("#flash .ok", timeout=WAIT_MS)
        self.assertIn("requeued 1 job(s)", self.page.inner_text("#flash"))
        self.wait_js("document.querySelector('#cards [data-count=dead] .n').textContent === '1'")
        with Queue(self.qdir, readonly=True) as fresh:
            self.assertEqual(fresh.get("poison-1").state, "pending")
            self.assertEqual(fresh.get("poison-1").attempts, 0)
            self.assertEqual(fresh.stats().dead, 1)
        log = [r for r in read_records(current_log_path(str(self.qdir), "default"))
               if isinstance(r.payload, dict) and r.payload.get("id") == "poison-1"]
        self.assertEqual([r.type for r in log], ["ENQUEUE", "LEASE", "NACK", "REQUEUE"])

        self.page.click("#requeue-all")  # asks first: the dialog handler says yes
        self.wait_js("document.querySelector('#cards [data-count=dead] .n').textContent === '0'")
        self.assertTrue(any(d.startswith("confirm: Requeue every dead job") for d in self.dialogs))
        with Queue(self.qdir, readonly=True) as fresh:
            self.assertEqual(fresh.stats().dead, 0)
        self.shot("requeued")
        self.assertEqual(self.problems, [])

    def test_a_change_without_the_token_is_refused_and_changes_nothing(self) -> None:
        before = self.files()
        self.page.goto(f"{self.base}/q/default?state=dead")
        self.assertIn("no token", self.page.inner_text("#token-state"))
        row = self.page.locator("tr[data-job='poison-1']")
        row.wait_for(timeout=WAIT_MS)
        row.locator("button[data-action=requeue]").click()
        self.page.wait_for_selector("#flash .err", timeout=WAIT_MS)
        self.assertIn("refused: a change needs the dashboard's token",
                      self.page.inner_text("#flash"))
        self.page.click("#compact")
        self.wait_js("document.querySelectorAll('#flash .err').length >= 2")
        self.shot("refused")
        self.assertEqual(self.files(), before)
        self.assertEqual(self.count("dead"), 2)
        self.page.fill("#token-input", "not-the-token-at-all")
        self.page.click("#token-form button")
        row.locator("button[data-action=requeue]").click()
        self.wait_js("[...document.querySelectorAll('#flash .err')]"
                     ".some(e => e.textContent.includes('the token is wrong'))")
        self.assertEqual(self.files(), before)
        # Only the refused requests themselves may have been logged by the browser.
        self.assertTrue(all("403" in p for p in self.problems), self.problems)

    def test_html_in_a_payload_an_error_and_an_id_is_shown_as_text(self) -> None:
        self.page.goto(f"{self.base}/q/default?state=dead")
        row = self.page.locator("tr[data-job]").filter(has_text="onerror")
        row.wait_for(timeout=WAIT_MS)
        self.assertEqual(row.locator("a").inner_text(), XSS_ID)
        self.assertIn(XSS, row.inner_text())
        row.locator("a").click()
        self.page.wait_for_selector("#payload", timeout=WAIT_MS)
        self.page.wait_for_selector("#record-table", timeout=WAIT_MS)
        self.assertEqual(self.page.inner_text("#job-id"), XSS_ID)
        self.assertEqual(json.loads(self.page.inner_text("#payload")), {"html": XSS})
        self.assertEqual(self.page.inner_text("[data-field='last error']"), f"failed: {XSS}")
        self.assertEqual(self.page.locator("img").count(), 0, "no element was made from data")
        self.assertEqual(self.page.locator("#app script, #flash script").count(), 0)
        self.assertIsNone(self.page.evaluate("window.__xss"))
        self.assertEqual(self.dialogs, [], "no alert ran")
        self.assertEqual([t.strip() for t in
                          self.page.locator("#record-table td:nth-child(2)").all_inner_texts()],
                         ["ENQUEUE", "LEASE", "NACK"])
        self.shot("xss-as-text")
        self.assertEqual(self.problems, [])

    def test_the_limits_view_shows_each_keys_use_and_marks_a_full_one(self) -> None:
        seed_limited_queue(self.qdir, XSS)
        self.page.goto(f"{self.base}/q/limited")
        self.page.wait_for_selector("#limits tr[data-limit]", timeout=WAIT_MS)
        rated_row = self.page.locator("#limits tr[data-limit='rate:rated']")
        self.assertEqual(rated_row.locator("td[data-use]").inner_text(), "2 / 2")
        self.assertEqual(rated_row.get_attribute("class"), "full")
        self.assertIn("next start", rated_row.inner_text())
        capped_row = self.page.locator("#limits tr[data-limit^='concurrency:capped']")
        self.assertEqual(capped_row.locator("td[data-use]").inner_text(), "1 / 1")
        self.assertIn(f"capped = {XSS}", capped_row.inner_text(), "the key shown as text")
        self.assertIsNone(self.page.evaluate("window.__xss"))
        self.shot("limits")
        self.page.goto(f"{self.base}/q/default")  # a queue without limits: no view
        self.page.wait_for_selector("#cards [data-count=dead]", timeout=WAIT_MS)
        self.assertEqual(self.page.locator("#limits *").count(), 0)
        self.assertEqual((self.problems, self.dialogs), ([], []))

    def test_a_polled_stream_keeps_the_badge_live_until_a_poll_fails(self) -> None:
        """The stream a dashboard mounted in Django sends (stream.polled): one update
        a request, then it ends. The badge stays "live" while polls bring updates."""
        from nobroker.dashboard import handler, stream

        polls: list[str | None] = []
        down = threading.Event()

        def polled_events(request: Any, name: str | None) -> None:
            polls.append(name)
            request.close_connection = True
            if down.is_set():
                request.send_response(503)
                request.end_headers()
                return
            body = stream.polled(request.site.hub, name).encode()
            request.send_response(200)
            request.send_header("Content-Type", "text/event-stream; charset=utf-8")
            request.send_header("Content-Length", str(len(body)))
            request.end_headers()
            request.wfile.write(body)

        patcher = mock.patch.object(handler.RequestHandler, "_events", polled_events)
        patcher.start()
        self.addCleanup(patcher.stop)
        self.page.goto(f"{self.base}/q/default")
        self.page.wait_for_selector("#cards [data-count=dead]", timeout=WAIT_MS)
        self.page.evaluate("""(() => {
            window.__badges = [];
            const live = document.getElementById("live");
            new MutationObserver(() => window.__badges.push(live.textContent))
                .observe(live, {childList: true, characterData: true, subtree: true});
        })()""")
        seen = len(polls)
        deadline = time.monotonic() + WAIT_MS / 1000
        while len(polls) < seen + 2:  # two more polls: the page saw a stream end
            self.assertLess(time.monotonic(), deadline, "the page did not poll again")
            self.page.wait_for_timeout(100)
        self.assertEqual(polls[-1], "default")
        self.assertEqual(self.page.inner_text("#live"), "live")
        self.assertNotIn("reconnecting", self.page.evaluate("window.__badges"))
        down.set()  # the next poll fails: now the badge says so
        self.wait_js("document.getElementById('live').textContent === 'reconnecting'")

    def test_metrics_parse_with_prometheus_clients_parser(self) -> None:
        from prometheus_client.parser import text_string_to_metric_families

        with urllib.request.urlopen(f"{self.base}/metrics", timeout=30) as response:
            text = response.read().decode()
        families = {f.name: f for f in text_string_to_metric_families(text)}
        self.assertEqual(families["nobroker_jobs"].type, "gauge")
        samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
                   for f in families.values() for s in f.samples}
        self.assertEqual(samples[("nobroker_jobs", (("queue", "default"), ("state", "dead")))], 2)
        self.assertEqual(samples[("nobroker_dead_lettered_total", (("queue", "default"),))], 2)
        self.assertEqual(samples[("nobroker_enqueued_total", (("queue", "default"),))], 2)
        self.assertEqual(samples[("nobroker_paused", (("queue", "default"),))], 0)
        for counter in ("nobroker_enqueued", "nobroker_succeeded", "nobroker_retried",
                        "nobroker_dead_lettered"):
            self.assertEqual(families[counter].type, "counter")


if __name__ == "__main__":
    unittest.main()
