"""Tests for the command line, run the way a user runs it: in a subprocess.

The whole contract runs through `python -m nobroker` with src on
PYTHONPATH; a freshly built `nobroker.pyz`, with nothing on PYTHONPATH and
started from an unrelated directory, runs every command once and one error
of each exit code. Every command runs on a real queue directory; error
cases check the exit code, that stderr is one line without a traceback,
and that nothing on disk changed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest
from pathlib import Path
from typing import Any, ClassVar

from harness.support import REPO, SRC, TempDirTestCase

from nobroker import Queue, chain, chord

BUILD_PYZ = REPO / "tools" / "build" / "pyz.py"


def snapshot(root: Path) -> dict[str, str]:
    """Every file under `root` with a hash of its bytes: equal snapshots, no change."""
    if not root.exists():
        return {}
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def base_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items()
            if k not in ("PYTHONPATH", "NOBROKER_DIR", "NOBROKER_QUICK")}


class CliCase(TempDirTestCase):
    """Helpers to run the CLI on a fresh queue directory; subclasses say how to start it."""

    def command(self) -> list[str]:
        raise NotImplementedError

    def env(self) -> dict[str, str]:
        return base_env()

    def setUp(self) -> None:
        super().setUp()
        self.home = self.tmp / "home"  # where the user stands
        self.home.mkdir()
        self.qdir = self.tmp / "queue"

    def nb(self, *args: str, stdin: str | None = None, cwd: Path | None = None,
           env: dict[str, str] | None = None, dir: bool = True,
           timeout: float = 60) -> subprocess.CompletedProcess[str]:
        words = [*self.command(), *(["--dir", str(self.qdir)] if dir else []), *args]
        return subprocess.run(words, input=stdin, cwd=cwd or self.home, env=env or self.env(),
                              capture_output=True, text=True, timeout=timeout, check=False)

    def ok(self, *args: str, **kw: Any) -> str:
        result = self.nb(*args, **kw)
        self.assertEqual(result.returncode, 0, f"{args}: {result.stderr}")
        return result.stdout

    def fails(self, code: int, *args: str, mentions: str = "", **kw: Any) -> str:
        """Run a command that must fail with `code`, one stderr line, no traceback."""
        result = self.nb(*args, **kw)
        self.assertEqual(result.returncode, code, f"{args}: {result.stdout}{result.stderr}")
        lines = result.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, f"{args}: want one line, got:\n{result.stderr}")
        self.assertTrue(lines[0].startswith("nobroker: "), lines[0])
        self.assertNotIn("Traceback", result.stderr)
        self.assertIn(mentions, lines[0])
        return lines[0]

    def enqueue(self, payload: Any = None, *options: str) -> str:
        return self.ok("enqueue", json.dumps(payload if payload is not None else {}),
                       *options).strip()

    def stats(self) -> dict[str, Any]:
        """`nobroker stats --json`, through the CLI under test."""
        result: dict[str, Any] = json.loads(self.ok("stats", "--json"))
        return result

    def counts(self) -> dict[str, Any]:
        """The queue's stats read in this process: a quicker check of a command's effect."""
        with Queue(self.qdir, readonly=True) as queue:
            return dataclasses.asdict(queue.stats())

    def handler_module(self, body: str, name: str = "tasks") -> None:
        (self.home / f"{name}.py").write_text(textwrap.dedent(body))


class ModuleCliTest(CliCase):
    """`python -m nobroker`, with src on PYTHONPATH: the whole contract."""

    def command(self) -> list[str]:
        return [sys.executable, "-m", "nobroker"]

    def env(self) -> dict[str, str]:
        env = base_env()
        env["PYTHONPATH"] = str(SRC)
        return env

    def test_a_memory_location_is_refused_in_one_line(self) -> None:
        for words in (["stats"], ["enqueue", "{}"]):
            self.fails(1, *words, "--dir", "memory://jobs", dir=False,
                       mentions="a memory:// queue lives inside one process")
        self.assertFalse((self.home / "memory:").exists(), "no directory was made for it")

    def test_postgres_commands_without_the_driver_name_the_extra(self) -> None:
        # A psycopg that cannot be imported, first on the path, whether or not the
        # real one is installed: what a user without nobroker[postgres] sees.
        blocker = self.tmp / "nodriver" / "psycopg"
        blocker.mkdir(parents=True)
        (blocker / "__init__.py").write_text(
            "raise ModuleNotFoundError(\"No module named 'psycopg'\", name='psycopg')\n")
        env = self.env()
        env["PYTHONPATH"] = os.pathsep.join([str(blocker.parent), str(SRC)])
        url = "postgresql://someone:secret@127.0.0.1:1/db"
        self.fails(2, "db", "migrate", dir=False, env=env, mentions="needs a PostgreSQL URL")
        self.fails(2, "migrate", "--from", "a", "--to", "b", dir=False, env=env,
                   mentions="between a directory and a PostgreSQL URL")
        self.fails(2, "db", "recount", dir=False, env=env, mentions="needs a PostgreSQL URL")
        for words in (["db", "migrate", "--url", url], ["db", "recount", "--url", url],
                      ["migrate", "--from", str(self.qdir), "--to", url]):
            line = self.fails(1, *words, dir=False, env=env, mentions='"nobroker[postgres]"')
            self.assertNotIn("secret", line)

    def test_enqueue_prints_the_id_and_every_option_is_recorded(self) -> None:
        job_id = self.enqueue({"resize": "a.jpg"}, "--priority", "5", "--delay", "60",
                              "--max-attempts", "2")
        self.assertRegex(job_id, r"^[0-9a-f]{16}$")
        job = json.loads(self.ok("get", job_id))
        self.assertEqual((job["payload"], job["priority"], job["max_attempts"], job["state"]),
                         ({"resize": "a.jpg"}, 5, 2, "pending"))
        self.assertAlmostEqual(job["available_at"] - job["enqueued_at"], 60, places=3)
        keyed = self.enqueue([1, 2], "--job-id", "order-42")
        self.assertEqual(keyed, "order-42")
        self.assertEqual(self.enqueue([1, 2], "--job-id", "order-42"), "order-42")
        self.assertEqual(self.counts()["pending"], 2)  # the key de-duplicated the second
        from_stdin = self.ok("enqueue", "-", stdin='{"from": "stdin"}\n').strip()
        self.assertEqual(json.loads(self.ok("get", from_stdin))["payload"], {"from": "stdin"})

    def test_stats_list_and_get_read_without_changing_anything(self) -> None:
        first = self.enqueue({"n": 1})
        self.enqueue({"n": 2}, "--priority", "9")
        before = snapshot(self.qdir)
        human = self.ok("stats")
        self.assertRegex(human, r"pending\s+2\b")
        stats = self.stats()
        self.assertEqual({k: stats[k] for k in ("pending", "leased", "dead", "total")},
                         {"pending": 2, "leased": 0, "dead": 0, "total": 2})
        table = self.ok("list")
        self.assertIn(first, table)
        self.assertIn('{"n":1}', table)
        listed = json.loads(self.ok("list", "--json", "--state", "pending", "--limit", "1"))
        self.assertEqual([j["payload"] for j in listed], [{"n": 1}])  # enqueue order
        self.assertEqual(json.loads(self.ok("list", "--json", "--state", "dead")), [])
        self.assertEqual(json.loads(self.ok("get", first))["id"], first)
        self.assertEqual(snapshot(self.qdir), before)

    def test_a_waiting_job_is_listed_with_what_it_waits_for(self) -> None:
        first = self.enqueue({"n": 1})
        with Queue(self.qdir) as queue:
            waiting = queue.enqueue({"n": 2}, depends_on=first).id
        table = self.ok("list", "--state", "waiting")
        self.assertIn(waiting, table)
        self.assertIn(f"after 1 job(s): {first}", table)
        self.assertEqual(json.loads(self.ok("get", waiting))["waiting_for"], [first])
        self.assertNotIn("waiting_for", json.loads(self.ok("get", first)))
        self.assertRegex(self.ok("stats"), r"waiting\s+1\b")
        self.assertEqual(self.stats()["waiting"], 1)

    def test_get_shows_a_jobs_parents_and_children_in_a_workflow(self) -> None:
        plain = self.enqueue({"n": 0})
        first = self.enqueue({"n": 1})
        with Queue(self.qdir) as queue:
            add = queue.task(lambda a, b: a + b, name="add")
            tsum = queue.task(lambda values: sum(values), name="tsum")
            last = chain(add.s(1, 1), add.s(2)).delay()
            callback = chord([add.s(i, i) for i in range(3)], tsum.s()).delay()
            waiting = queue.enqueue({"n": 2}, depends_on=first).id
        members = [r.id for r in callback.parent.results]
        before = snapshot(self.qdir)
        self.assertNotIn("workflow", json.loads(self.ok("get", plain)))  # as before
        step = json.loads(self.ok("get", last.parent.id))
        self.assertEqual(step["workflow"], {"parents": [], "children": [last.id],
                                            "children_complete": True})
        self.assertEqual(json.loads(self.ok("get", last.id))["workflow"]["parents"],
                         [last.parent.id])
        found = json.loads(self.ok("get", callback.id))
        self.assertEqual(found["workflow"], {"parents": members, "children": [],
                                             "children_complete": True,
                                             "progress": {"done": 0, "total": 3}})
        self.assertEqual(found["waiting_for"], members)  # the fields before it unchanged
        self.assertEqual(json.loads(self.ok("get", members[1]))["workflow"]["children"],
                         [callback.id])
        self.assertEqual(json.loads(self.ok("get", first))["workflow"]["children"], [waiting])
        self.assertEqual(json.loads(self.ok("get", waiting))["workflow"]["parents"], [first])
        self.assertEqual(snapshot(self.qdir), before)

    def test_get_of_a_finished_job_says_what_is_known_and_what_is_not(self) -> None:
        keyed = self.enqueue({"n": 1}, "--job-id", "keyed-1")
        plain = self.enqueue({"n": 2})
        with Queue(self.qdir) as queue:
            for job in queue.lease(2):
                queue.ack(job)
        found = json.loads(self.ok("get", keyed))
        self.assertEqual(found["state"], "done")
        self.assertIsNone(found["attempts"])  # unknown, not 0
        self.assertIsNone(found["max_attempts"])
        self.assertIn("only the idempotency key", found["note"])
        self.assertTrue(found["finished"].startswith("done at "))
        line = self.fails(1, "get", plain, mentions="no job with id")
        self.assertIn("finished and forgotten", line)
        self.fails(1, "get", "no-such-job", mentions="never enqueued")

    def test_inspect_prints_every_raw_record_and_changes_nothing(self) -> None:
        job_id = self.enqueue({"hello": "log"})
        self.enqueue({"second": True})
        before = snapshot(self.qdir)
        text = self.ok("inspect")
        rows = [line.split() for line in text.splitlines() if line.split()[:1] in (["16"],)]
        self.assertEqual(rows[0][:3], ["16", "ENQUEUE", "ok"])
        self.assertIn(job_id, text)
        data = json.loads(self.ok("inspect", "--json"))
        self.assertEqual([r["type"] for r in data["records"]], ["ENQUEUE", "ENQUEUE"])
        self.assertTrue(all(r["crc_ok"] for r in data["records"]))
        self.assertEqual(data["records"][0]["offset"], 16)
        self.assertEqual(data["records"][0]["payload"]["p"], {"hello": "log"})
        self.assertEqual(snapshot(self.qdir), before)

    def test_a_torn_tail_is_shown_by_inspect_and_repaired_by_recover(self) -> None:
        self.enqueue({"kept": True})
        log = next(self.qdir.glob("default.*.log"))
        good = self.counts()["log_bytes"]  # the file itself may be longer: preallocated zeros
        with open(log, "r+b") as handle:  # a writer died after 7 bytes of a record
            handle.seek(good)
            handle.write(b"\x40\x00\x00\x00\x01\x99\x98")
        self.fails(1, "inspect", mentions=f"offset {good}")
        self.assertIn("BAD", self.nb("inspect").stdout)
        report = self.ok("recover")
        self.assertIn(f"torn tail at offset {good}", report)
        self.assertEqual(self.counts()["log_bytes"], good)
        self.ok("inspect")
        self.assertIn("clean", self.ok("recover"))
        self.assertEqual(self.counts()["pending"], 1)

    def recording_handler(self) -> None:
        """tasks:handle, which appends each job's payload to done.txt."""
        self.handler_module("""\
            import json
            def handle(job):
                with open("done.txt", "a") as f:
                    f.write(json.dumps(job.payload) + "\\n")
            """)

    def test_work_runs_a_handler_from_the_current_directory(self) -> None:
        self.recording_handler()
        for n in range(3):
            self.enqueue({"n": n})
        result = self.nb("work", "tasks:handle", "--max-jobs", "3", "--concurrency", "2")
        self.assertEqual(result.returncode, 0, result.stderr)
        lines = (self.home / "done.txt").read_text().splitlines()
        self.assertEqual(sorted(json.loads(line)["n"] for line in lines), [0, 1, 2])
        self.assertEqual((self.counts()["done"], self.counts()["total"]), (3, 0))
        self.assertIn("3 succeeded", result.stderr)  # the worker logs to stderr

    def test_work_prefetch_acks_in_batches_and_is_checked(self) -> None:
        self.recording_handler()
        for n in range(6):
            self.enqueue({"n": n})
        result = self.nb("work", "tasks:handle", "--prefetch", "4", "--concurrency", "2",
                         "--max-jobs", "6", "--ack-delay", "0.01")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("concurrency 2, prefetch 4, ack delay 0.01s,", result.stderr)
        lines = (self.home / "done.txt").read_text().splitlines()
        self.assertEqual(sorted(json.loads(line)["n"] for line in lines), list(range(6)))
        self.assertEqual((self.counts()["done"], self.counts()["total"]), (6, 0))
        self.assertIn("6 succeeded", result.stderr)
        self.fails(2, "work", "tasks:handle", "--prefetch", "-1", mentions="--prefetch")
        self.fails(2, "work", "tasks:handle", "--prefetch", "lots", mentions="--prefetch")
        for n in range(3):
            self.enqueue({"n": n})
        result = self.nb("work", "tasks:handle", "--prefetch", "auto", "--max-jobs", "3")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("concurrency 1, prefetch auto,", result.stderr)
        self.assertIn("3 succeeded", result.stderr)
        self.fails(2, "work", "tasks:handle", "--ack-delay", "0.01", mentions="prefetch")

    def test_a_failing_job_goes_to_the_dlq_and_can_be_requeued(self) -> None:
        self.handler_module("""\
            def fail(job):
                raise ValueError("no such file: " + job.payload["file"])
            """)
        job_id = self.enqueue({"file": "x.jpg"}, "--max-attempts", "1")
        result = self.nb("work", "tasks:fail", "--max-jobs", "1")
        self.assertEqual(result.returncode, 0, result.stderr)
        failure = [line for line in result.stderr.splitlines() if job_id in line]
        self.assertEqual(len(failure), 1, result.stderr)
        self.assertIn("attempt 1 of 1: ValueError: no such file: x.jpg", failure[0])
        self.assertIn(job_id, self.ok("dlq"))
        dead = json.loads(self.ok("dlq", "--json"))
        self.assertEqual([(j["id"], j["last_error"]) for j in dead],
                         [(job_id, "ValueError: no such file: x.jpg")])
        self.fails(1, "dlq", "--requeue", "no-such-job", mentions="no-such-job")
        self.assertIn("requeued 1 job", self.ok("dlq", "--requeue", job_id))
        self.assertEqual(json.loads(self.ok("get", job_id))["state"], "pending")
        self.assertIn("requeued 0 job", self.ok("dlq", "--requeue"))
        self.assertIn("empty", self.ok("dlq"))

    def test_cancel_pause_resume_and_result(self) -> None:
        first = self.enqueue({"n": 1})
        second = self.enqueue({"n": 2})
        self.assertIn("paused", self.ok("pause"))
        self.assertTrue(self.stats()["paused"])
        self.assertRegex(self.ok("stats"), r"paused\s+yes")
        self.assertIn("resumed", self.ok("resume"))
        self.assertFalse(self.stats()["paused"])
        self.assertIn(f"cancelled {first}", self.ok("cancel", first))
        self.fails(1, "cancel", first, mentions="nothing cancelled")
        self.fails(1, "result", first, mentions="cancelled")
        job = json.loads(self.ok("get", first))
        self.assertEqual(job["state"], "cancelled")
        self.assertIn("cancelled at ", job["finished"])
        self.assertIn("after 0 of 5 attempts", job["finished"])
        self.fails(1, "result", second, "--wait", "0.1", mentions="has not finished")
        with Queue(self.qdir) as queue:
            leased = queue.lease_one()
            assert leased is not None
            queue.ack(leased, result={"sum": 3})
        self.assertEqual(json.loads(self.ok("result", second)), {"sum": 3})
        job = json.loads(self.ok("get", second))
        self.assertEqual((job["result"], job["state"]), ({"sum": 3}, "done"))
        self.assertIn("after 1 of 5 attempts", job["finished"])
        self.fails(1, "result", "no-such-job", mentions="no-such-job")
        self.assertEqual([j["id"] for j in json.loads(self.ok("list", "--json", "--state",
                                                               "done"))], [second])

    def test_dlq_delete_removes_dead_jobs_in_the_log(self) -> None:
        ids = [self.enqueue({"n": n}, "--max-attempts", "1") for n in range(3)]
        with Queue(self.qdir) as queue:
            for leased in queue.lease(3):
                queue.nack(leased, error="boom")
        self.fails(1, "result", ids[0], mentions="ended dead: boom")
        self.fails(2, "dlq", "--delete", "--requeue")
        self.fails(1, "dlq", "--delete", "no-such-job", mentions="no-such-job")
        self.assertIn("deleted 1 job", self.ok("dlq", "--delete", ids[0]))
        self.assertEqual(self.counts()["dead"], 2)
        self.assertIn("deleted 2 job", self.ok("dlq", "--delete"))
        self.assertIn("empty", self.ok("dlq"))
        self.fails(1, "get", ids[1], mentions="no job")

    def test_compact_shrinks_the_log_and_purge_needs_yes(self) -> None:
        self.handler_module("def noop(job):\n    pass\n")
        for n in range(8):
            self.enqueue({"n": n, "padding": "x" * 200})
        self.ok("work", "tasks:noop", "--max-jobs", "6", "-q")
        before = self.counts()["log_bytes"]
        message = self.ok("compact")
        self.assertIn("compacted generation 0 -> 1", message)
        self.assertLess(self.counts()["log_bytes"], before / 2)
        self.assertEqual(self.counts()["pending"], 2)
        self.fails(2, "purge", mentions="--yes")
        self.assertEqual(self.counts()["pending"], 2)
        self.assertIn("purged 2", self.ok("purge", "--yes"))
        self.assertEqual(self.counts()["total"], 0)

    def test_user_mistakes_exit_2_with_one_line_and_change_nothing(self) -> None:
        self.enqueue({"existing": True})
        before = snapshot(self.qdir)
        self.fails(2, "enqueue", "{bad json", mentions="not valid JSON")
        self.fails(2, "enqueue", "NaN", mentions="not valid JSON")
        self.fails(2, "enqueue", "-", stdin="", mentions="not valid JSON")
        self.fails(2, "enqueue", "{}", "--priority", "high", mentions="--priority")
        self.fails(2, "enqueue", "{}", "--delay", "-1", mentions="--delay")
        self.fails(2, "enqueue", "{}", "--max-attempts", "0", mentions="--max-attempts")
        self.fails(2, "list", "--state", "finished", mentions="--state")
        self.fails(2, "frobnicate", mentions="frobnicate")
        self.fails(2, mentions="required", dir=True)
        self.fails(2, "work", "tasks", mentions="MODULE:FUNCTION")
        self.fails(2, "work", "no_such_module:handle", mentions="no_such_module")
        self.handler_module("def handle(job):\n    pass\nNOT_CALLABLE = 3\n")
        self.fails(2, "work", "tasks:nope", mentions="no attribute 'nope'")
        self.fails(2, "work", "tasks:NOT_CALLABLE", mentions="not a function")
        self.handler_module("import no_such_dependency\n", name="broken")
        self.fails(2, "work", "broken:handle", mentions="ModuleNotFoundError")
        self.handler_module("raise RuntimeError('bad config')\n", name="crashing")
        self.fails(2, "work", "crashing:handle", mentions="RuntimeError: bad config")
        self.assertEqual(snapshot(self.qdir), before)

    def test_queue_errors_exit_1_and_create_nothing(self) -> None:
        for command in (["stats"], ["list"], ["get", "x"], ["dlq"], ["inspect"], ["recover"],
                        ["compact"], ["purge", "--yes"], ["dlq", "--requeue"]):
            with self.subTest(command=command):
                self.fails(1, *command, mentions=str(self.qdir))
        self.assertFalse(self.qdir.exists())
        self.fails(2, "work", "missing:handle")  # checked before the queue is opened
        self.assertFalse(self.qdir.exists())
        self.enqueue({})
        before = snapshot(self.qdir)
        self.fails(1, "get", "no-such-job", mentions="no-such-job")
        self.fails(1, "--queue", "other", "stats", mentions="'other'")
        self.assertEqual(snapshot(self.qdir), before)

    def test_a_locked_queue_is_a_clear_error(self) -> None:
        self.enqueue({})
        holder = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(f"""\
                import sys, time
                sys.path.insert(0, {str(SRC)!r})
                from nobroker.file.disk.fs import OS
                from nobroker.file.disk.lock import shared_lock
                shared_lock(OS, {str(self.qdir / "default.lock")!r}).acquire(10)
                print("locked", flush=True)
                sys.stdin.read()
                """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.addCleanup(holder.wait, 10)
        self.addCleanup(holder.kill)
        self.assertEqual(holder.stdout.readline().strip() if holder.stdout else "", "locked")
        before = snapshot(self.qdir)
        self.fails(1, "--lock-timeout", "0.2", "stats", mentions="could not lock")
        self.fails(1, "enqueue", "{}", "--lock-timeout", "0.2", mentions="could not lock")
        self.assertEqual(snapshot(self.qdir), before)

    def test_dir_comes_from_the_option_then_the_environment_then_jobs(self) -> None:
        env = self.env()
        self.nb("enqueue", "{}", dir=False, env=env)
        self.assertTrue((self.home / "jobs").is_dir())
        env["NOBROKER_DIR"] = str(self.tmp / "from-env")
        self.nb("enqueue", "{}", dir=False, env=env)
        self.assertTrue((self.tmp / "from-env").is_dir())
        self.nb("--queue", "emails", "enqueue", "{}", env=env)
        self.assertTrue((self.qdir / "emails.lock").exists())
        stats = json.loads(self.ok("stats", "--json", "--queue", "emails"))  # after the command
        self.assertEqual((stats["queue"], stats["pending"]), ("emails", 1))

    def test_help_and_version(self) -> None:
        self.assertIn("enqueue", self.ok("--help", dir=False))
        self.assertIn("--idle-timeout", self.ok("work", "--help", dir=False))
        self.assertRegex(self.ok("--version", dir=False), r"^nobroker \d+\.\d+")

    def test_migrate_help_says_what_it_copies_rate_windows_included(self) -> None:
        text = " ".join(self.ok("migrate", "--help", dir=False).split())
        for copied in ("pending, leased (as pending) and dead jobs",
                       "waiting jobs with their prerequisites",
                       "revivable cancelled dependents", "limit keys and cap",
                       "the rate limits' windows (their latest starts)"):
            self.assertIn(copied, text)
        self.assertIn("Not copied: finished jobs and remembered keys", text)
        self.assertNotIn("starts fresh", text)

    @unittest.skipIf(sys.platform == "win32", "POSIX signals")
    def test_sigterm_lets_work_finish_the_job_and_exit_0(self) -> None:
        self.handler_module("""\
            import os, time
            def slow(job):
                open("started", "w").close()
                time.sleep(1)
                open("finished", "w").close()
            """)
        self.enqueue({})
        words = [*self.command(), "--dir", str(self.qdir), "work", "tasks:slow"]
        proc = subprocess.Popen(words, cwd=self.home, env=self.env(), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        self.addCleanup(lambda: proc.poll() is None and proc.kill())
        deadline = time.monotonic() + 30
        while not (self.home / "started").exists():
            self.assertLess(time.monotonic(), deadline, "the handler never started")
            self.assertIsNone(proc.poll(), "the worker exited early")
            time.sleep(0.01)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
        self.assertEqual(proc.returncode, 0, err)
        self.assertTrue((self.home / "finished").exists())
        self.assertEqual((self.counts()["done"], self.counts()["leased"]), (1, 0))


class PyzCliTest(CliCase):
    """The single-file build, with nothing on PYTHONPATH, run from an unrelated directory.

    Python starts slowly enough that running the whole contract twice would
    double this file's time, so the bundle gets a tour: every command once,
    and one error of each exit code.
    """

    pyz: ClassVar[Path]
    _build_dir: ClassVar[tempfile.TemporaryDirectory[str]]

    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        cls._build_dir = tempfile.TemporaryDirectory(prefix="nobroker-pyz-test-")
        cls.pyz = Path(cls._build_dir.name) / "nobroker.pyz"
        built = subprocess.run([sys.executable, str(BUILD_PYZ), "--output", str(cls.pyz)],
                               capture_output=True, text=True, timeout=120, check=False)
        if built.returncode != 0:
            raise RuntimeError(f"building the pyz failed: {built.stderr}")

    @classmethod
    def tearDownClass(cls) -> None:
        cls._build_dir.cleanup()
        super().tearDownClass()

    def command(self) -> list[str]:
        return [sys.executable, str(self.pyz)]

    def test_every_command_works_from_the_bundle(self) -> None:
        self.handler_module("""\
            def handle(job):
                if job.payload.get("fail"):
                    raise KeyError("missing")
            """)
        self.enqueue({"a": 1}, "--priority", "2", "--job-id", "first")
        self.ok("enqueue", "-", "--max-attempts", "1", stdin='{"fail": true}')
        self.assertEqual(self.stats()["pending"], 2)
        self.assertIn("first", self.ok("list"))
        self.assertEqual(json.loads(self.ok("get", "first"))["priority"], 2)
        self.ok("work", "tasks:handle", "--max-jobs", "2", "--idle-timeout", "5")
        dead = json.loads(self.ok("dlq", "--json"))
        self.assertEqual([j["last_error"] for j in dead], ["KeyError: 'missing'"])
        self.assertIn("requeued 1", self.ok("dlq", "--requeue"))
        self.assertIn("ENQUEUE", self.ok("inspect"))
        self.assertIn("clean", self.ok("recover"))
        self.assertIn("compacted", self.ok("compact"))
        self.assertIn("purged 1", self.ok("purge", "--yes"))
        self.assertEqual(self.counts()["total"], 0)

    def test_the_bundle_maps_errors_to_exit_codes(self) -> None:
        self.fails(1, "stats", mentions="no queue directory")
        self.fails(2, "enqueue", "{oops", mentions="not valid JSON")
        self.fails(2, "work", "nowhere:handle", mentions="nowhere")
        self.assertFalse(self.qdir.exists())
        self.enqueue({})
        self.fails(1, "get", "unknown", mentions="unknown")
        self.assertIn("usage", self.ok("--help", dir=False).lower())
        self.assertNotIn(str(REPO), self.ok("--help", dir=False))


if __name__ == "__main__":
    unittest.main()
