"""What a handle's connections may do on the server: a read-only one writes nothing,
and writers each count in a counter row of their own.

A read-only Queue must work with a role that may only SELECT, so its
`wait_finished` reads instead of putting a watch row (wakeups.py). Writing
connections take counter slots (session.py): more handles than the old 64
slots must still get one each, a full set of slots must still count exactly,
and a read-only connection takes none. Every test gets a schema of its own;
without a server the module is skipped.
"""

from __future__ import annotations

import threading
import time
import unittest
import uuid
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

from harness.postgres import drop_schema, fresh_schema_url, needs_postgres, open_queue
from harness.support import wait_until

from nobroker import JobNotFoundError, JobState

_SLOT_CLASS = 0x6E6F63  # session.py's: the first key of the counter-slot advisory locks
HANDLES = 40  # 80 writing connections: more than the old 64 slots, within max_connections


class _Schema(unittest.TestCase):
    def setUp(self) -> None:
        super().setUp()
        self.url = fresh_schema_url()
        self.addCleanup(drop_schema, self.url)
        self.schema = urlsplit(self.url).query.rsplit("schema=", 1)[1]
        self.admin = self.connect()

    def open(self, name: str = "q", **options: Any) -> Any:
        q = open_queue(self.url, name, **options)
        self.addCleanup(q.close)
        return q

    def connect(self) -> Any:
        """A plain connection of the test's own, closed at the end."""
        import psycopg

        from nobroker.postgres.url import parse

        conn = psycopg.connect(parse(self.url).conninfo, autocommit=True)
        self.addCleanup(conn.close)
        return conn

    def count(self, table: str) -> int:
        return int(self.admin.execute(f'SELECT count(*) FROM "{self.schema}".{table}'.encode()
                                      ).fetchone()[0])

    def true_counts(self) -> tuple[int, int, int]:
        """(pending, leased, dead) counted from the jobs themselves, not the counters."""
        row = self.admin.execute(
            f"SELECT count(*) FILTER (WHERE state = 0), count(*) FILTER (WHERE state = 1), "
            f"count(*) FILTER (WHERE state = 2) FROM \"{self.schema}\".jobs".encode()
        ).fetchone()
        return int(row[0]), int(row[1]), int(row[2])


def _slot(link: Any) -> str | None:
    """The counter slot the connection of `link` counts in (None: it takes none)."""
    return link.run("test", lambda conn: conn.execute(
        b"SELECT nullif(current_setting('nobroker.slot', true), '')").fetchone()[0])


def _pid(link: Any) -> int:
    return int(link.run("test", lambda conn: conn.info.backend_pid))


@needs_postgres
class ReadOnlyWaitTest(_Schema):
    """A read-only handle's wait_finished reads until the job finished: no watch row."""

    def setUp(self) -> None:
        super().setUp()
        # Any write to watches, from any connection, leaves a row here for the test.
        s = f'"{self.schema}"'
        self.open().close()  # creates the schema
        for statement in (
                f"CREATE TABLE {s}.watch_writes (op text, pid integer)",
                f"CREATE FUNCTION {s}.log_watch() RETURNS trigger LANGUAGE plpgsql AS $$ "
                f"BEGIN INSERT INTO {s}.watch_writes VALUES (TG_OP, pg_backend_pid()); "
                f"RETURN NULL; END $$",
                f"CREATE TRIGGER log_watch AFTER INSERT OR UPDATE OR DELETE ON {s}.watches "
                f"FOR EACH ROW EXECUTE FUNCTION {s}.log_watch()"):
            self.admin.execute(statement.encode())

    def reading(self, writer: Any) -> bool:
        """True once a connection other than the writer's has read a job: the waiter."""
        row = self.admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> ALL(%s) AND query LIKE %s",
            ([_pid(writer.backend._link), self.admin.info.backend_pid],
             f'%FROM "{self.schema}".jobs AS j%j.id = $%')).fetchone()
        return bool(row[0])

    def test_a_read_only_wait_finished_gets_a_writer_s_ack_and_writes_no_watch(self) -> None:
        writer, reader = self.open(), self.open(readonly=True)
        job = writer.enqueue("x")
        got: list[Any] = []
        waiter = threading.Thread(target=lambda: got.append(reader.wait_finished(job.id, 30)))
        waiter.start()
        self.addCleanup(waiter.join, 30)
        wait_until(lambda: self.reading(writer), 30, "the reader to read its job")
        leased = writer.lease_one()
        assert leased is not None
        writer.ack(leased, result={"ok": True})
        waiter.join(30)
        self.assertFalse(waiter.is_alive(), "the read-only waiter never saw the ack")
        self.assertEqual([(j.id, j.state, j.result) for j in got],
                         [(job.id, JobState.DONE, {"ok": True})])
        self.assertEqual(reader.result(job.id, 0), {"ok": True})
        self.assertEqual(self.count("watches"), 0)
        self.assertEqual(self.admin.execute(
            f'SELECT * FROM "{self.schema}".watch_writes'.encode()).fetchall(), [],
            "the read-only handle wrote to watches")

    def test_a_read_only_wait_finished_times_out_on_time_and_knows_unknown_ids(self) -> None:
        writer, reader = self.open(), self.open(readonly=True)
        job = writer.enqueue("never acked")
        for timeout in (0.0, 0.3, 0.7):
            started = time.monotonic()
            self.assertIsNone(reader.wait_finished(job.id, timeout))
            took = time.monotonic() - started
            self.assertGreaterEqual(took, timeout)
            self.assertLess(took, timeout + 0.25, "a pause overran the caller's timeout")
        self.assertRaises(TimeoutError, reader.result, job.id, 0.05)
        self.assertRaises(JobNotFoundError, reader.wait_finished, "never-enqueued", 1.0)
        self.assertEqual(self.count("watch_writes"), 0)


@needs_postgres
class SelectOnlyRoleTest(_Schema):
    """A read-only Queue opened by a role that has only SELECT on the queue set."""

    def setUp(self) -> None:
        super().setUp()
        row = self.admin.execute(b"SELECT rolcreaterole OR rolsuper FROM pg_roles "
                                 b"WHERE rolname = current_user").fetchone()
        if not row[0]:
            self.skipTest("the test server's user may not create roles "
                          "(tools/postgres/cluster.py gives it CREATEROLE)")
        self.open().close()  # creates the schema as the owner
        role, password = "t_ro_" + uuid.uuid4().hex[:12], uuid.uuid4().hex
        s = f'"{self.schema}"'
        self.admin.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{password}'".encode())
        self.addCleanup(self.admin.execute, f"DROP ROLE {role}".encode())
        self.admin.execute(f"GRANT USAGE ON SCHEMA {s} TO {role}".encode())
        self.admin.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA {s} TO {role}".encode())
        self.addCleanup(self.admin.execute, f"REVOKE ALL ON SCHEMA {s} FROM {role}".encode())
        self.addCleanup(self.admin.execute,
                        f"REVOKE ALL ON ALL TABLES IN SCHEMA {s} FROM {role}".encode())
        parts = urlsplit(self.url)
        host = parts.netloc.rsplit("@", 1)[1]
        self.select_only_url = urlunsplit(parts._replace(
            netloc=f"{role}:{quote(password)}@{host}"))

    def test_a_select_only_role_reads_waits_and_gets_results(self) -> None:
        writer = self.open()
        reader = open_queue(self.select_only_url, "q", readonly=True)
        self.addCleanup(reader.close)
        job, other = writer.enqueue("x"), writer.enqueue("y")
        got: list[Any] = []
        waiter = threading.Thread(target=lambda: got.append(reader.wait_finished(job.id, 30)))
        waiter.start()
        self.addCleanup(waiter.join, 30)
        self.assertEqual(reader.stats().pending, 2)
        self.assertTrue(reader.wait(0.05), "an idle wait sees the due jobs")
        for leased in writer.lease(2):
            writer.ack(leased, result=leased.payload)
        waiter.join(30)
        self.assertEqual([j.state for j in got], [JobState.DONE])
        self.assertEqual(reader.result(other.id, 5), "y")
        self.assertEqual(reader.stats().pending, 0)


@needs_postgres
class CounterSlotTest(_Schema):
    """Each writing connection counts in a counter row of its own, and stats() is exact."""

    def writers(self, count: int) -> list[Any]:
        """`count` handles with both their connections open (the idle-wait one too)."""
        handles = [self.open() for _ in range(count)]
        for q in handles:
            self.assertFalse(q.wait(0), "nothing is due")  # connects the idle-wait link
        return handles

    def test_more_handles_than_the_old_64_slots_each_count_in_a_slot_of_their_own(self
                                                                                  ) -> None:
        from nobroker.postgres.connection import SLOTS

        handles = self.writers(HANDLES)
        links = [link for q in handles for link in (q.backend._link, q.backend._wakeups._waiter)]
        slots = [int(_slot(link) or -1) for link in links]
        self.assertEqual(len(set(slots)), 2 * HANDLES, "two connections share a counter row")
        self.assertTrue(all(0 <= slot < SLOTS for slot in slots), sorted(slots))
        held = dict(self.admin.execute(
            "SELECT pid, objid::integer FROM pg_locks WHERE locktype = 'advisory' "
            "AND classid = %s AND granted", (_SLOT_CLASS,)).fetchall())
        self.assertEqual([held.get(_pid(link)) for link in links], slots,
                         "a connection's slot is not the advisory lock it holds")
        for q in handles:  # a lease on the idle-wait connection, an ack on the other
            q.enqueue_many(["a", "b", "c"])
            first, _ = q.lease(2)
            q.ack(first)
        self.assertEqual(self.true_counts(), (HANDLES, HANDLES, 0))
        stats = handles[0].stats()
        self.assertEqual((stats.pending, stats.leased, stats.dead, stats.total),
                         (HANDLES, HANDLES, 0, 2 * HANDLES))

    def test_when_every_slot_is_held_writers_share_fallback_rows_and_count_exactly(self
                                                                                   ) -> None:
        from nobroker.postgres.connection import SLOTS

        hog = self.connect()  # holds every slot that nobody else holds
        hog.execute("SELECT pg_try_advisory_lock(%s, s) FROM generate_series(0, %s) AS s",
                    (_SLOT_CLASS, SLOTS - 1))
        handles = self.writers(2)
        links = [link for q in handles for link in (q.backend._link, q.backend._wakeups._waiter)]
        slots = [int(_slot(link) or -1) for link in links]
        self.assertTrue(all(SLOTS <= slot < 2 * SLOTS for slot in slots), slots)
        failures: list[BaseException] = []

        def churn(q: Any) -> None:
            try:
                for _ in range(40):
                    q.enqueue_many(["a", "b"])
                    for job in q.lease(1):
                        q.ack(job)
            except BaseException as exc:  # reported by the test
                failures.append(exc)

        threads = [threading.Thread(target=churn, args=(q,)) for q in handles * 2]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        self.assertEqual(failures, [])
        pending, leased, dead = self.true_counts()
        self.assertEqual(pending + leased, 4 * 40)
        stats = handles[1].stats()
        self.assertEqual((stats.pending, stats.leased, stats.dead), (pending, leased, dead))

    def test_a_read_only_handle_takes_no_counter_slot(self) -> None:
        self.open().close()  # creates the schema
        reader = self.open(readonly=True)
        self.assertFalse(reader.wait(0), "nothing is due")
        for link in (reader.backend._link, reader.backend._wakeups._waiter):
            self.assertIsNone(_slot(link))
            held = self.admin.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = %s "
                "AND pid = %s", (_SLOT_CLASS, _pid(link))).fetchone()[0]
            self.assertEqual(held, 0, "a read-only connection holds a counter slot")


if __name__ == "__main__":
    unittest.main()
