"""The dashboard over real HTTP: every endpoint, the security checks, /metrics.

A Dashboard runs in this process on a free port of 127.0.0.1 against a real
queue directory; requests go through http.client with the headers spelled
out, so each check (token, CSRF, same origin, Host, read-only) is exercised
the way a browser or a script would meet it. Every refused change is
followed by a look at the queue's files: a refusal must change nothing.
The CLI's `dashboard` and `stats --watch` run as real processes.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import time
import unittest
import urllib.parse
from typing import Any, ClassVar

from harness.support import (
    REPO,
    SRC,
    TempDirTestCase,
    seed_limited_queue,
    tree_digest,
    wait_until,
)

from nobroker import Queue, chain, chord
from nobroker.dashboard import Dashboard
from nobroker.dashboard.handler import CSP, MAX_BODY, TOKEN_HEADER
from nobroker.tasks import RunningJob

TOKEN = "test-token-0123456789abcdef"
XSS = "<script>alert(1)</script>"
QUOTED_ID = 'he said "hi" <b>\'x\''
STATIC = SRC / "nobroker" / "dashboard" / "static"



METRIC_PAIR = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"'
METRIC_LINE = re.compile(rf"(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)"
                         rf"(?:\{{(?P<labels>{METRIC_PAIR}(?:,{METRIC_PAIR})*)\}})? (?P<value>\S+)")


class Response:
    def __init__(self, status: int, headers: http.client.HTTPMessage, body: bytes) -> None:
        self.status, self.headers, self.body = status, headers, body

    def json(self) -> Any:
        return json.loads(self.body)


class WebCase(TempDirTestCase):
    readonly: ClassVar[bool] = False

    def setUp(self) -> None:
        super().setUp()
        self.qdir = self.tmp / "queues"
        self.qdir.mkdir()
        self.seed()
        self.dash = Dashboard(str(self.qdir), port=0, token=TOKEN, readonly=self.readonly,
                              interval=0.1)
        self.dash.start()
        self.addCleanup(self.dash.close)
        self.origin = f"http://127.0.0.1:{self.dash.port}"

    def seed(self) -> None:
        with Queue(self.qdir, max_attempts=1) as q:
            q.enqueue({"n": 1, "html": XSS})
            q.enqueue({"n": 2}, job_id=QUOTED_ID)
            for _ in range(2):
                job = q.lease_one()
                assert job is not None
                q.nack(job, error=f"boom {XSS}")
            q.enqueue({"n": 3})
        with Queue(self.qdir, "emails") as q:
            q.enqueue_many([{"to": f"user{i}@example.com"} for i in range(120)])

    def request(self, method: str, path: str, body: bytes | str | None = None,
                headers: dict[str, str] | None = None) -> Response:
        conn = http.client.HTTPConnection("127.0.0.1", self.dash.port, timeout=30)
        try:
            data = body.encode() if isinstance(body, str) else body
            conn.request(method, path, body=data, headers=headers or {})
            response = conn.getresponse()
            return Response(response.status, response.headers, response.read())
        finally:
            conn.close()

    def get(self, path: str, **headers: str) -> Response:
        return self.request("GET", path, headers=headers)

    def post(self, path: str, body: Any = None, *, token: str | None = TOKEN,
             origin: str | None = "", content_type: str = "application/json",
             extra: dict[str, str] | None = None) -> Response:
        headers = {"Content-Type": content_type}
        if token is not None:
            headers[TOKEN_HEADER] = token
        if origin is not None:
            headers["Origin"] = origin or self.origin
        headers.update(extra or {})
        data = body if isinstance(body, (bytes, str)) else json.dumps(body or {})
        return self.request("POST", path, data, headers)

    def assertRefused(self, response: Response, status: int, phrase: str) -> None:
        self.assertEqual(response.status, status, response.body)
        self.assertEqual(response.headers["Content-Type"], "application/json")
        text = response.body.decode()
        self.assertEqual(text.count("\n"), 1, "a refusal is one line")
        self.assertNotIn("Traceback", text)
        self.assertIn(phrase, response.json()["error"])

    def files(self) -> dict[str, tuple[int, str]]:
        return tree_digest(self.qdir)

    def parse_metrics(self, text: str) -> dict[tuple[str, str], float]:
        """A strict reading of the text format: every line is HELP, TYPE or a sample of a
        family whose TYPE came first; values are numbers."""
        self.assertTrue(text.endswith("\n"))
        types: dict[str, str] = {}
        samples: dict[tuple[str, str], float] = {}
        for line in text.splitlines():
            if line.startswith("# HELP "):
                self.assertRegex(line, r"^# HELP [a-zA-Z_:][a-zA-Z0-9_:]* \S")
            elif line.startswith("# TYPE "):
                _, _, name, kind = line.split(" ")
                self.assertIn(kind, ("gauge", "counter"))
                self.assertNotIn(name, types, "one TYPE per family")
                types[name] = kind
            else:
                match = METRIC_LINE.fullmatch(line)
                self.assertIsNotNone(match, f"not a sample line: {line!r}")
                assert match is not None
                name = match.group("name")
                self.assertIn(name, types, f"{name} sampled before its TYPE")
                if types[name] == "counter":
                    self.assertTrue(name.endswith("_total"))
                key = (name, match.group("labels") or "")
                self.assertNotIn(key, samples, "a sample twice")
                samples[key] = float(match.group("value"))
        return samples


def served_index() -> bytes:
    """index.html as served: each file it names carries a hash of its bytes (?v=)."""
    index = (STATIC / "index.html").read_bytes()
    for name in ("app.js", "app.css", "favicon.svg"):
        digest = hashlib.sha256((STATIC / name).read_bytes()).hexdigest()[:16]
        index = index.replace(f'"/static/{name}"'.encode(),
                              f'"/static/{name}?v={digest}"'.encode())
    assert index.count(b"?v=") == 3
    return index


def _q(text: str) -> str:
    return urllib.parse.quote(text, safe="")


class PagesTest(WebCase):
    def test_every_page_path_serves_the_same_static_page_with_a_strict_csp(self) -> None:
        index = served_index()
        for path in ("/", "/q/default", f"/q/{_q(XSS)}", f"/q/default/job/{_q(QUOTED_ID)}"):
            with self.subTest(path=path):
                response = self.get(path)
                self.assertEqual(response.status, 200)
                self.assertEqual(response.body, index, "no data is ever baked into the page")
                self.assertEqual(response.headers["Content-Security-Policy"], CSP)
                self.assertEqual(response.headers["X-Content-Type-Options"], "nosniff")
        self.assertNotIn("unsafe", CSP)
        self.assertIn("script-src 'self'", CSP)
        self.assertIn("frame-ancestors 'none'", CSP)

    def test_static_files_are_the_package_data_and_the_page_has_no_inline_script(self) -> None:
        for name, kind in (("app.js", "text/javascript"), ("app.css", "text/css")):
            response = self.get(f"/static/{name}")
            self.assertEqual(response.status, 200)
            self.assertEqual(response.headers["Cache-Control"], "no-cache")
            self.assertIn("immutable", self.get(f"/static/{name}?v=1").headers["Cache-Control"])
            self.assertTrue(response.headers["Content-Type"].startswith(kind))
            self.assertEqual(response.body, (STATIC / name).read_bytes())
        index = (STATIC / "index.html").read_text()
        self.assertIsNone(re.search(r"<script(?![^>]*\bsrc=)", index), "inline script")
        self.assertNotRegex(index, r"\son[a-z]+\s*=", "inline event handler")
        self.assertNotRegex(index, r"https?://", "nothing fetched from elsewhere")
        script = (STATIC / "app.js").read_text()
        for banned in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write",
                       "eval(", "new Function"):
            self.assertFalse(banned in script, f"app.js uses {banned}")
        self.assertNotRegex(script, r"https?://(?!www\.w3\.org/2000/svg)")
        favicon = self.get("/favicon.ico")
        self.assertEqual((favicon.status, favicon.headers["Content-Type"]), (200, "image/svg+xml"))
        self.assertEqual(favicon.body, (STATIC / "favicon.svg").read_bytes())
        self.assertEqual(self.get("/static/../server.py").status, 404)
        self.assertEqual(self.get("/static/hub.py").status, 404)

    def test_unknown_paths_and_methods_get_one_line_refusals(self) -> None:
        self.assertRefused(self.get("/nope"), 404, "no page")
        self.assertRefused(self.get("/api/nope"), 404, "no API endpoint")
        self.assertRefused(self.get("/api/queues/default/nope"), 404, "no API endpoint")
        self.assertRefused(self.request("PUT", "/api/overview"), 405, "not allowed")
        self.assertRefused(self.request("DELETE", "/api/queues/default"), 405, "not allowed")
        preflight = self.request("OPTIONS", "/api/queues/default/requeue",
                                 headers={"Origin": "http://evil.example",
                                          "Access-Control-Request-Method": "POST"})
        self.assertRefused(preflight, 405, "not allowed")
        self.assertIsNone(preflight.headers["Access-Control-Allow-Origin"])
        self.assertRefused(self.get("/api/queues/%ff"), 400, "UTF-8")
        self.assertEqual(self.get("/healthz").json(), {"ok": True})


class ReadApiTest(WebCase):
    def test_overview_lists_every_queue_with_its_counts_and_paused_state(self) -> None:
        data = self.get("/api/overview").json()
        self.assertEqual(data["directory"], str(self.qdir))
        self.assertFalse(data["readonly"])
        queues = {q["name"]: q for q in data["queues"]}
        self.assertEqual(sorted(queues), ["default", "emails"])
        stats = queues["default"]["stats"]
        self.assertEqual((stats["pending"], stats["leased"], stats["dead"]), (1, 0, 2))
        self.assertEqual(stats["enqueued"], 3)
        self.assertEqual(stats["dead_lettered"], 2)
        self.assertFalse(queues["default"]["paused"])
        self.assertEqual(queues["emails"]["stats"]["pending"], 120)
        self.assertGreaterEqual(queues["emails"]["oldest_pending_age"], 0.0)

    def test_a_damaged_queue_is_reported_and_the_others_still_served(self) -> None:
        (self.qdir / "broken.000000.log").write_bytes(b"this is not a nobroker log" * 10)
        queues = {q["name"]: q for q in self.get("/api/overview").json()["queues"]}
        self.assertIn("error", queues["broken"])
        self.assertEqual(queues["emails"]["stats"]["pending"], 120)
        self.assertRefused(self.get("/api/queues/broken/jobs"), 409, "")
        samples = self.parse_metrics(self.get("/metrics").body.decode())
        self.assertEqual(samples[("nobroker_up", 'queue="broken"')], 0)
        self.assertEqual(samples[("nobroker_up", 'queue="emails"')], 1)

    def test_a_queue_made_after_the_start_appears(self) -> None:
        Queue(self.qdir, "later").close()
        names = [q["name"] for q in self.get("/api/overview").json()["queues"]]
        self.assertIn("later", names)

    def test_queue_summary_and_unknown_queue(self) -> None:
        summary = self.get("/api/queues/emails").json()
        self.assertEqual(summary["name"], "emails")
        self.assertEqual(summary["stats"]["total"], 120)
        self.assertTrue(summary["features"]["requeue_dead"])
        self.assertTrue(summary["features"]["inspection"])
        self.assertEqual(summary["features"]["pause"], hasattr(Queue, "pause"))
        for path in ("/api/queues/missing", "/api/queues/missing/jobs",
                     "/api/queues/missing/series", f"/api/queues/{_q(XSS)}/jobs/x",
                     "/api/events?queue=missing"):
            with self.subTest(path=path):
                self.assertRefused(self.get(path), 404, "no queue named")

    def test_jobs_are_paged_in_enqueue_order_and_filtered_by_state(self) -> None:
        page = self.get("/api/queues/emails/jobs?offset=50&limit=50").json()
        self.assertEqual(page["total"], 120)
        self.assertEqual([j["payload"]["to"] for j in page["jobs"]],
                         [f"user{i}@example.com" for i in range(50, 100)])
        last = self.get("/api/queues/emails/jobs?offset=100&limit=50").json()
        self.assertEqual(len(last["jobs"]), 20)
        past = self.get("/api/queues/emails/jobs?offset=500").json()
        self.assertEqual(past["jobs"], [])
        dead = self.get("/api/queues/default/jobs?state=dead").json()
        self.assertEqual(dead["total"], 2)
        self.assertEqual({j["id"] for j in dead["jobs"]}, {"0000000000000000", QUOTED_ID})
        self.assertTrue(all(j["state"] == "dead" for j in dead["jobs"]))
        pending = self.get("/api/queues/default/jobs?state=pending").json()
        self.assertEqual([j["payload"] for j in pending["jobs"]], [{"n": 3}])

    def test_bad_paging_arguments_are_400(self) -> None:
        for query, phrase in (("state=done", "state must be"), ("state=x", "state must be"),
                              ("limit=501", "limit must be"), ("limit=-1", "limit must be"),
                              ("offset=-3", "offset must be"), ("offset=abc", "a number"),
                              ("limit=1.5", "whole number"), ("limit=nan", "finite"),
                              ("limit=1&limit=2", "more than once")):
            with self.subTest(query=query):
                self.assertRefused(self.get(f"/api/queues/emails/jobs?{query}"), 400, phrase)
        self.assertRefused(self.get("/api/queues/emails/series?step=0"), 400, "step")

    def test_job_page_data_has_every_field_and_its_log_records(self) -> None:
        answer = self.get(f"/api/queues/default/jobs/{_q(QUOTED_ID)}").json()
        job = answer["job"]
        self.assertEqual(job["id"], QUOTED_ID)
        self.assertEqual(job["state"], "dead")
        self.assertEqual(job["attempts"], 1)
        self.assertEqual(job["last_error"], f"boom {XSS}")
        self.assertEqual(job["payload"], {"n": 2})
        for key in ("enqueued_at", "available_at", "result", "finished_at", "priority"):
            self.assertIn(key, job)
        records = self.get(f"/api/queues/default/jobs/{_q(QUOTED_ID)}/records").json()
        self.assertEqual([r["type"] for r in records["records"]], ["ENQUEUE", "LEASE", "NACK"])
        self.assertTrue(all(r["payload"]["id"] == QUOTED_ID for r in records["records"]))
        self.assertGreaterEqual(records["records_scanned"], 7)

    def test_job_page_data_has_its_workflow_parents_children_and_progress(self) -> None:
        with Queue(self.qdir, "flow") as queue:
            add = queue.task(lambda a, b: a + b, name="add")
            tsum = queue.task(lambda values: sum(values), name="tsum")
            last = chain(add.s(1, 1), add.s(2)).delay()
            callback = chord([add.s(i, i) for i in range(3)], tsum.s()).delay()
            prerequisite = queue.enqueue({"n": 1})
            waiting = queue.enqueue({"n": 2}, depends_on=prerequisite).id
            done = queue.lease_one()  # the chain's first step
            assert done is not None
            queue.ack(done, result=2)
        members = [r.id for r in callback.parent.results]

        def workflow(job_id: str) -> Any:
            return self.get(f"/api/queues/flow/jobs/{_q(job_id)}").json()["workflow"]

        self.assertEqual(workflow(last.id), {"parents": [done.id], "children": [],
                                             "children_complete": True})
        self.assertEqual(workflow(callback.id)["progress"], {"done": 0, "total": 3})
        self.assertEqual(workflow(callback.id)["parents"], members)
        self.assertEqual(workflow(members[2])["children"], [callback.id])
        self.assertEqual(workflow(prerequisite.id)["children"], [waiting])
        self.assertEqual(workflow(waiting)["parents"], [prerequisite.id])
        self.assertEqual(workflow(done.id), {"parents": [], "children": [last.id],
                                             "children_complete": True}, "done, still named")
        self.assertIsNone(self.get(f"/api/queues/default/jobs/{_q(QUOTED_ID)}").json()[
            "workflow"], "a job in no workflow has none")

    def test_unknown_job_is_404_and_its_id_comes_back_as_json_text(self) -> None:
        odd = 'no "such" <job>'
        response = self.get(f"/api/queues/default/jobs/{_q(odd)}")
        self.assertRefused(response, 404, "no job")
        self.assertIn(repr(odd), response.json()["error"])
        self.assertNotIn(b"<", response.body, "markup characters are escaped even in JSON")

    def test_xss_payload_is_returned_as_a_json_string_never_markup(self) -> None:
        response = self.get("/api/queues/default/jobs?state=dead")
        self.assertEqual(response.headers["Content-Type"], "application/json")
        self.assertEqual(response.headers["X-Content-Type-Options"], "nosniff")
        payloads = [j["payload"] for j in response.json()["jobs"]]
        self.assertIn({"n": 1, "html": XSS}, payloads)
        self.assertNotIn(b"<script", response.body)
        self.assertIn(b"\\u003cscript\\u003e", response.body)

    def test_series_counts_enqueued_succeeded_and_dead_lettered_per_interval(self) -> None:
        hub = self.dash.hub
        hub.sample()
        with Queue(self.qdir, "emails") as q:
            q.enqueue_many([{"more": i} for i in range(7)])
            for job in q.lease(5):
                q.ack(job)
        hub.sample()
        series = self.get("/api/queues/emails/series?step=10").json()
        self.assertEqual(series["step"], 10)
        self.assertEqual(len(series["enqueued"]), 90)
        self.assertEqual(sum(series["enqueued"]), 7)
        self.assertEqual(sum(series["succeeded"]), 5)
        self.assertEqual(sum(series["dead_lettered"]), 0)
        self.assertEqual(series["enqueued"][-1], 7, "counted in the newest bucket")

    def test_event_stream_sends_the_counts_again_after_a_change(self) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.dash.port, timeout=30)
        self.addCleanup(conn.close)
        conn.request("GET", "/api/events?queue=emails")
        response = conn.getresponse()
        self.assertEqual(response.status, 200)
        self.assertTrue(response.headers["Content-Type"].startswith("text/event-stream"))

        def next_event() -> dict[str, Any]:
            lines: list[str] = []
            while True:
                line = response.readline().decode().rstrip("\n")
                if line == "" and any(x.startswith("data: ") for x in lines):
                    data = next(x for x in lines if x.startswith("data: "))[6:]
                    return dict(json.loads(data))
                if line:
                    lines.append(line)

        first = next_event()
        self.assertEqual(first["queue"]["stats"]["pending"], 120)
        self.assertIn("series", first)
        with Queue(self.qdir, "emails") as q:
            q.enqueue({"late": True})
        wait_until(lambda: next_event()["queue"]["stats"]["pending"] == 121, 30.0,
                   "an update")


class ProgressAndWaitingTest(WebCase):
    """A job's progress and metadata (current_job().progress / set_meta), and the jobs
    waiting for prerequisites: in the job list, on the job page's data, in /metrics."""

    def seed(self) -> None:
        super().seed()
        with Queue(self.qdir, "reports") as q:
            first = q.enqueue({"report": "sales"})
            q.enqueue({"report": "summary"}, job_id="summary", depends_on=[first.id])
            q.enqueue({"report": "running"}, job_id="running", priority=9)
            leased = q.lease_one()
            assert leased is not None and leased.id == "running"
            note = "page 40 of 100 " + "x" * 300
            running = RunningJob(leased, q.backend)
            running.set_meta({"pages": 100, "html": XSS})
            running.progress(0.4, note)
            running.flush()
            self.first_id = first.id

    def test_the_job_page_data_carries_progress_metadata_and_what_it_waits_for(self) -> None:
        job = self.get("/api/queues/reports/jobs/running").json()["job"]
        self.assertEqual(job["progress"], {"fraction": 0.4,
                                           "note": "page 40 of 100 " + "x" * 300})
        self.assertEqual(job["meta"], {"pages": 100, "html": XSS})
        self.assertEqual(job["waiting_for"], [])
        waiting = self.get("/api/queues/reports/jobs/summary").json()["job"]
        self.assertEqual((waiting["state"], waiting["waiting_for"], waiting["progress"]),
                         ("waiting", [self.first_id], None))
        self.assertNotIn(b"<script>", self.get("/api/queues/reports/jobs/running").body)

    def test_the_job_list_shows_progress_and_lists_waiting_jobs(self) -> None:
        page = self.get("/api/queues/reports/jobs").json()
        self.assertEqual(page["total"], 3)
        listed = {j["id"]: j for j in page["jobs"]}
        self.assertEqual(listed["running"]["progress"]["fraction"], 0.4)
        self.assertLessEqual(len(listed["running"]["progress"]["note"]), 80, "clipped")
        self.assertNotIn("meta", listed["running"], "the metadata is the job page's")
        self.assertEqual(listed["summary"]["waiting_for"], [self.first_id])
        waiting = self.get("/api/queues/reports/jobs?state=waiting").json()
        self.assertEqual((waiting["total"], [j["id"] for j in waiting["jobs"]]),
                         (1, ["summary"]))
        self.assertEqual(self.get("/api/queues/emails/jobs?state=waiting").json()["total"], 0)

    def test_metrics_count_the_waiting_jobs(self) -> None:
        samples = self.parse_metrics(self.get("/metrics").body.decode())
        self.assertEqual(samples[("nobroker_jobs", 'queue="reports",state="waiting"')], 1)
        self.assertEqual(samples[("nobroker_jobs", 'queue="reports",state="pending"')], 1)
        self.assertEqual(samples[("nobroker_jobs", 'queue="emails",state="waiting"')], 0)

    def test_the_page_lists_the_waiting_state_and_follows_a_running_job(self) -> None:
        script = (STATIC / "app.js").read_text("utf-8")
        self.assertIn('const STATES = ["", "pending", "leased", "waiting", "dead"];', script)
        self.assertIn("function followJob(", script)  # the job page re-reads an unfinished job
        self.assertIn('el("pre", {id: "meta"}', script)


class LimitsViewTest(WebCase):
    """The limits view: each rate and concurrency key's use / limit in a queue's summary
    (the queue page and the event stream), read by a dashboard that declares nothing."""

    def seed(self) -> None:
        super().seed()
        self.held_at = seed_limited_queue(self.qdir, XSS)

    def test_a_queue_summary_lists_each_keys_use_and_its_recorded_limit(self) -> None:
        limits = self.get("/api/queues/limited").json()["limits"]
        by_key = {(u["kind"], u["key"], u["value"]): u for u in limits}
        self.assertEqual(set(by_key), {("rate", "", None), ("rate", "rated", None),
                                       ("concurrency", "capped", XSS)})
        queue_rate, rated = by_key["rate", "", None], by_key["rate", "rated", None]
        self.assertEqual((queue_rate["used"], queue_rate["limit"], queue_rate["period"],
                          queue_rate["opens_at"]), (3, 100, 60.0, None))
        self.assertEqual((rated["used"], rated["limit"], rated["period"]), (2, 2, 3600.0))
        self.assertAlmostEqual(rated["opens_at"], self.held_at + 3600.0, delta=60.0)
        capped = by_key["concurrency", "capped", XSS]
        self.assertEqual((capped["used"], capped["limit"]), (1, 1),
                         "a concurrency key's cap as its enqueuer stored it with the job")
        self.assertEqual(self.get("/api/queues/emails").json()["limits"], [])
        self.assertNotIn(b"<script>", self.get("/api/queues/limited").body)
        overview = {q["name"]: q for q in self.get("/api/overview").json()["queues"]}
        self.assertEqual(overview["limited"]["limits"], limits)

    def test_the_page_draws_the_limits_view(self) -> None:
        script = (STATIC / "app.js").read_text("utf-8")
        self.assertIn("function drawLimits(", script)
        self.assertIn("drawLimits(summary.limits || [])", script)
        self.assertIn('"in use / limit"', script)


class MetricsTest(WebCase):
    def test_metrics_are_valid_exposition_text_with_the_right_numbers(self) -> None:
        response = self.get("/metrics")
        self.assertEqual(response.status, 200)
        self.assertTrue(response.headers["Content-Type"].startswith("text/plain; version=0.0.4"))
        samples = self.parse_metrics(response.body.decode())
        self.assertEqual(samples[("nobroker_jobs", 'queue="default",state="dead"')], 2)
        self.assertEqual(samples[("nobroker_jobs", 'queue="default",state="pending"')], 1)
        self.assertEqual(samples[("nobroker_jobs", 'queue="emails",state="pending"')], 120)
        self.assertEqual(samples[("nobroker_enqueued_total", 'queue="default"')], 3)
        self.assertEqual(samples[("nobroker_dead_lettered_total", 'queue="default"')], 2)
        self.assertEqual(samples[("nobroker_retried_total", 'queue="default"')], 0)
        self.assertEqual(samples[("nobroker_succeeded_total", 'queue="emails"')], 0)
        self.assertEqual(samples[("nobroker_paused", 'queue="emails"')], 0)
        self.assertEqual(samples[("nobroker_up", 'queue="emails"')], 1)
        self.assertGreater(samples[("nobroker_log_bytes", 'queue="emails"')], 0)
        self.assertGreaterEqual(samples[("nobroker_oldest_pending_age_seconds",
                                         'queue="emails"')], 0)

    def test_counters_follow_the_queue_and_survive_compaction_and_reopening(self) -> None:
        with Queue(self.qdir, "emails", max_attempts=2) as q:
            for job in q.lease(3, visibility_timeout=60):
                q.nack(job, delay=0)
            for job in q.lease(2, visibility_timeout=60):
                q.ack(job)
            q.compact()
        samples = self.parse_metrics(self.get("/metrics").body.decode())
        self.assertEqual(samples[("nobroker_retried_total", 'queue="emails"')], 3)
        self.assertEqual(samples[("nobroker_succeeded_total", 'queue="emails"')], 2)
        self.assertEqual(samples[("nobroker_enqueued_total", 'queue="emails"')], 120)
        with Queue(self.qdir, "emails") as fresh:
            stats = fresh.stats()
        self.assertEqual((stats.enqueued, stats.retried, stats.dead_lettered, stats.done),
                         (120, 3, 0, 2))


class ChangeApiTest(WebCase):
    def test_requeue_one_then_all_lands_in_the_log(self) -> None:
        answer = self.post("/api/queues/default/requeue", {"id": QUOTED_ID})
        self.assertEqual(answer.status, 200, answer.body)
        self.assertEqual(answer.json(), {"requeued": 1})
        with Queue(self.qdir, readonly=True) as q:
            self.assertEqual(q.get(QUOTED_ID).state, "pending")
            self.assertEqual(q.stats().dead, 1)
        self.assertEqual(self.post("/api/queues/default/requeue", {"id": None}).json(),
                         {"requeued": 1})
        with Queue(self.qdir, readonly=True) as q:
            self.assertEqual(q.stats().dead, 0)
        self.assertRefused(self.post("/api/queues/default/requeue", {"id": QUOTED_ID}),
                           404, "dead job")

    def test_compaction_reports_what_it_did(self) -> None:
        before = self.get("/api/queues/default").json()["stats"]
        self.assertLess(before["live_bytes"], before["log_bytes"])
        answer = self.post("/api/queues/default/compact").json()["compaction"]
        self.assertEqual(answer["bytes_before"], before["log_bytes"])
        self.assertLess(answer["bytes_after"], answer["bytes_before"])
        with Queue(self.qdir, readonly=True) as q:
            self.assertEqual(q.generation, answer["new_generation"])

    @unittest.skipUnless(hasattr(Queue, "pause"), "Queue.pause is not in this engine yet")
    def test_pause_and_resume(self) -> None:
        self.assertEqual(self.post("/api/queues/emails/pause").json(), {"paused": True})
        with Queue(self.qdir, "emails", readonly=True) as q:
            self.assertTrue(q.stats().paused)
        self.assertTrue(self.get("/api/queues/emails").json()["paused"])
        self.assertEqual(self.post("/api/queues/emails/resume").json(), {"paused": False})

    @unittest.skipUnless(hasattr(Queue, "cancel"), "Queue.cancel is not in this engine yet")
    def test_cancel(self) -> None:
        answer = self.post("/api/queues/emails/cancel", {"id": "0000000000000000"})
        self.assertEqual(answer.json(), {"cancelled": True})
        self.assertRefused(self.post("/api/queues/emails/cancel", {}), 400, "'id'")

    @unittest.skipUnless(hasattr(Queue, "delete_dead"), "Queue.delete_dead is not here yet")
    def test_delete_dead_one_and_all(self) -> None:
        self.assertEqual(self.post("/api/queues/default/delete-dead", {"id": QUOTED_ID}).json(),
                         {"deleted": 1})
        self.assertEqual(self.post("/api/queues/default/delete-dead", {}).json(),
                         {"deleted": 1})
        with Queue(self.qdir, readonly=True) as q:
            self.assertEqual(q.stats().dead, 0)

    def test_controls_the_engine_lacks_are_reported_absent_and_refused(self) -> None:
        features = self.get("/api/queues/default").json()["features"]
        for action, feature in (("pause", "pause"), ("cancel", "cancel"),
                                ("delete-dead", "delete_dead")):
            if features[feature]:
                continue
            before = self.files()
            self.assertRefused(self.post(f"/api/queues/default/{action}", {"id": "x"}),
                               501, "has no")
            self.assertEqual(self.files(), before)

    def test_unknown_action_and_unknown_queue(self) -> None:
        self.assertRefused(self.post("/api/queues/default/explode"), 404, "no action")
        self.assertRefused(self.post("/api/queues/missing/requeue"), 404, "no queue")
        self.assertRefused(self.post("/api/queues/default"), 404, "no API endpoint")


class SecurityTest(WebCase):
    def assertChangeRefused(self, response: Response, status: int, phrase: str) -> None:
        self.assertRefused(response, status, phrase)

    def test_every_refused_change_leaves_the_files_alone(self) -> None:
        before = self.files()
        path = "/api/queues/default/requeue"
        cases = [
            ("no token", self.post(path, token=None), 403, "needs the dashboard's token"),
            ("wrong token", self.post(path, token=TOKEN + "x"), 403, "token is wrong"),
            ("token in the query", self.post(f"{path}?token={TOKEN}", token=None), 403,
             "needs the dashboard's token"),
            ("token as a cookie", self.post(path, token=None,
                                            extra={"Cookie": f"token={TOKEN}"}), 403,
             "needs the dashboard's token"),
            ("a form post", self.post(path, "id=x", content_type=
                                      "application/x-www-form-urlencoded"), 415,
             "application/json"),
            ("text/plain", self.post(path, "{}", content_type="text/plain"), 415,
             "application/json"),
            ("another origin", self.post(path, origin="http://evil.example"), 403,
             "cross-origin"),
            ("a null origin", self.post(path, origin="null"), 403, "cross-origin"),
            ("another port", self.post(path, origin="http://127.0.0.1:1"), 403, "cross-origin"),
            ("cross-site fetch", self.post(path, origin=None,
                                           extra={"Sec-Fetch-Site": "cross-site"}), 403,
             "cross-site"),
            ("rebinding Host", self.post(path, origin=None,
                                         extra={"Host": f"evil.example:{self.dash.port}"}),
             403, "not this dashboard's address"),
        ]
        for label, response, status, phrase in cases:
            with self.subTest(label):
                self.assertChangeRefused(response, status, phrase)
        self.assertEqual(self.files(), before)
        self.assertEqual(self.post(path, {"id": QUOTED_ID}).status, 200, "the control")
        self.assertNotEqual(self.files(), before)

    def test_a_script_without_an_origin_header_may_change_with_the_token(self) -> None:
        answer = self.post("/api/queues/default/requeue", {"id": None}, origin=None)
        self.assertEqual(answer.json(), {"requeued": 2})

    def test_reads_from_a_rebinding_host_are_refused_too(self) -> None:
        for path in ("/", "/api/overview", "/metrics"):
            with self.subTest(path=path):
                self.assertRefused(self.get(path, Host="attacker.example"), 403,
                                   "not this dashboard's address")
        self.assertEqual(self.get("/api/overview", Host=f"localhost:{self.dash.port}").status,
                         200)

    def test_get_never_changes_anything(self) -> None:
        before = self.files()
        for path in ("/api/queues/default/requeue", "/api/queues/default/compact"):
            self.assertEqual(self.get(path).status, 404)
        self.assertEqual(self.files(), before)

    def test_malformed_bodies_get_one_line_4xx(self) -> None:
        before = self.files()
        path = "/api/queues/default/requeue"
        for body, status, phrase in (
                ("{", 400, "not JSON"), ("[1, 2]", 400, "JSON object"),
                ('"id"', 400, "JSON object"), (b"\xff\xfe", 400, "not JSON"),
                ('{"id": 5}', 400, "'id' must be"), ('{"id": ""}', 400, "'id' must be"),
                ('{"id": null, "all": true}', 400, "unknown field"),
                ("x" * (MAX_BODY + 1), 413, "larger than")):
            with self.subTest(body=body[:20]):
                self.assertRefused(self.post(path, body), status, phrase)
        conn = http.client.HTTPConnection("127.0.0.1", self.dash.port, timeout=30)
        self.addCleanup(conn.close)
        conn.putrequest("POST", path)
        for key, value in (("Content-Type", "application/json"), (TOKEN_HEADER, TOKEN),
                           ("Transfer-Encoding", "chunked")):
            conn.putheader(key, value)
        conn.endheaders()
        conn.send(b"2\r\n{}\r\n0\r\n\r\n")
        response = conn.getresponse()
        self.assertEqual(response.status, 411)
        self.assertEqual(self.files(), before)

    def test_an_ipv6_loopback_dashboard_checks_its_bracketed_host(self) -> None:
        try:
            dash = Dashboard(str(self.qdir), host="::1", port=0, token=TOKEN)
        except OSError as exc:
            self.skipTest(f"no IPv6 loopback here: {exc}")
        dash.start()
        self.addCleanup(dash.close)
        self.assertEqual(dash.url, f"http://[::1]:{dash.port}/")
        conn = http.client.HTTPConnection("::1", dash.port, timeout=30)
        self.addCleanup(conn.close)
        conn.request("GET", "/api/overview")
        response = conn.getresponse()
        self.assertEqual(response.status, 200, response.read())
        response.read()
        conn.request("GET", "/api/overview", headers={"Host": f"evil.example:{dash.port}"})
        self.assertEqual(conn.getresponse().status, 403)

    def test_a_short_token_from_the_environment_is_refused(self) -> None:
        with self.assertRaisesRegex(ValueError, "at least 16"):
            Dashboard(str(self.qdir), port=0, token="short")


class ReadOnlyTest(WebCase):
    readonly = True

    def test_a_read_only_dashboard_leaves_the_directory_as_it_found_it(self) -> None:
        self.dash.close()
        before = self.files()
        dash = Dashboard(str(self.qdir), port=0, readonly=True, interval=0.05)
        dash.start()
        conn = http.client.HTTPConnection("127.0.0.1", dash.port, timeout=30)
        for path in ("/api/overview", "/api/queues/default/jobs?state=dead",
                     f"/api/queues/default/jobs/{_q(QUOTED_ID)}/records", "/metrics"):
            conn.request("GET", path)
            self.assertEqual(conn.getresponse().read()[:1], b"{" if "api" in path else b"#")
        conn.close()
        dash.close()
        self.assertEqual(self.files(), before)

    def test_read_only_refuses_every_change_even_with_the_token(self) -> None:
        before = self.files()
        for action in ("requeue", "compact", "pause", "resume", "cancel", "delete-dead"):
            with self.subTest(action=action):
                self.assertRefused(self.post(f"/api/queues/default/{action}", {"id": "x"}),
                                   403, "read-only")
        self.assertEqual(self.files(), before)
        data = self.get("/api/overview").json()
        self.assertTrue(data["readonly"])
        self.assertEqual(data["queues"][0]["stats"]["dead"], 2)


# -- the command line, as real processes --------------------------------------

def cli_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NOBROKER_DIR",)}
    env["PYTHONPATH"] = str(SRC)
    env.update(extra)
    return env


def read_line(proc: subprocess.Popen[str], prefix: str, timeout: float = 60.0) -> str:
    """The first line of the process's stdout that starts with `prefix`."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise AssertionError(f"the process ended (code {proc.poll()}) before {prefix!r}")
        if line.startswith(prefix):
            return line.rstrip("\n")
    raise AssertionError(f"no line starting with {prefix!r} within {timeout:g}s")


class CliTest(TempDirTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.qdir = self.tmp / "q"
        with Queue(self.qdir) as q:
            q.enqueue({"hello": XSS})

    def start(self, *args: str, argv0: list[str] | None = None,
              **env: str) -> subprocess.Popen[str]:
        cmd = (argv0 or [sys.executable, "-m", "nobroker"]) + ["--dir", str(self.qdir), *args]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=cli_env(**env), cwd=self.tmp)
        self.addCleanup(self.reap, proc)
        return proc

    @staticmethod
    def reap(proc: subprocess.Popen[str]) -> None:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=30)

    def fetch(self, url: str, path: str) -> tuple[int, bytes]:
        parts = urllib.parse.urlsplit(url)
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
        try:
            conn.request("GET", path)
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()

    def test_dashboard_prints_its_url_and_token_and_stops_on_sigterm(self) -> None:
        proc = self.start("dashboard", "--port", "0")
        url = read_line(proc, "nobroker dashboard for").rsplit(" ", 1)[1]
        self.assertTrue(url.startswith("http://127.0.0.1:"), url)
        hint = read_line(proc, "open ")
        token = read_line(proc, "token: ").split(" ", 1)[1]
        self.assertIn(f"#token={token}", hint)
        self.assertGreaterEqual(len(token), 16)
        status, body = self.fetch(url, "/api/overview")
        self.assertEqual(status, 200)
        self.assertEqual(json.loads(body)["queues"][0]["stats"]["pending"], 1)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        self.assertEqual(proc.returncode, 0, err)

    def test_dashboard_takes_its_token_from_the_environment_and_refuses_a_short_one(self) -> None:
        proc = self.start("dashboard", "--port", "0",
                          NOBROKER_DASHBOARD_TOKEN="from-the-environment-123")
        self.assertEqual(read_line(proc, "token: "), "token: from-the-environment-123")
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
        self.assertEqual(proc.returncode, 0)
        short = subprocess.run([sys.executable, "-m", "nobroker", "--dir", str(self.qdir),
                                "dashboard", "--port", "0"], capture_output=True, text=True,
                               env=cli_env(NOBROKER_DASHBOARD_TOKEN="short"), timeout=60)
        self.assertEqual(short.returncode, 2)
        self.assertEqual(short.stderr.count("\n"), 1)
        self.assertIn("at least 16", short.stderr)

    def test_dashboard_read_only_says_so_and_prints_no_token(self) -> None:
        proc = self.start("dashboard", "--port", "0", "--read-only")
        read_line(proc, "nobroker dashboard for")
        self.assertEqual(read_line(proc, "read-only"), "read-only: every change is refused")
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
        self.assertNotIn("token", out)
        self.assertEqual(proc.returncode, 0)

    def test_dashboard_bad_arguments_are_one_line_errors(self) -> None:
        for args, phrase in ((["dashboard", "--port", "70000"], "0-65535"),
                             (["dashboard", "--port", "x"], "not a port")):
            run = subprocess.run([sys.executable, "-m", "nobroker", "--dir", str(self.qdir),
                                  *args], capture_output=True, text=True, env=cli_env(),
                                 timeout=60)
            self.assertEqual(run.returncode, 2)
            self.assertIn(phrase, run.stderr)
            self.assertNotIn("Traceback", run.stderr)
        missing = subprocess.run([sys.executable, "-m", "nobroker", "--dir",
                                  str(self.tmp / "nowhere"), "dashboard", "--port", "0"],
                                 capture_output=True, text=True, env=cli_env(), timeout=60)
        self.assertEqual(missing.returncode, 1)
        self.assertIn("no queue directory", missing.stderr)
        self.assertFalse((self.tmp / "nowhere").exists())

    def test_stats_watch_redraws_until_sigint(self) -> None:
        proc = self.start("stats", "--watch")
        read_line(proc, "-- ")
        with Queue(self.qdir) as q:
            q.enqueue_many([{"i": i} for i in range(5)])
        assert proc.stdout is not None
        lines: list[str] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line.rstrip("\n"))
            frames = sum(x.startswith("-- ") for x in lines)
            if frames >= 3 and any(re.fullmatch(r"\s+pending\s+6", x) for x in lines):
                break
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        lines += out.splitlines()
        self.assertEqual(proc.returncode, 0, err)
        self.assertNotIn("Traceback", err)
        self.assertGreaterEqual(sum(x.startswith("-- ") for x in lines), 3, "redrawn")
        self.assertTrue(any(re.fullmatch(r"\s+pending\s+6", x) for x in lines),
                        "a later frame shows the new count")
        self.assertTrue(any(re.fullmatch(r"\s+enqueued\s+6\s+\d+\.\d/s", x) for x in lines),
                        "a rate once two frames exist")

    def test_stats_watch_with_json_is_a_usage_error(self) -> None:
        run = subprocess.run([sys.executable, "-m", "nobroker", "--dir", str(self.qdir),
                              "stats", "--watch", "--json"], capture_output=True, text=True,
                             env=cli_env(), timeout=60)
        self.assertEqual(run.returncode, 2)
        self.assertIn("--json", run.stderr)

    def test_the_pyz_serves_the_page_from_inside_the_archive(self) -> None:
        pyz = self.tmp / "nobroker.pyz"
        build = subprocess.run([sys.executable, str(REPO / "tools" / "build" / "pyz.py"),
                                "--output", str(pyz)], capture_output=True, text=True,
                               timeout=120)
        self.assertEqual(build.returncode, 0, build.stderr)
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "NOBROKER_DIR")}
        proc = subprocess.Popen([sys.executable, str(pyz), "--dir", str(self.qdir), "dashboard",
                                 "--port", "0"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=env, cwd=self.tmp)
        self.addCleanup(self.reap, proc)
        url = read_line(proc, "nobroker dashboard for").rsplit(" ", 1)[1]
        for name in ("index.html", "app.js", "app.css"):
            path = "/" if name == "index.html" else f"/static/{name}"
            status, body = self.fetch(url, path)
            self.assertEqual(status, 200)
            self.assertEqual(body, served_index() if name == "index.html"
                             else (STATIC / name).read_bytes())
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
        self.assertEqual(proc.returncode, 0)


if __name__ == "__main__":
    unittest.main()
