"""What a handle's connections may do on the server: a read-only one writes nothing.

A read-only Queue must work with a role that may only SELECT, so its
`wait_finished` reads instead of putting a watch row (wakeups.py). Every
test gets a schema of its own; without a server the module is skipped.
"""

from __future__ import annotations

import threading
import time
import unittest
import uuid
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

from pg_support import drop_schema, fresh_schema_url, needs_postgres, open_queue
from support import wait_until

from nobroker import JobNotFoundError, JobState



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
                          "(tools/pg_cluster.py gives it CREATEROLE)")
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

if __name__ == "__main__":
    unittest.main()
