"""The dashboard over a PostgreSQL URL: the same JSON API, the schema's queues, no password.

A Dashboard runs in this process against a fresh schema of the test server;
another `nobroker --url URL dashboard` runs as a real process for the banner.
Every response body and every line the process prints is checked for the
URL's password: the pages show the backend's redacted `location` only.
"""

from __future__ import annotations

import http.client
import json
import signal
import subprocess
import sys
import unittest
import urllib.parse
from typing import Any

from harness.postgres import drop_schema, fresh_schema_url, needs_postgres, open_queue
from harness.support import child_env

from nobroker.dashboard import Dashboard
from nobroker.dashboard.server import TOKEN_HEADER

TOKEN = "pg-dashboard-token-0123456789"


@needs_postgres
class PostgresDashboardTest(unittest.TestCase):
    def setUp(self) -> None:
        self.url = fresh_schema_url()
        self.addCleanup(drop_schema, self.url)
        self.password = urllib.parse.unquote(urllib.parse.urlsplit(self.url).password or "")
        with open_queue(self.url, "default", max_attempts=1) as q:
            q.enqueue({"n": 1})
            job = q.lease_one()
            assert job is not None
            q.nack(job, error="boom")  # max_attempts=1: dead
        with open_queue(self.url, "emails") as q:
            q.enqueue_many([{"to": i} for i in range(3)])
        self.dash = Dashboard(self.url, port=0, token=TOKEN, interval=0.1)
        self.dash.start()
        self.addCleanup(self.dash.close)
        self.bodies: list[bytes] = []

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        conn = http.client.HTTPConnection("127.0.0.1", self.dash.port, timeout=30)
        headers = {"Content-Type": "application/json", TOKEN_HEADER: TOKEN,
                   "Origin": f"http://127.0.0.1:{self.dash.port}"} if method == "POST" else {}
        try:
            conn.request(method, path, body=None if body is None else json.dumps(body),
                         headers=headers)
            response = conn.getresponse()
            data = response.read()
        finally:
            conn.close()
        self.bodies.append(data)
        is_json = response.headers.get("Content-Type", "").startswith("application/json")
        return response.status, json.loads(data) if is_json else data.decode()

    def assert_no_password(self, texts: list[str]) -> None:
        self.assertTrue(self.password)
        for text in texts:
            self.assertNotIn(self.password, text)

    def test_the_api_lists_the_schemas_queues_counts_and_requeues_over_a_url(self) -> None:
        status, overview = self.request("GET", "/api/overview")
        self.assertEqual(status, 200)
        self.assertIn("***", overview["directory"])
        names = [q["name"] for q in overview["queues"]]
        self.assertEqual(names, ["default", "emails"])  # listed from the schema
        by_name = {q["name"]: q for q in overview["queues"]}
        self.assertEqual(by_name["emails"]["stats"]["pending"], 3)
        self.assertEqual(by_name["default"]["stats"]["dead"], 1)
        self.assertFalse(by_name["default"]["features"]["compaction"])

        # A queue created after the start shows up (the listing is asked each time).
        with open_queue(self.url, "late") as q:
            q.enqueue({"late": True})
        status, late = self.request("GET", "/api/queues/late")
        self.assertEqual(status, 200)
        self.assertEqual(late["stats"]["pending"], 1)
        status, missing = self.request("GET", "/api/queues/nope")
        self.assertEqual((status, set(missing)), (404, {"error"}))

        status, answer = self.request("POST", "/api/queues/default/requeue", {})
        self.assertEqual((status, answer), (200, {"requeued": 1}))
        with open_queue(self.url, "default") as q:
            self.assertEqual((q.stats().pending, q.stats().dead), (1, 0))

        # What the backend lacks is refused in one line, not attempted.
        status, refused = self.request("GET", "/api/queues/default/jobs/x/records")
        self.assertEqual(status, 501)  # the page hides the job's records, saying so
        self.assertEqual(set(refused), {"error"})

        status, text = self.request("GET", "/metrics")
        self.assertEqual(status, 200)
        self.assertIn('nobroker_jobs{queue="emails",state="pending"} 3', text)
        self.assert_no_password([b.decode(errors="replace") for b in self.bodies])

    def test_the_cli_serves_a_url_and_never_prints_its_password(self) -> None:
        proc = subprocess.Popen([sys.executable, "-m", "nobroker", "--url", self.url,
                                 "--queue", "emails", "dashboard", "--port", "0",
                                 "--read-only"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=child_env())
        self.addCleanup(lambda: proc.poll() is None and proc.kill())
        assert proc.stdout is not None
        banner = proc.stdout.readline()
        self.assertTrue(banner.startswith("nobroker dashboard for postgresql://"), banner)
        address = urllib.parse.urlsplit(banner.rsplit(" ", 1)[1].strip())
        conn = http.client.HTTPConnection("127.0.0.1", address.port, timeout=30)
        conn.request("GET", "/api/overview")
        body = conn.getresponse().read().decode()
        conn.close()
        self.assertEqual([q["name"] for q in json.loads(body)["queues"]], ["default", "emails"])
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        self.assertEqual(proc.returncode, 0, err)
        self.assert_no_password([banner, out, err, body])


if __name__ == "__main__":
    unittest.main()
