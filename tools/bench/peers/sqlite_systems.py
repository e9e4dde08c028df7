"""tools/bench/peers/run.py's SQLite-backed peers as Systems: Huey's SqliteHuey storage,
persist-queue's SQLiteAckQueue, litequeue (as shipped and synchronous=FULL), and
a plain sqlite3 table queue.

huey, persistqueue and litequeue are imported only inside methods (peer_module).
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

from tools.bench.peers.systems import System, peer_module, sqlite_durability, timed_first_job


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
        return timed_first_job(lambda: self._make(d), lambda s: s.dequeue(), lambda s: s.close())


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
        return timed_first_job(lambda: self._make(d), lambda q: q.get(block=False, raw=True),
                               lambda q: q.close())


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
        return timed_first_job(lambda: self._make(d), lambda q: q.pop(), lambda q: q.close())


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
        return timed_first_job(lambda: self._connect(d), self._take, lambda c: c.close())
