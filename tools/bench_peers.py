"""nobroker next to other job queues: the same workloads, one run, one machine.

    python tools/bench_peers.py            # default sizes, 5 interleaved rounds
    python tools/bench_peers.py --quick    # small sizes, 2 rounds
    python tools/bench_peers.py --markdown # one combined Markdown table

A development tool, not part of nobroker: the peers are third-party packages,
imported only inside functions. On first use the script creates the ignored
virtual environment ``.dev/bench-venv``, installs the pinned peers from
``requirements-bench.txt`` into it, and re-executes itself there with ``src``
on PYTHONPATH (``--no-venv`` skips that and uses whatever this interpreter
has). It needs Debian's ``redis-server`` for RQ, installs it with apt-get when
missing, starts two private servers on 127.0.0.1 (free ports, scratch dirs,
``--appendonly yes`` with ``--appendfsync always`` / ``everysec``,
``--save ''``) and stops them at exit, on error too. A peer that cannot be
installed, imported or run shows as "skipped: reason"; the run goes on.

Methodology
-----------
Each workload runs every system once per round, in the same order, for
several rounds (A B C ... A B C ...), and reports each system's median round;
this machine is shared and noisy, and interleaving spreads the noise over all
systems alike. Every store lives under ``.bench/`` in the repository (a real
disk, not a tmpfs). Untimed preparation (filling a queue before a take/ack
round, building the cold-open store) uses each system's own API, with fsync
switched off where the system allows it, since only the timed part matters.

Each system is labelled with the durability it actually gave in this run
(SQLite's ``PRAGMA synchronous`` and journal mode read back from the
connection, Redis's ``appendfsync`` read back with CONFIG GET), and with what
happens to a taken job if the consumer crashes.

What is measured for each system:

* nobroker: ``Queue(fsync=True)``; enqueue, enqueue_many, ack_and_lease loop
  (one call and one fsync per job; lease_one + ack shown too), open + lease_one.
* Huey: the storage layer of ``SqliteHuey(fsync=True)``
  (``storage.enqueue(bytes)`` / ``storage.dequeue()``), not task dispatch;
  dequeue deletes the row, so there is no ack.
* persist-queue: ``SQLiteAckQueue(auto_commit=True, multithreading=False)``;
  ``put``, ``get(raw=True)`` + ``ack(id=...)``.
* litequeue: ``LiteQueue`` as shipped (it sets ``synchronous=NORMAL``) and the
  same with ``PRAGMA synchronous=FULL``; ``put``, ``pop`` + ``done``; the batch
  is ``put`` in one ``transaction()``.
* RQ: ``Queue.enqueue(noop, payload)`` against each Redis; the batch is
  ``Queue.enqueue_many`` (one pipeline); take + ack is the real worker path, a
  ``SimpleWorker.work(burst=True)`` over the round's jobs (worker start-up
  included); cold open restarts redis-server on its AOF and times it until
  ``Queue.dequeue_any`` hands over the first job.
* sqlite3: a plain table queue, WAL, ``synchronous=FULL``; insert; take = one
  transaction of SELECT + DELETE (no ack).
* drain (``--only drain``): N = 1, 2, 4 consumer processes emptying one
  prefilled queue of no-op jobs, every system and N rotating within each
  round. nobroker: N spawned processes, each a ``Worker`` (concurrency 1)
  (tools/bench_scaling.py, as ``make.py bench``'s workers row). Huey: its
  own consumer, ``huey_consumer -k process -w N -n`` on a ``SqliteHuey
  (fsync=True)`` (dequeue deletes the row: no ack). persist-queue: N spawned
  processes looping ``get(raw=True)`` + ``ack`` on one ``SQLiteAckQueue``.
  Every handler stamps its start into a per-process file; the figure is the
  steady-state rate (10th to 90th percentile of the starts), and jobs
  delivered more than once are counted.
* baselines: the raw O_APPEND write+fsync loop with nobroker's record size,
  ``json.dumps`` of the batch, and ``json.loads`` of nobroker's log.

Ratios are "nobroker vs it": how many times better nobroker did (its
throughput over the peer's, the peer's time over its, the peer's memory over
its); above 1 means nobroker is ahead.
"""

from __future__ import annotations

import argparse
import atexit
import gc
import hashlib
import importlib
import json
import os
import shlex
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_scaling
from bench_common import (
    REPO,
    SRC,
    child_error,
    ensure_src_on_path,
    facts_line,
    fmt_rate,
    fmt_ratio,
    fmt_time,
    framed_sizes,
    gather_at_barrier,
    json_loads_log,
    log_files,
    log_record_bytes,
    machine_facts,
    median,
    raw_fsync_loop,
    render_markdown_table,
    render_text_table,
    small_payloads,
)

ensure_src_on_path()

TOOLS = Path(__file__).resolve().parent
VENV = REPO / ".dev" / "bench-venv"
REQUIREMENTS = REPO / "requirements-bench.txt"
STAMP = VENV / ".requirements-bench.sha256"
SYNC_NAMES = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}


# --------------------------------------------------------------------------
# bootstrap: venv, peers, redis-server


def in_bench_venv() -> bool:
    try:
        return Path(sys.prefix).resolve() == VENV.resolve()
    except OSError:
        return False


def venv_python() -> Path:
    return VENV / "bin" / "python"


def pip_install(python: Path) -> None:
    """Install the pinned peers; one by one if the set fails, so a bad pin skips one peer."""
    reqs = [line.split("#", 1)[0].strip() for line in REQUIREMENTS.read_text().splitlines()]
    reqs = [r for r in reqs if r]
    base = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    print(f"bench_peers: installing {' '.join(reqs)} into {VENV}", file=sys.stderr)
    if subprocess.run([*base, "-r", str(REQUIREMENTS)]).returncode == 0:
        STAMP.write_text(hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest())
        return
    for req in reqs:
        if subprocess.run([*base, req]).returncode != 0:
            print(f"bench_peers: could not install {req}; its rows will be skipped",
                  file=sys.stderr)


def bootstrap(argv: list[str]) -> None:
    """Create/refresh .dev/bench-venv and re-execute this script inside it (never returns)."""
    python = venv_python()
    if not python.exists():
        print(f"bench_peers: creating {VENV}", file=sys.stderr)
        VENV.parent.mkdir(parents=True, exist_ok=True)
        done = subprocess.run([sys.executable, "-m", "venv", str(VENV)])
        if done.returncode != 0 or not python.exists():
            print("bench_peers: could not create the venv; running here without it "
                  "(peers missing from this interpreter are skipped)", file=sys.stderr)
            return
    want = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()
    have = STAMP.read_text().strip() if STAMP.exists() else ""
    if have != want:
        pip_install(python)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), env.get("PYTHONPATH", "")) if p)
    env["NOBROKER_BENCH_VENV"] = "1"
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(str(python), [str(python), str(Path(__file__).resolve()), *argv], env)


def ensure_redis_server() -> str | None:
    """Path of redis-server, installing Debian's package if needed; None if impossible."""
    found = shutil.which("redis-server")
    if found:
        return found
    apt = shutil.which("apt-get")
    if apt is None:
        return None
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    print("bench_peers: redis-server missing; apt-get install -y redis-server", file=sys.stderr)

    def apt_get(*words: str) -> int:
        return subprocess.run([apt, *words], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL).returncode

    if apt_get("install", "-y", "redis-server") != 0:
        apt_get("update")
        apt_get("install", "-y", "redis-server")
    return shutil.which("redis-server")


def die_with_parent() -> None:
    """In the child before exec: get SIGTERM if this script dies, even by SIGKILL (Linux)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    """A private redis-server on 127.0.0.1 with AOF persistence; we start and stop it."""

    def __init__(self, binary: str, directory: Path, appendfsync: str) -> None:
        self.binary = binary
        self.dir = directory
        self.appendfsync = appendfsync
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 15.0) -> float:
        """Start the server; return seconds until it answers PING (AOF loaded)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        cmd = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1",
               "--dir", str(self.dir), "--appendonly", "yes",
               "--appendfsync", self.appendfsync, "--save", "", "--daemonize", "no",
               "--protected-mode", "yes", "--logfile", str(self.dir / "redis.log")]
        t = time.perf_counter()
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, preexec_fn=die_with_parent)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self.proc.returncode}; "
                                   f"see {self.dir / 'redis.log'}")
            if self._ping():
                return time.perf_counter() - t
            time.sleep(0.001)
        raise RuntimeError("redis-server did not answer PING in time")

    def _ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                return s.recv(64).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self) -> None:
        """SIGTERM (Redis flushes and fsyncs its AOF on it), then wait; kill if it hangs."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# --------------------------------------------------------------------------
# systems


class Skip(Exception):
    """This system cannot run (missing package, server, or it failed): "skipped: reason"."""


class NotApplicable(Skip):
    """The workload does not apply to this system (e.g. no batch API): "n/a: reason"."""


def peer_module(name: str) -> Any:
    """Import a peer package (third-party imports happen only here, at run time)."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise Skip(f"{name} not importable: {exc}") from None


def sqlite_durability(conn: sqlite3.Connection) -> str:
    mode = str(conn.execute("pragma journal_mode").fetchone()[0]).upper()
    sync = SYNC_NAMES.get(int(conn.execute("pragma synchronous").fetchone()[0]), "?")
    if sync in ("FULL", "EXTRA"):
        what = "fsync per commit"
    elif sync == "NORMAL" and mode == "WAL":
        what = "no fsync per commit: survives a process crash, power loss can drop recent commits"
    else:
        what = "no fsync: power loss can lose or corrupt data"
    return f"SQLite {mode}, synchronous={sync}: {what}"


class System:
    """One queue system under test, behind the operations the workloads need."""

    name = "?"
    takes = ""  # what happens to a taken job if the consumer crashes
    supports_batch = False  # has a one-call / one-transaction batch enqueue

    def __init__(self) -> None:
        self.durability = "?"

    # lifecycle
    def open(self, d: Path) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    # operations
    def enqueue(self, payload: dict[str, Any]) -> None:
        raise NotImplementedError

    def enqueue_loop(self, payloads: list[dict[str, Any]]) -> float:
        """Seconds to enqueue each payload with its own durable call."""
        enqueue = self.enqueue
        t = time.perf_counter()
        for p in payloads:
            enqueue(p)
        return time.perf_counter() - t

    def enqueue_batch(self, payloads: list[dict[str, Any]]) -> None:
        raise NotApplicable("no batch API")

    def prefill(self, payloads: list[dict[str, Any]]) -> None:
        """Fill fast, untimed (fsync off where the system allows)."""
        for p in payloads:
            self.enqueue(p)

    def take_ack(self, n: int) -> float:
        """Seconds for n take + ack round trips (jobs already there)."""
        raise NotImplementedError

    def cold_open(self, d: Path) -> float:
        """Seconds to open the closed store in d and have the first job in hand."""
        raise NotImplementedError

    def memory_per_job(self, d: Path, n: int) -> tuple[float, str]:
        raise NotApplicable("jobs stay on disk (bounded SQLite page cache)")


class NobrokerSystem(System):
    name = "nobroker"
    takes = "lease: back after the visibility timeout"
    supports_batch = True

    def __init__(self, two_calls: bool = False) -> None:
        super().__init__()
        self.nb = importlib.import_module("nobroker")
        self.two_calls = two_calls
        if two_calls:
            self.name = "nobroker (lease_one + ack)"
        self.q: Any = None
        self.durability = "write-ahead log, fsync per call"

    def open(self, d: Path) -> None:
        self.q = self.nb.Queue(str(d), fsync=True)

    def close(self) -> None:
        self.q.close()

    def enqueue(self, payload: dict[str, Any]) -> None:
        self.q.enqueue(payload)

    def enqueue_batch(self, payloads: list[dict[str, Any]]) -> None:
        self.q.enqueue_many(payloads)

    def prefill(self, payloads: list[dict[str, Any]]) -> None:
        for i in range(0, len(payloads), 10_000):
            self.q.enqueue_many(payloads[i : i + 10_000])

    def take_ack(self, n: int) -> float:
        q = self.q
        if self.two_calls or not hasattr(q, "ack_and_lease"):
            t = time.perf_counter()
            for _ in range(n):
                job = q.lease_one()
                q.ack(job)
            return time.perf_counter() - t
        job = q.lease_one()
        t = time.perf_counter()
        for _ in range(n - 1):
            job = q.ack_and_lease(job)
        q.ack(job)
        return time.perf_counter() - t

    def cold_open(self, d: Path) -> float:
        t = time.perf_counter()
        q = self.nb.Queue(str(d), fsync=True)
        job = q.lease_one()
        elapsed = time.perf_counter() - t
        q.close()
        if job is None:
            raise RuntimeError("no job after open")
        return elapsed

    def memory_per_job(self, d: Path, n: int) -> tuple[float, str]:
        code = (  # warm up on a one-job queue, then: open + first lease, RSS growth per job
            "import gc, sys, json, os, tempfile; sys.path[:0] = sys.argv[2:]\n"
            "from bench_common import rss_bytes\n"
            "import nobroker\n"
            "w = nobroker.Queue(tempfile.mkdtemp(dir=os.path.dirname(sys.argv[1])))\n"
            "w.enqueue(1); w.ack(w.lease_one()); w.stats(); w.close()\n"
            "gc.collect(); r0 = rss_bytes(); q = nobroker.Queue(sys.argv[1]); q.lease_one()\n"
            "gc.collect(); r1 = rss_bytes(); s = q.stats(); q.close()\n"
            "print(json.dumps([r1 - r0, s.pending + s.leased]))\n"
        )
        out = subprocess.run([sys.executable, "-c", code, str(d), str(Path(__file__).parent),
                              str(SRC)], capture_output=True, text=True, check=True)
        delta, jobs = json.loads(out.stdout.strip().splitlines()[-1])
        return delta / max(1, jobs), "process RSS growth on open + first lease"


class HueySystem(System):
    name = "huey SqliteHuey (storage)"
    takes = "dequeue deletes: no ack, a crash in the handler loses the job"

    def __init__(self) -> None:
        super().__init__()
        self.huey_mod = peer_module("huey")
        self.storage: Any = None

    def _make(self, d: Path) -> Any:
        h = self.huey_mod.SqliteHuey("bench", filename=str(d / "huey.db"), fsync=True)
        return h.storage

    def open(self, d: Path) -> None:
        self.storage = self._make(d)
        self.durability = sqlite_durability(self.storage.conn)

    def close(self) -> None:
        self.storage.close()

    def enqueue(self, payload: dict[str, Any]) -> None:
        self.storage.enqueue(json.dumps(payload).encode())

    def prefill(self, payloads: list[dict[str, Any]]) -> None:
        conn = self.storage.conn
        conn.execute("pragma synchronous=OFF")
        try:
            for p in payloads:
                self.storage.enqueue(json.dumps(p).encode())
        finally:
            conn.execute("pragma synchronous=FULL")

    def take_ack(self, n: int) -> float:
        dequeue = self.storage.dequeue
        t = time.perf_counter()
        for _ in range(n):
            if dequeue() is None:
                raise RuntimeError("huey queue ran dry")
        return time.perf_counter() - t

    def cold_open(self, d: Path) -> float:
        t = time.perf_counter()
        storage = self._make(d)
        data = storage.dequeue()
        elapsed = time.perf_counter() - t
        storage.close()
        if data is None:
            raise RuntimeError("no job after open")
        return elapsed


class PersistQueueSystem(System):
    name = "persist-queue SQLiteAckQueue"
    takes = "get marks unack; unacked jobs return on the next open (auto_resume)"

    def __init__(self) -> None:
        super().__init__()
        self.pq = peer_module("persistqueue")
        self.q: Any = None

    def _make(self, d: Path) -> Any:
        return self.pq.SQLiteAckQueue(str(d), auto_commit=True, multithreading=False)

    def open(self, d: Path) -> None:
        self.q = self._make(d)
        self.durability = sqlite_durability(self.q._putter)

    def close(self) -> None:
        self.q.close()

    def enqueue(self, payload: dict[str, Any]) -> None:
        self.q.put(payload)

    def prefill(self, payloads: list[dict[str, Any]]) -> None:
        conn = self.q._putter
        conn.execute("pragma synchronous=OFF")
        try:
            for p in payloads:
                self.q.put(p)
        finally:
            conn.execute("pragma synchronous=FULL")

    def take_ack(self, n: int) -> float:
        q = self.q
        t = time.perf_counter()
        for _ in range(n):
            item = q.get(block=False, raw=True)
            q.ack(id=item["pqid"])
        return time.perf_counter() - t

    def cold_open(self, d: Path) -> float:
        t = time.perf_counter()
        q = self._make(d)
        item = q.get(block=False, raw=True)
        elapsed = time.perf_counter() - t
        q.close()
        if item is None:
            raise RuntimeError("no job after open")
        return elapsed


class LiteQueueSystem(System):
    takes = "pop marks LOCKED; the app must find and retry stale locks itself"
    supports_batch = True

    def __init__(self, full: bool) -> None:
        super().__init__()
        self.lq = peer_module("litequeue")
        self.full = full
        self.name = "litequeue (synchronous=FULL)" if full else "litequeue (default)"
        self.q: Any = None

    def _make(self, d: Path) -> Any:
        q = self.lq.LiteQueue(str(d / "litequeue.db"))
        if self.full:
            q.conn.execute("PRAGMA synchronous = FULL;")
        return q

    def open(self, d: Path) -> None:
        self.q = self._make(d)
        self.durability = sqlite_durability(self.q.conn)

    def close(self) -> None:
        self.q.close()

    def enqueue(self, payload: dict[str, Any]) -> None:
        self.q.put(json.dumps(payload))

    def enqueue_batch(self, payloads: list[dict[str, Any]]) -> None:
        q = self.q
        with q.transaction():
            for p in payloads:
                q.put(json.dumps(p))

    def prefill(self, payloads: list[dict[str, Any]]) -> None:
        self.enqueue_batch(payloads)

    def take_ack(self, n: int) -> float:
        q = self.q
        t = time.perf_counter()
        for _ in range(n):
            m = q.pop()
            q.done(m.message_id)
        return time.perf_counter() - t

    def cold_open(self, d: Path) -> float:
        t = time.perf_counter()
        q = self._make(d)
        m = q.pop()
        elapsed = time.perf_counter() - t
        q.close()
        if m is None:
            raise RuntimeError("no job after open")
        return elapsed


class SqliteTableSystem(System):
    name = "sqlite3 table (WAL, FULL)"
    takes = "take deletes the row: no ack, a crash in the handler loses the job"
    supports_batch = True

    def __init__(self) -> None:
        super().__init__()
        self.conn: sqlite3.Connection | None = None

    @staticmethod
    def _connect(d: Path) -> sqlite3.Connection:
        conn = sqlite3.connect(str(d / "queue.db"), isolation_level=None)
        conn.execute("pragma journal_mode=WAL")
        conn.execute("pragma synchronous=FULL")
        conn.execute("create table if not exists jobs "
                     "(id integer primary key, payload text not null)")
        return conn

    @staticmethod
    def _take(conn: sqlite3.Connection) -> str | None:
        conn.execute("begin immediate")
        try:
            row = conn.execute("select id, payload from jobs order by id limit 1").fetchone()
            if row is not None:
                conn.execute("delete from jobs where id = ?", (row[0],))
        except BaseException:
            conn.execute("rollback")
            raise
        conn.execute("commit")
        return None if row is None else str(row[1])

    def open(self, d: Path) -> None:
        self.conn = self._connect(d)
        self.durability = sqlite_durability(self.conn)

    def close(self) -> None:
        assert self.conn is not None
        self.conn.close()

    def enqueue(self, payload: dict[str, Any]) -> None:
        assert self.conn is not None
        self.conn.execute("insert into jobs (payload) values (?)", (json.dumps(payload),))

    def enqueue_batch(self, payloads: list[dict[str, Any]]) -> None:
        conn = self.conn
        assert conn is not None
        conn.execute("begin")
        conn.executemany("insert into jobs (payload) values (?)",
                         [(json.dumps(p),) for p in payloads])
        conn.execute("commit")

    def prefill(self, payloads: list[dict[str, Any]]) -> None:
        self.enqueue_batch(payloads)

    def take_ack(self, n: int) -> float:
        conn = self.conn
        assert conn is not None
        t = time.perf_counter()
        for _ in range(n):
            if self._take(conn) is None:
                raise RuntimeError("sqlite queue ran dry")
        return time.perf_counter() - t

    def cold_open(self, d: Path) -> float:
        t = time.perf_counter()
        conn = self._connect(d)
        got = self._take(conn)
        elapsed = time.perf_counter() - t
        conn.close()
        if got is None:
            raise RuntimeError("no job after open")
        return elapsed


class RQSystem(System):
    takes = "started job: moved to the failed registry when the dead worker is noticed"
    supports_batch = True

    def __init__(self, server: RedisServer | None, why_not: str) -> None:
        super().__init__()
        if server is None:
            raise Skip(why_not)
        self.redis_mod, self.rq = peer_module("redis"), peer_module("rq")
        self.server = server
        self.name = f"RQ (appendfsync {server.appendfsync})"
        self.r: Any = None
        self.q: Any = None
        self._connect()

    def _connect(self) -> None:
        self.r = self.redis_mod.Redis(host="127.0.0.1", port=self.server.port)
        self.q = self.rq.Queue("bench", connection=self.r)
        fsync = self.r.config_get("appendfsync").get("appendfsync", "?")
        aof = self.r.config_get("appendonly").get("appendonly", "?")
        what = {"always": "fsync per write (server side)",
                "everysec": "fsync once a second: up to 1 s of acknowledged writes lost on "
                            "power loss"}.get(fsync, "no fsync")
        self.durability = f"Redis AOF appendonly={aof}, appendfsync={fsync}: {what}"

    def open(self, d: Path) -> None:
        self.r.flushall()

    def close(self) -> None:
        self.r.flushall()

    def enqueue(self, payload: dict[str, Any]) -> None:
        from bench_common import noop

        self.q.enqueue(noop, payload)

    def enqueue_batch(self, payloads: list[dict[str, Any]]) -> None:
        from bench_common import noop

        prepare = self.rq.Queue.prepare_data
        self.q.enqueue_many([prepare(noop, (p,)) for p in payloads])

    def prefill(self, payloads: list[dict[str, Any]]) -> None:
        self.r.config_set("appendfsync", "no")
        try:
            for i in range(0, len(payloads), 1_000):
                self.enqueue_batch(payloads[i : i + 1_000])
        finally:
            self.r.config_set("appendfsync", self.server.appendfsync)

    def take_ack(self, n: int) -> float:
        if self.q.count < n:
            raise RuntimeError(f"RQ queue holds {self.q.count} jobs, need {n}")
        worker = self.rq.SimpleWorker([self.q], connection=self.r)
        t = time.perf_counter()
        worker.work(burst=True, max_jobs=n, logging_level="WARNING")
        return time.perf_counter() - t

    def cold_open(self, d: Path) -> float:
        self.server.stop()
        t = time.perf_counter()
        self.server.start()
        self._connect()
        got = self.rq.Queue.dequeue_any([self.q], None, connection=self.r)
        elapsed = time.perf_counter() - t
        if got is None:
            raise RuntimeError("no job after restart")
        return elapsed

    def memory_per_job(self, d: Path, n: int) -> tuple[float, str]:
        self.r.flushall()
        before = int(self.r.info("memory")["used_memory"])
        self.prefill(small_payloads(0, n))
        after = int(self.r.info("memory")["used_memory"])
        self.r.flushall()
        return (after - before) / n, "redis used_memory growth"


# --------------------------------------------------------------------------
# workloads


@dataclass
class Cell:
    """One system's result in one workload."""

    seconds: float | None = None  # median seconds for `ops` operations (or per open)
    ops: int = 0
    value: float | None = None  # for memory: bytes per job
    text: str = ""
    skipped: str = ""  # "skipped: ..." or "n/a: ..."
    samples: list[float] = field(default_factory=list)

    def speed(self) -> float | None:
        if self.seconds is None or self.seconds <= 0:
            return None
        return self.ops / self.seconds


@dataclass
class Workload:
    key: str
    title: str
    kind: str  # "rate" (ops/s, higher better), "time" (lower better), "bytes" (lower better)
    cells: dict[str, Cell] = field(default_factory=dict)
    baselines: dict[str, Cell] = field(default_factory=dict)
    note: str = ""


@dataclass
class Sizes:
    rounds: int
    enqueue_ops: int
    batch: int
    take_ops: int
    cold_n: int
    drain_jobs: int


def sizes_for(quick: bool, rounds: int | None) -> Sizes:
    s = (Sizes(2, 100, 2_000, 100, 5_000, 2_000) if quick
         else Sizes(5, 300, 10_000, 300, 50_000, 8_000))
    if rounds is not None:
        s.rounds = rounds
    return s


class Runner:
    def __init__(self, sizes: Sizes, root: Path, systems: list[System],
                 skipped: dict[str, str], log: Callable[[str], None]) -> None:
        self.sizes = sizes
        self.root = root
        self.systems = systems
        self.skipped = skipped  # system name -> reason, for systems that could not be built
        self.log = log
        self._n = 10_000_000
        self.baseline = Baseline(self.record_size())

    def payloads(self, count: int) -> list[dict[str, Any]]:
        first, self._n = self._n, self._n + count
        return small_payloads(first, count)

    def new_dir(self, label: str) -> Path:
        safe = "".join(c if c.isalnum() else "-" for c in label)[:40]
        return Path(tempfile.mkdtemp(prefix=f"{safe}-", dir=self.root))

    def _skip_all(self, wl: Workload) -> None:
        for name, why in self.skipped.items():
            wl.cells[name] = Cell(skipped=f"skipped: {why}")

    def _order(self, wl: Workload) -> None:
        """Cells in the order of the systems list, then the skipped systems."""
        order = [s.name for s in self.systems] + list(self.skipped)
        wl.cells = {n: wl.cells[n] for n in order if n in wl.cells} | wl.cells

    def interleaved(self, wl: Workload, ops: int,
                    prepare: Callable[[System, Path], None],
                    measure: Callable[[System, Path], float],
                    finish: Callable[[System, Path], None]) -> None:
        """prepare each system, then rounds x (measure each system), then finish each."""
        self._skip_all(wl)
        live: list[tuple[System, Path]] = []
        for s in self.systems:
            d = self.new_dir(s.name)
            try:
                prepare(s, d)
                live.append((s, d))
            except Skip as exc:
                wl.cells[s.name] = Cell(skipped=skip_text(exc))
            except Exception as exc:
                traceback.print_exc(file=sys.stderr)
                wl.cells[s.name] = Cell(skipped=f"skipped: error: {type(exc).__name__}: {exc}")
        samples: dict[str, list[float]] = {s.name: [] for s, _ in live}
        failed: dict[str, str] = {}
        for _ in range(self.sizes.rounds):
            for s, d in live:
                if s.name in failed:
                    continue
                try:
                    samples[s.name].append(measure(s, d))
                except Skip as exc:
                    failed[s.name] = skip_text(exc)
                except Exception as exc:
                    traceback.print_exc(file=sys.stderr)
                    failed[s.name] = f"skipped: error: {type(exc).__name__}: {exc}"
        for s, d in live:
            try:
                finish(s, d)
            except Exception:
                traceback.print_exc(file=sys.stderr)
            if s.name in failed:
                wl.cells[s.name] = Cell(skipped=failed[s.name])
            else:
                wl.cells[s.name] = Cell(seconds=median(samples[s.name]), ops=ops,
                                        samples=samples[s.name])
            shutil.rmtree(d, ignore_errors=True)
        self._order(wl)

    # ---- workloads

    def record_size(self) -> int:
        nobroker = importlib.import_module("nobroker")
        d = self.new_dir("recsize")
        with nobroker.Queue(str(d)) as q:
            for p in self.payloads(50):
                q.enqueue(p)
        sizes = framed_sizes(d).get(1, [])
        if len(sizes) >= 50:
            size = round(sum(sizes) / len(sizes))
        else:
            size = round(log_record_bytes(d) / 50)
        shutil.rmtree(d, ignore_errors=True)
        return size

    def with_baseline(self, wl: Workload, text: str, ops: int,
                      prepare: Callable[[System, Path], None],
                      measure: Callable[[System, Path], float],
                      finish: Callable[[System, Path], None]) -> Workload:
        """interleaved() with the physical baseline as the first contender of every round."""
        self.systems.insert(0, self.baseline)
        try:
            self.interleaved(wl, ops, prepare, measure, finish)
        finally:
            self.systems.remove(self.baseline)
        cell = wl.cells.pop(self.baseline.name)
        cell.text = text
        wl.baselines[self.baseline.name] = cell
        return wl

    def wl_enqueue(self) -> Workload:
        n = self.sizes.enqueue_ops
        wl = Workload("enqueue", "durable single enqueue", "rate",
                      note=f"{n} enqueues per round, one call each")

        def measure(s: System, d: Path) -> float:
            return s.enqueue_loop(self.payloads(n))

        return self.with_baseline(
            wl, f"raw O_APPEND write+fsync of {self.baseline.size} B", n,
            lambda s, d: s.open(d), measure, lambda s, d: s.close())

    def wl_batch(self) -> Workload:
        b = self.sizes.batch
        wl = Workload("batch", f"batch enqueue of {b:,}", "rate",
                      note="one call (or one transaction) per batch; rate in jobs/s")

        def measure(s: System, d: Path) -> float:
            payloads = self.payloads(b)
            t = time.perf_counter()
            s.enqueue_batch(payloads)
            return time.perf_counter() - t

        def prepare(s: System, d: Path) -> None:
            if not s.supports_batch:
                raise NotApplicable("no batch API")
            s.open(d)

        return self.with_baseline(wl, "json.dumps(list of the payloads)", b, prepare, measure,
                                  lambda s, d: s.close())

    def wl_take_ack(self) -> Workload:
        n = self.sizes.take_ops
        wl = Workload("take_ack", "take + ack round trip, one consumer", "rate",
                      note=f"{n} jobs per round, queued before the clock starts")

        def measure(s: System, d: Path) -> float:
            s.prefill(self.payloads(n))
            return s.take_ack(n)

        return self.with_baseline(
            wl, f"raw O_APPEND write+fsync of {self.baseline.size} B", n,
            lambda s, d: s.open(d), measure, lambda s, d: s.close())

    def wl_cold_open(self) -> Workload:
        n = self.sizes.cold_n
        wl = Workload("cold_open", f"cold open with {n:,} pending, to first job", "time",
                      note="open the closed store + take one job; warm page cache "
                           "(RQ: restart redis-server on its AOF)")

        def prepare(s: System, d: Path) -> None:
            s.open(d)
            s.prefill(small_payloads(0, n))
            if not isinstance(s, RQSystem):  # RQ's jobs stay in the server it restarts
                s.close()

        def finish(s: System, d: Path) -> None:
            if isinstance(s, RQSystem):
                s.close()

        return self.with_baseline(wl, "json.loads of every record in nobroker's log", 1,
                                  prepare, lambda s, d: s.cold_open(d), finish)

    def wl_memory(self) -> Workload:
        n = self.sizes.cold_n
        wl = Workload("memory", f"memory per pending job ({n:,} jobs)", "bytes",
                      note="nobroker: RSS growth of a warmed-up process opening the queue "
                           "and leasing once; "
                           "RQ: redis used_memory growth")
        self._skip_all(wl)
        for s in self.systems:
            d = self.new_dir(s.name)
            try:
                if isinstance(s, NobrokerSystem):
                    if s.two_calls:
                        continue
                    s.open(d)
                    s.prefill(small_payloads(0, n))
                    s.close()
                value, how = s.memory_per_job(d, n)
                wl.cells[s.name] = Cell(value=value, text=how)
            except Skip as exc:
                wl.cells[s.name] = Cell(skipped=skip_text(exc))
            except Exception as exc:
                traceback.print_exc(file=sys.stderr)
                wl.cells[s.name] = Cell(skipped=f"skipped: error: {type(exc).__name__}: {exc}")
            finally:
                shutil.rmtree(d, ignore_errors=True)
        self._order(wl)
        return wl


class Baseline(System):
    """The physical floor of each workload, run as a contender so it interleaves with the peers.

    enqueue and take+ack: the raw O_APPEND write+fsync loop with nobroker's
    record size; batch: json.dumps of the list; cold open: json.loads of every
    record of a nobroker log holding the same jobs (built untimed by prefill).
    """

    name = "baseline"
    supports_batch = True

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size
        self.dir: Path | None = None
        self.durability = "physical floor: fsync per write, or no I/O"

    def open(self, d: Path) -> None:
        self.dir = d

    def close(self) -> None:
        pass

    def _path(self) -> Path:
        assert self.dir is not None
        return self.dir / "raw.bin"

    def enqueue(self, payload: dict[str, Any]) -> None:
        raise AssertionError("measured as a whole loop")

    def enqueue_loop(self, payloads: list[dict[str, Any]]) -> float:
        return raw_fsync_loop(self._path(), self.size, len(payloads))

    def enqueue_batch(self, payloads: list[dict[str, Any]]) -> None:
        json.dumps(payloads)

    def prefill(self, payloads: list[dict[str, Any]]) -> None:
        self._pending = len(payloads)

    def take_ack(self, n: int) -> float:
        return raw_fsync_loop(self._path(), self.size, n)

    def cold_open(self, d: Path) -> float:
        if not log_files(d):  # first round: build the nobroker log, untimed
            nobroker = importlib.import_module("nobroker")
            with nobroker.Queue(str(d)) as q:
                for i in range(0, self._pending, 10_000):
                    q.enqueue_many(small_payloads(i, min(10_000, self._pending - i)))
        t = time.perf_counter()
        json_loads_log(d)
        return time.perf_counter() - t

    _pending = 0


# --------------------------------------------------------------------------
# drain: N consumer processes emptying one queue


HUEY_APP = """\
# The Huey app of tools/bench_peers.py's drain; written to the scratch directory
# so that huey_consumer can import it (PYTHONPATH holds it and tools/).
import os

from huey import SqliteHuey

from bench_scaling import record

huey = SqliteHuey("bench", filename=os.environ["BENCH_HUEY_DB"], fsync=True)
STAMPS = os.environ["BENCH_STAMPS"]


@huey.task()
def noop(i):
    record(STAMPS, float(i))


def prefill(jobs):
    huey.storage.conn.execute("pragma synchronous=OFF")  # untimed
    for i in range(jobs):
        noop(i)
"""


class DrainSystem:
    """One system's way of running N consumer processes over a prefilled queue."""

    name = "?"
    durability = "?"

    def drain(self, work: Path, workers: int, jobs: int) -> bench_scaling.Drain:
        raise NotImplementedError


class NobrokerDrain(DrainSystem):
    name = "nobroker Worker processes"
    durability = "write-ahead log, fsync per call; ack and next lease in one call"

    def __init__(self) -> None:
        importlib.import_module("nobroker")

    def drain(self, work: Path, workers: int, jobs: int) -> bench_scaling.Drain:
        return bench_scaling.drain(work, workers, jobs)


class HueyDrain(DrainSystem):
    name = "huey SqliteHuey consumer -k process (dequeue deletes: no ack)"

    def __init__(self) -> None:
        peer_module("huey")
        self.durability = "SQLite WAL, synchronous=FULL: fsync per commit (SqliteHuey fsync=True)"

    def drain(self, work: Path, workers: int, jobs: int) -> bench_scaling.Drain:
        stamps = bench_scaling.fresh(work / "stamps")
        app = bench_scaling.fresh(work / "app")
        (app / "bench_huey_app.py").write_text(HUEY_APP, encoding="utf-8")
        env = dict(os.environ, BENCH_HUEY_DB=str(app / "huey.db"), BENCH_STAMPS=str(stamps))
        env["PYTHONPATH"] = os.pathsep.join([str(app), str(TOOLS), env.get("PYTHONPATH", "")])
        subprocess.run([sys.executable, "-c", f"import bench_huey_app; "
                        f"bench_huey_app.prefill({jobs})"], env=env, check=True, cwd=app)
        consumer = subprocess.Popen(
            [sys.executable, "-m", "huey.bin.huey_consumer", "bench_huey_app.huey",
             "-k", "process", "-w", str(workers), "-n", "-q"],
            env=env, cwd=app, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            start_new_session=True, preexec_fn=die_with_parent)
        try:
            deadline = time.monotonic() + 300
            while bench_scaling.stamp_count(stamps) < jobs:  # waiting for the end, not timing
                if consumer.poll() is not None:
                    raise RuntimeError(f"huey_consumer exited with {consumer.returncode}")
                if time.monotonic() > deadline:
                    raise RuntimeError("huey_consumer did not finish in 300 s")
                time.sleep(0.02)
        finally:
            consumer.send_signal(signal.SIGINT)  # graceful: its workers are idle by now
            try:
                consumer.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(consumer.pid, signal.SIGKILL)
                consumer.wait()
        return bench_scaling.drain_outcome(stamps, jobs)


def _child_persistqueue(path: str, stamps_dir: str, barrier: Any, out: Any) -> None:
    """Process body for PersistQueueDrain: get + ack until the queue reports Empty."""
    try:
        pq = importlib.import_module("persistqueue")
        q = pq.SQLiteAckQueue(path, auto_commit=True, multithreading=False)
        barrier.wait(timeout=120)
        taken = 0
        while True:
            try:
                item = q.get(block=False, raw=True)
            except pq.Empty:
                break
            bench_scaling.record(stamps_dir, float(item["data"]["user"]))
            q.ack(id=item["pqid"])
            taken += 1
        q.close()
        out.put(("ok", taken))
    except BaseException as exc:  # reported to the parent
        barrier.abort()
        out.put(("error", child_error(exc)))


class PersistQueueDrain(DrainSystem):
    name = "persist-queue SQLiteAckQueue processes"

    def __init__(self) -> None:
        self.pq = peer_module("persistqueue")
        self.durability = "SQLite WAL, synchronous=FULL: fsync per commit"

    def drain(self, work: Path, workers: int, jobs: int) -> bench_scaling.Drain:
        stamps, store = bench_scaling.fresh(work / "stamps"), bench_scaling.fresh(work / "pq")
        q = self.pq.SQLiteAckQueue(str(store), auto_commit=True, multithreading=False)
        q._putter.execute("pragma synchronous=OFF")  # untimed prefill
        for p in small_payloads(0, jobs):
            q.put(p)
        q.close()
        gather_at_barrier([(_child_persistqueue, (str(store), str(stamps)))] * workers)
        return bench_scaling.drain_outcome(stamps, jobs)


DRAIN_COUNTS = (1, 2, 4)


@dataclass
class DrainTable:
    """Each drain system's runs at each N, in round order."""

    jobs: int
    runs: dict[str, dict[int, list[bench_scaling.Drain]]] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    durability: dict[str, str] = field(default_factory=dict)

    def rate(self, name: str, workers: int) -> float:
        return median([d.rate for d in self.runs[name][workers]])


def run_drains(jobs: int, rounds: int, root: Path, log: Callable[[str], None]) -> DrainTable:
    """Every round: each N, each system (nobroker, Huey, persist-queue in rotation)."""
    table = DrainTable(jobs)
    systems: list[DrainSystem] = []
    for make in (NobrokerDrain, HueyDrain, PersistQueueDrain):
        try:
            systems.append(make())
        except Skip as exc:
            table.skipped[make.name] = skip_text(exc)
    for s in systems:
        table.runs[s.name] = {n: [] for n in DRAIN_COUNTS}
        table.durability[s.name] = s.durability
    for r in range(rounds):
        for workers in DRAIN_COUNTS:
            for s in list(systems):
                work = Path(tempfile.mkdtemp(prefix="drain-", dir=root))
                try:
                    table.runs[s.name][workers].append(s.drain(work, workers, jobs))
                except Exception as exc:
                    traceback.print_exc(file=sys.stderr)
                    table.skipped[s.name] = f"skipped: error: {type(exc).__name__}: {exc}"
                    del table.runs[s.name]
                    systems.remove(s)
                finally:
                    shutil.rmtree(work, ignore_errors=True)
        log(f"    round {r + 1}/{rounds} done")
    return table


def drain_rows(table: DrainTable) -> tuple[list[str], list[list[str]]]:
    """The drain as one table: a system per row, N = 1, 2, 4 and the ratios as columns."""
    headers = ["system", "durability", *(f"N = {n}" for n in DRAIN_COUNTS), "2 / 1", "4 / 1",
               "delivered twice (all rounds, N = 1 / 2 / 4)"]
    nb = NobrokerDrain.name
    rows = []
    for name, runs in table.runs.items():
        cells = [name, table.durability[name]]
        for n in DRAIN_COUNTS:
            text = f"{table.rate(name, n):,.0f}/s"
            if name != nb and nb in table.runs:
                text += f" (nobroker {fmt_ratio(table.rate(nb, n) / table.rate(name, n))})"
            cells.append(text)
        cells += [fmt_ratio(table.rate(name, 2) / table.rate(name, 1)),
                  fmt_ratio(table.rate(name, 4) / table.rate(name, 1)),
                  " / ".join(str(sum(d.duplicates for d in runs[n])) for n in DRAIN_COUNTS)]
        rows.append(cells)
    for name, why in table.skipped.items():
        rows.append([name, "—", why, *["—"] * (len(headers) - 3)])
    return headers, rows


def drain_checks(table: DrainTable) -> list[str]:
    """Issue #14's peer target for the drain, judged on this run."""
    nb, huey = NobrokerDrain.name, HueyDrain.name
    if nb not in table.runs or huey not in table.runs:
        return []
    lines = []
    for n in DRAIN_COUNTS:
        r = table.rate(nb, n) / table.rate(huey, n)
        lines.append(f"{n} worker process{'es' if n > 1 else ''} draining: nobroker ahead of "
                     f"Huey's process consumer: nobroker {fmt_ratio(r)} -> "
                     f"{'PASS' if r > 1.0 else 'MISS'}")
    return lines


def drain_title(table: DrainTable, rounds: int) -> str:
    return (f"N consumer processes draining one queue of {table.jobs:,} no-op jobs "
            f"(steady-state jobs/s, medians of {rounds} interleaved rounds; "
            "\"nobroker Nx\": above 1 = nobroker ahead)")


# --------------------------------------------------------------------------
# report


def skip_text(exc: Skip) -> str:
    return f"{'n/a' if isinstance(exc, NotApplicable) else 'skipped'}: {exc}"


def cell_text(wl: Workload, c: Cell) -> str:
    if c.skipped:
        return c.skipped
    if wl.kind == "bytes":
        return f"{c.value:,.0f} B/job" if c.value is not None else "n/a"
    if c.seconds is None:
        return "n/a"
    if wl.kind == "time":
        return fmt_time(c.seconds)
    return f"{fmt_rate(c.ops / c.seconds)} ({fmt_time(c.seconds / c.ops)}/op)"


def nobroker_vs(wl: Workload, c: Cell) -> float | None:
    """How many times better nobroker did than `c` (above 1: nobroker ahead)."""
    me = wl.cells.get("nobroker")
    if me is None or me.skipped or c.skipped:
        return None
    if wl.kind == "bytes":
        if me.value is None or c.value is None or me.value <= 0:
            return None
        return c.value / me.value
    if me.seconds is None or c.seconds is None or me.seconds <= 0 or c.seconds <= 0:
        return None
    if wl.kind == "time":
        return c.seconds / me.seconds
    return (me.ops / me.seconds) / (c.ops / c.seconds)


def report_text(wls: list[Workload], durability: dict[str, str], takes: dict[str, str]) -> str:
    out: list[str] = []
    for wl in wls:
        out.append(f"\n== {wl.title} ==  ({wl.note})")
        rows = []
        for c in wl.baselines.values():
            rows.append([f"[baseline] {c.text}", cell_text(wl, c), fmt_ratio(nobroker_vs(wl, c))])
        for name, c in wl.cells.items():
            rows.append([name, cell_text(wl, c),
                         "—" if name == "nobroker" else fmt_ratio(nobroker_vs(wl, c))])
        out.append(render_text_table(["system", "result", "nobroker vs it"], rows))
    out.append("\n== durability each system gave in this run ==")
    out.append(render_text_table(["system", "durability", "a taken job if the consumer crashes"],
                                 [[n, d, takes.get(n, "")] for n, d in durability.items()]))
    return "\n".join(out)


def report_markdown(wls: list[Workload], durability: dict[str, str]) -> str:
    names = list(durability)
    headers = ["system", "durability", *[w.title for w in wls]]
    rows = []
    for name in names:
        row = [name, durability[name]]
        for wl in wls:
            c = wl.cells.get(name)
            if c is None:
                row.append("—")
                continue
            text = cell_text(wl, c)
            r = nobroker_vs(wl, c)
            if name != "nobroker" and r is not None:
                text += f" (nobroker {fmt_ratio(r)})"
            row.append(text)
        rows.append(row)
    base = ["baseline", "physical floor", *[
        "; ".join(f"{c.text}: {cell_text(wl, c)} (nobroker {fmt_ratio(nobroker_vs(wl, c))})"
                  for c in wl.baselines.values()) or "—" for wl in wls]]
    rows.insert(1, base)
    return render_markdown_table(headers, rows)


def target_checks(wls: list[Workload], durability: dict[str, str]) -> list[str]:
    """The two peer targets from the issue, judged on this run."""
    by = {w.key: w for w in wls}
    lines = []
    enq = by.get("enqueue")
    if enq is not None and "nobroker" in enq.cells and not enq.cells["nobroker"].skipped:
        sqlite_like = {n: c for n, c in enq.cells.items()
                       if not c.skipped and "SQLite WAL" in durability.get(n, "")}
        durable = {n: c for n, c in sqlite_like.items()
                   if any(f"synchronous={m}:" in durability.get(n, "") for m in ("FULL", "EXTRA"))}
        for label, group in (("the best SQLite-WAL peer that fsyncs per commit", durable),
                             ("the best SQLite-WAL peer of any durability (info)", sqlite_like)):
            if not group:
                continue
            best = max(group, key=lambda n: group[n].speed() or 0)
            r = nobroker_vs(enq, group[best])
            ok = r is not None and r > 1.0
            lines.append(f"durable single enqueue ahead of {label}, {best}: "
                         f"nobroker {fmt_ratio(r)} -> {'PASS' if ok else 'MISS'}")
    batch = by.get("batch")
    if batch is not None:
        for n, c in batch.cells.items():
            if n.startswith("litequeue") and not c.skipped:
                r = nobroker_vs(batch, c)
                ok = r is not None and r > 1.0
                lines.append(f"enqueue_many ahead of {n}'s one-transaction batch: "
                             f"nobroker {fmt_ratio(r)} -> {'PASS' if ok else 'MISS'}")
    return lines


# --------------------------------------------------------------------------
# main


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench_peers.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="small sizes, 2 rounds")
    p.add_argument("--rounds", type=int, help="interleaved rounds (default 5, --quick 2)")
    p.add_argument("--only", help="comma-separated workloads: enqueue,batch,take_ack,"
                                  "cold_open,memory,drain")
    p.add_argument("--dir", type=Path, default=REPO / ".bench", help="scratch parent")
    p.add_argument("--markdown", action="store_true", help="print one combined Markdown table")
    p.add_argument("--json", type=Path, metavar="FILE", help="write raw results to FILE")
    p.add_argument("--no-venv", action="store_true",
                   help="run in this interpreter; do not create or use .dev/bench-venv")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if not args.no_venv and not in_bench_venv():
        bootstrap(argv)  # re-executes inside the venv unless it cannot be made
    sizes = sizes_for(args.quick, args.rounds)
    all_wls = ["enqueue", "batch", "take_ack", "cold_open", "memory", "drain"]
    selected = all_wls if not args.only else [w.strip() for w in args.only.split(",")]
    bad = [w for w in selected if w not in all_wls]
    if bad:
        print(f"bench_peers.py: unknown workload(s) {bad}; choose from {all_wls}", file=sys.stderr)
        return 2
    args.dir.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="peers-", dir=args.dir))
    progress = sys.stderr if args.markdown else sys.stdout

    def log(msg: str) -> None:
        print(msg, file=progress, flush=True)

    servers: list[RedisServer] = []

    def cleanup() -> None:
        for srv in servers:
            srv.stop()
        shutil.rmtree(root, ignore_errors=True)

    atexit.register(cleanup)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    facts = machine_facts(root)
    command = "python tools/bench_peers.py " + " ".join(shlex.quote(a) for a in argv)
    log(f"nobroker bench-peers — {facts_line(facts)}")
    log(f"interpreter: {sys.executable}; scratch: {root}")
    log(f"rounds: {sizes.rounds} interleaved, medians; enqueue {sizes.enqueue_ops}/round, "
        f"batch {sizes.batch:,}, take+ack {sizes.take_ops}/round, cold open {sizes.cold_n:,}, "
        f"drain {sizes.drain_jobs:,} jobs")
    try:
        importlib.import_module("nobroker")
    except ImportError as exc:
        print(f"bench_peers.py: cannot import nobroker ({exc}); is src on PYTHONPATH?",
              file=sys.stderr)
        return 2

    # redis servers for RQ
    redis_why = ""
    redis_servers: dict[str, RedisServer | None] = {"always": None, "everysec": None}
    drain_only = selected == ["drain"]  # RQ takes no part in the drain
    binary = None if drain_only else ensure_redis_server()
    if drain_only:
        redis_why = "not run: drain only"
    elif binary is None:
        redis_why = "no redis-server (apt-get install redis-server failed)"
        log(f"!!! RQ skipped: {redis_why}")
    else:
        for mode in redis_servers:
            srv = RedisServer(binary, root / f"redis-{mode}", mode)
            try:
                srv.start()
                servers.append(srv)
                redis_servers[mode] = srv
            except Exception as exc:
                redis_why = f"redis-server did not start: {exc}"
                log(f"!!! {redis_why}")
        if servers:
            log(f"redis-server: {binary} on 127.0.0.1 ports "
                f"{', '.join(str(s.port) for s in servers)}")

    systems: list[System] = []
    skipped: dict[str, str] = {}
    factories: list[tuple[str, Callable[[], System]]] = [
        ("nobroker", lambda: NobrokerSystem()),
        ("nobroker (lease_one + ack)", lambda: NobrokerSystem(two_calls=True)),
        ("huey SqliteHuey (storage)", HueySystem),
        ("persist-queue SQLiteAckQueue", PersistQueueSystem),
        ("litequeue (default)", lambda: LiteQueueSystem(full=False)),
        ("litequeue (synchronous=FULL)", lambda: LiteQueueSystem(full=True)),
        ("RQ (appendfsync always)",
         lambda: RQSystem(redis_servers["always"], redis_why or "no redis-server")),
        ("RQ (appendfsync everysec)",
         lambda: RQSystem(redis_servers["everysec"], redis_why or "no redis-server")),
        ("sqlite3 table (WAL, FULL)", SqliteTableSystem),
    ]
    for label, make in [] if drain_only else factories:  # the drain has its own systems
        try:
            systems.append(make())
        except Skip as exc:
            skipped[label] = str(exc)
            log(f"!!! {label}: skipped: {exc}")
        except Exception as exc:
            skipped[label] = f"error: {type(exc).__name__}: {exc}"
            log(f"!!! {label}: skipped: {skipped[label]}")

    wls: list[Workload] = []
    drains: DrainTable | None = None
    started = time.perf_counter()
    try:
        runner = Runner(sizes, root, systems, skipped, log)
        log(f"nobroker's framed ENQUEUE record for the standard job: {runner.baseline.size} B")
        two_calls = [s for s in systems if isinstance(s, NobrokerSystem) and s.two_calls]
        for key in selected:
            log(f"[{key}] ...")
            t = time.perf_counter()
            if key != "take_ack":  # the lease_one + ack variant only matters there
                for s in two_calls:
                    systems.remove(s)
            try:
                if key == "enqueue":
                    wls.append(runner.wl_enqueue())
                elif key == "batch":
                    wls.append(runner.wl_batch())
                elif key == "take_ack":
                    wls.append(runner.wl_take_ack())
                elif key == "cold_open":
                    wls.append(runner.wl_cold_open())
                elif key == "memory":
                    wls.append(runner.wl_memory())
                elif key == "drain":
                    drains = run_drains(sizes.drain_jobs, sizes.rounds, root, log)
            finally:
                for s in two_calls:
                    if s not in systems:
                        systems.insert(1, s)
            log(f"    {time.perf_counter() - t:.1f} s")
            gc.collect()
    finally:
        cleanup()
    durability = {s.name: s.durability for s in systems}
    takes = {s.name: s.takes for s in systems}
    for name, why in skipped.items():
        durability[name] = f"skipped: {why}"
    if args.markdown:
        print(f"nobroker vs peers, one run of `{command.strip()}` on {facts_line(facts)}; "
              f"medians of {sizes.rounds} interleaved rounds; \"nobroker Nx\" = how many times "
              "better nobroker did (above 1: ahead).\n")
        if wls:
            print(report_markdown(wls, durability))
        if drains is not None:
            print(f"\n{drain_title(drains, sizes.rounds)}:\n")
            print(render_markdown_table(*drain_rows(drains)))
        checks = target_checks(wls, durability) + (drain_checks(drains) if drains else [])
        if checks:
            print()
            for line in checks:
                print(f"- {line}")
    else:
        if wls:
            print(report_text(wls, durability, takes))
        if drains is not None:
            print(f"\n== {drain_title(drains, sizes.rounds)} ==")
            print(render_text_table(*drain_rows(drains)))
        total = time.perf_counter() - started
        print(f"\nnobroker vs it: above 1 = nobroker ahead (throughput ratio; for times and "
              f"memory the peer's figure over nobroker's). Total {total:.0f} s.")
        checks = target_checks(wls, durability) + (drain_checks(drains) if drains else [])
        if checks:
            print("\n== peer targets ==")
            for line in checks:
                print(line)
    if args.json:
        data = {"facts": facts, "command": command.strip(), "sizes": sizes.__dict__,
                "durability": durability, "takes": takes,
                "workloads": [{"key": w.key, "title": w.title, "kind": w.kind, "note": w.note,
                               "cells": {n: c.__dict__ for n, c in w.cells.items()},
                               "baselines": {n: c.__dict__ for n, c in w.baselines.items()}}
                              for w in wls]}
        if drains is not None:
            data["drain"] = {"jobs": drains.jobs, "skipped": drains.skipped,
                             "runs": {name: {n: [d.__dict__ for d in ds] for n, ds in by.items()}
                                      for name, by in drains.runs.items()}}
        args.json.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
