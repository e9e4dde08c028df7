"""The playground (docsite/playground/) shows nobroker's real log, byte for byte.

Two halves. `DriverTest` runs the playground's driver (playground.py, the
module the page runs under Pyodide) on CPython: cheap, stdlib only, always
run. `BrowserTest` opens the built page in headless Chromium through
Playwright, runs the scenario by clicking, and reads back what the page
shows. Both check the shown bytes the same way: written to a fresh
directory and opened by nobroker's own reader, they must give the jobs the
page lists, and the record boundaries the page draws must be the ones
nobroker's decoder finds.

The browser half needs the docs site built (with the vendored Pyodide),
Playwright and /usr/bin/chromium; `python3 make.py test-playground` provides
all three and runs this module. Without them it is skipped, saying so.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import os
import shutil
import sys
import tempfile
import threading
import unittest
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlsplit

from nobroker import Queue
from nobroker.file.inspection import read_records

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "docsite" / "playground"))
from playground import START_TIME, Playground  # noqa: E402

SITE = Path(os.environ.get("NOBROKER_SITE_DIR", REPO / ".dev" / "site"))
SCREENSHOTS = REPO / ".dev" / "screenshots"
CHROMIUM = os.environ.get("NOBROKER_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync"]
READY_TIMEOUT_MS = 180_000  # Pyodide starts in seconds alone; the machine is shared


def reopen_from_bytes(log_name: str, data: bytes) -> tuple[list[tuple[Any, ...]], str]:
    """Open the shown bytes as a queue with nobroker's reader: (jobs, recovery)."""
    with tempfile.TemporaryDirectory() as tmp:
        directory = os.path.join(tmp, "q")
        os.mkdir(directory, 0o700)
        with open(os.path.join(directory, log_name), "wb") as log:
            log.write(data)
        generation = int(log_name.split(".")[1])
        if generation:
            with open(os.path.join(directory, "default.current"), "w") as current:
                current.write(f"{generation}\n")
        queue = Queue(directory, clock=lambda: START_TIME)
        try:
            jobs = [(j.id, j.state.value, j.attempts, j.payload) for j in queue.list_jobs()]
            return jobs, queue.recovery.describe()
        finally:
            queue.close()


def decoded_boundaries(data: bytes) -> list[tuple[int, str]]:
    """(offset, type) of every record nobroker's decoder finds in `data`."""
    with tempfile.NamedTemporaryFile(suffix=".log") as handle:
        handle.write(data)
        handle.flush()
        return [(r.offset, r.type) for r in read_records(handle.name)]


def shown_jobs(snapshot: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [(j["id"], j["state"], j["attempts"], j["payload"]) for j in snapshot["jobs"]]


class DriverTest(unittest.TestCase):
    """The driver on CPython: its actions are real calls, its bytes the real log."""

    def setUp(self) -> None:
        self.tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.pg = Playground(os.path.join(self.tmp, "jobs"))

    def check_bytes_match(self, snapshot: dict[str, Any]) -> None:
        data = bytes.fromhex(snapshot["log"]["hex"])
        jobs, _ = reopen_from_bytes(snapshot["log"]["path"], data)
        self.assertEqual(jobs, shown_jobs(snapshot))
        shown = [(r["offset"], r["type"]) for r in snapshot["log"]["records"]]
        self.assertEqual(decoded_boundaries(data), shown)

    def test_scenario_states_and_bytes_agree_with_the_reader(self) -> None:
        for action in ["enqueue", "enqueue", "enqueue", "lease", "ack"]:
            snap = self.pg.act(action)
        self.assertEqual(snap["stats"]["pending"], 2)
        self.assertEqual(snap["stats"]["done"], 1)
        types = [r["type"] for r in snap["log"]["records"]]
        self.assertEqual(types, ["ENQUEUE"] * 3 + ["LEASE", "ACK"])
        self.check_bytes_match(snap)

    def test_torn_tail_is_cut_on_recover_and_reported(self) -> None:
        for action in ["enqueue", "enqueue", "tear"]:
            snap = self.pg.act(action)
        self.assertTrue(snap["crashed"])
        self.assertEqual(snap["stats"], {})
        torn = [r for r in snap["log"]["records"] if not r["crc_ok"]]
        self.assertEqual(len(torn), 1, snap["log"]["records"])
        snap = self.pg.act("recover")
        self.assertIn(f"torn tail at offset {torn[0]['offset']}", snap["recovery"])
        self.assertEqual(snap["stats"]["pending"], 2)  # the torn enqueue never happened
        self.assertTrue(any(f["name"].endswith(f".torn-{torn[0]['offset']}")
                            for f in snap["files"]))
        self.check_bytes_match(snap)

    def test_killed_worker_lease_expires_after_the_clock_passes_it(self) -> None:
        for action in ["enqueue", "lease", "kill-worker", "wait", "lease"]:
            snap = self.pg.act(action)
        types = [r["type"] for r in snap["log"]["records"]]
        self.assertIn("EXPIRE", types)
        (job,) = snap["jobs"]
        self.assertEqual(job["attempts"], 1)  # the expiry counted; backoff keeps it pending
        self.check_bytes_match(snap)

    def test_a_typed_payload_is_enqueued_and_bad_json_is_one_line_refused(self) -> None:
        snap = self.pg.act("enqueue", '{"email": "ada@example.com"}')
        self.assertEqual(snap["jobs"][0]["payload"], {"email": "ada@example.com"})
        snap = self.pg.act("enqueue", "{not json")
        self.assertIn("the payload is not JSON", snap["events"][-1])
        self.assertEqual(len(snap["jobs"]), 1)  # nothing was written
        self.check_bytes_match(snap)

    def test_enqueue_many_is_one_batch_with_the_more_bit_on_all_but_the_last(self) -> None:
        snap = self.pg.act("enqueue-many")
        self.assertEqual([(r["type"], r["more"]) for r in snap["log"]["records"]],
                         [("ENQUEUE", True), ("ENQUEUE", True), ("ENQUEUE", False)])
        self.assertEqual(len({r["payload"]["b"] for r in snap["log"]["records"]}), 1)
        self.check_bytes_match(snap)

    def test_the_bytes_an_action_wrote_are_marked_as_new(self) -> None:
        first = self.pg.act("enqueue")["log"]
        self.assertEqual(first["new_from"], 16)  # the file header is all there was
        second = self.pg.act("lease")["log"]
        self.assertEqual(second["new_from"], first["records_end"])
        fresh = [r["type"] for r in second["records"] if r["offset"] >= second["new_from"]]
        self.assertEqual(fresh, ["LEASE"])

    def test_transitions_are_the_replay_states_table(self) -> None:
        rows = {(t["record"], t["before"]): t["after"] for t in self.pg.snapshot()["transitions"]}
        self.assertEqual(rows[("NACK", "leased")], ["pending", "dead"])
        self.assertEqual(rows[("ENQUEUE", "(none)")], ["pending", "waiting"])
        self.assertEqual(rows[("RELEASE", "waiting")], ["pending"])
        self.assertEqual(rows[("FORGET", "done")], ["(gone)"])

    def test_compaction_shows_the_new_generation(self) -> None:
        for action in ["enqueue", "enqueue", "lease", "ack", "compact"]:
            snap = self.pg.act(action)
        self.assertEqual(snap["log"]["path"], "default.000001.log")
        self.assertEqual([r["type"] for r in snap["log"]["records"]], ["JOB", "SNAPSHOT"])
        self.check_bytes_match(snap)

    def test_an_action_while_crashed_is_refused_in_the_event_list(self) -> None:
        self.pg.act("tear")
        snap = self.pg.act("enqueue")
        self.assertIn("press recover", snap["events"][-1])
        snap = self.pg.act("no-such-action")
        self.assertIn("unknown action", snap["events"][-1])


def _browser_missing() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright is not installed"
    if not os.path.exists(CHROMIUM):
        return f"{CHROMIUM} is missing"
    if not (SITE / "playground" / "pyodide" / "pyodide.asm.wasm").exists():
        return f"the docs site is not built in {SITE}"
    return None


_MISSING = _browser_missing()
# make.py test-playground sets this: there, a missing browser is a failure, not a skip.
_REQUIRED = os.environ.get("NOBROKER_REQUIRE_BROWSER") == "1"


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    extensions_map: ClassVar[dict[str, str]] = {
        **http.server.SimpleHTTPRequestHandler.extensions_map,
        ".mjs": "text/javascript", ".js": "text/javascript", ".wasm": "application/wasm",
        ".py": "text/plain"}

    def log_message(self, format: str, *args: Any) -> None:
        pass


@unittest.skipIf(_MISSING is not None and not _REQUIRED,
                 f"BROWSER TEST SKIPPED ({_MISSING}): run python3 make.py test-playground")
class BrowserTest(unittest.TestCase):
    """The built page in headless Chromium, served from 127.0.0.1, clicked through."""

    def setUp(self) -> None:
        if _MISSING is not None:
            self.fail(f"the browser test cannot run: {_MISSING}")
        handler = functools.partial(_QuietHandler, directory=str(SITE))
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        thread.start()
        self.addCleanup(self.server.server_close)
        self.addCleanup(self.server.shutdown)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.profile = tempfile.mkdtemp(prefix="nobroker-chromium-")
        self.addCleanup(shutil.rmtree, self.profile, True)

    @contextlib.contextmanager
    def browser_page(self) -> Iterator[Any]:
        """A Chromium page that may fetch only from our server; checked on the way out."""
        from playwright.sync_api import Route, sync_playwright

        outside: list[str] = []
        problems: list[str] = []

        def only_local(route: Route) -> None:
            if urlsplit(route.request.url).hostname == "127.0.0.1":
                route.continue_()
            else:  # the site must work offline: anything else is a failure
                outside.append(route.request.url)
                route.abort()

        with sync_playwright() as p:
            context = p.chromium.launch_persistent_context(
                self.profile, executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS,
                viewport={"width": 1400, "height": 1000})
            try:
                context.route("**/*", only_local)
                page = context.new_page()
                page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
                page.on("console", lambda msg: problems.append(f"console: {msg.text}")
                        if msg.type == "error" else None)
                yield page
            finally:
                context.close()
        self.assertEqual(outside, [], "the page fetched something from outside 127.0.0.1")
        self.assertEqual(problems, [])

    def test_docs_home_links_to_the_playground_and_fetches_nothing_outside(self) -> None:
        with self.browser_page() as page:
            page.goto(f"{self.base}/index.html")
            self.assertIn("nobroker", page.title())
            page.click("nav >> text=Playground")
            page.wait_for_url("**/playground.html")
            page.click("text=Open the playground")
            page.wait_for_selector("#status[data-ready=yes]", timeout=READY_TIMEOUT_MS)

    def test_scenario_in_the_page_matches_the_python_reader(self) -> None:
        with self.browser_page() as page:
            page.goto(f"{self.base}/playground/index.html")
            page.wait_for_selector("#status[data-ready=yes]", timeout=READY_TIMEOUT_MS)
            self.assertIn("nobroker", page.inner_text("#status"))

            def click(action: str) -> dict[str, Any]:
                before = int(page.get_attribute("body", "data-actions") or 0)
                page.click(f"button[data-action={action}]")
                page.wait_for_function(
                    f"Number(document.body.dataset.actions) > {before}", timeout=30_000)
                return self.read_page(page)

            click("enqueue")
            click("enqueue")
            # A payload that would run script if it were ever rendered as HTML.
            hostile = "<img src=x onerror=document.title='pwned'>"
            page.fill("#payload", json.dumps({"x": hostile}))
            click("enqueue")
            page.fill("#payload", "")
            self.assertEqual(page.locator("#jobs img, #records img").count(), 0)
            self.assertIn(hostile, page.inner_text("#jobs"))
            self.assertNotEqual(page.title(), "pwned")
            for action in ["lease", "ack"]:
                shown = click(action)
            self.assertEqual(shown["stats"]["pending"], "2")
            self.assertEqual(shown["stats"]["done"], "1")
            self.assertEqual([t for _, t in shown["records"]],
                             ["ENQUEUE"] * 3 + ["LEASE", "ACK"])
            self.check_against_reader(shown)

            shown = click("tear")
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SCREENSHOTS / "playground-torn.png"), full_page=True)
            self.assertTrue(shown["crashed"])
            torn_offset = len(bytes.fromhex(shown["hex"]).rstrip(b"\0"))
            _, recovery = reopen_from_bytes(shown["log_path"], bytes.fromhex(shown["hex"]))
            # inspection marks what does not frame as a DAMAGED region (and a frame that
            # fails its CRC by its type number): either way, one row where the tear is.
            page_torn = [o for o, t in shown["records"] if t == "DAMAGED" or t.startswith("type")]
            self.assertEqual(len(page_torn), 1, shown["records"])
            self.assertIn(f"torn tail at offset {page_torn[0]}", recovery)
            self.assertGreater(torn_offset, page_torn[0])

            shown = click("recover")
            self.assertIn(f"torn tail at offset {page_torn[0]}", shown["recovery"])
            self.check_against_reader(shown)

            shown = click("compact")
            self.assertEqual(shown["log_path"], "default.000001.log")
            self.assertEqual(shown["stats"]["generation"], "1")
            self.assertEqual([t for _, t in shown["records"]], ["JOB", "JOB", "SNAPSHOT"])
            self.check_against_reader(shown)

            page.screenshot(path=str(SCREENSHOTS / "playground.png"), full_page=True)

    @staticmethod
    def read_page(page: Any) -> dict[str, Any]:
        """What the page shows, read from the DOM as a visitor would see it."""
        return page.evaluate("""() => ({
            hex: [...document.querySelectorAll('#hex .byte')].map(b => b.textContent).join(''),
            log_path: document.querySelector('#log-path').textContent,
            crashed: !document.querySelector('#crashed').hidden,
            recovery: document.querySelector('#recovery').textContent,
            stats: Object.fromEntries([...document.querySelectorAll('#stats dd')]
                .map(d => [d.id.replace('stat-', ''), d.textContent])),
            records: [...document.querySelectorAll('#records tbody tr')]
                .map(tr => [Number(tr.cells[0].textContent), tr.cells[1].textContent]),
            jobs: [...document.querySelectorAll('#jobs tbody tr')].map(tr => [
                tr.dataset.id, tr.dataset.state,
                Number(tr.cells[2].textContent.split('/')[0]),
                JSON.parse(tr.cells[3].textContent)]),
        })""")

    def check_against_reader(self, shown: dict[str, Any]) -> None:
        data = bytes.fromhex(shown["hex"])
        jobs, _ = reopen_from_bytes(shown["log_path"], data)
        self.assertEqual([list(j) for j in jobs], shown["jobs"])
        self.assertEqual(decoded_boundaries(data), [tuple(r) for r in shown["records"]])
        self.assertEqual(shown["stats"]["pending"],
                         str(sum(1 for job in jobs if job[1] == "pending")))


if __name__ == "__main__":
    unittest.main()
