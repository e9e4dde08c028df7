"""Jobs copied in and out of a PostgreSQL queue (`nobroker migrate`, nobroker.transfer):
copied jobs inserted as they were (backend.JobImport) and handed out with their limit
keys (JobExport), the modes of the waiting jobs, which a copy gives the target with
their prerequisites (Dependencies.wait_modes), and the revivable cancelled dependents
(backend.DormantJob; the `dormant` rows of migrations/0007, with the concurrency cap of
migrations/0008), and the rate windows' latest starts (window_copies.RateWindows: the rings
of migrations/0008, which keep no period), both ways.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import psycopg

from ..backend import CopiedLimits, DormantJob
from ..codec import encode_payload
from ..models import Job, JobState
from ..window_copies import CopiedWindow, merged_starts
from .connection import Link
from .graphs import MODE_CODES
from .limited import columns_of, keys_of_columns
from .rows import STATES, import_params, job_from_row
from .statements import Statements

__all__ = ["Copies", "import_jobs", "export_jobs", "export_limits", "wait_modes", "export_dormant",
           "import_dormant", "export_windows", "import_windows"]

Conn = psycopg.Connection[tuple[Any, ...]]

_MODES = {code: mode for mode, code in MODE_CODES.items()}


def import_jobs(link: Link, sql: Statements, params: dict[str, Any], jobs: Sequence[Job],
                keyed: Sequence[bool], limits: Mapping[str, CopiedLimits]) -> list[JobState]:
    """Insert copied jobs as they were (with their limit keys and caps, if `limits` has
    them), in one transaction; ids known are skipped."""
    if not jobs:
        return []
    copied = [limits.get(job.id, (None, None)) for job in jobs]
    params = {**params, **import_params(jobs, keyed),
              "rks": [columns_of(keys)[0] for keys, _ in copied],
              "cks": [columns_of(keys)[1] for keys, _ in copied],
              "ccs": [cap for _, cap in copied]}

    def run(conn: Conn) -> list[JobState]:
        with conn.transaction():
            rows = conn.execute(sql.import_jobs, params).fetchall()
            conn.execute(sql.bump_seq, params)
        return [STATES[row[0]] for row in rows]

    return link.run("import", run)


def export_jobs(link: Link, sql: Statements, params: dict[str, Any]
                ) -> list[tuple[Job, bool]]:
    """Every pending, leased, dead and waiting job in enqueue order, each with whether
    its id is a caller's key."""
    rows = _rows(link, "export", sql.export_jobs, params)
    return [(job_from_row(row[:17]), bool(row[17])) for row in rows]


def export_limits(link: Link, sql: Statements, params: dict[str, Any]
                  ) -> dict[str, CopiedLimits]:
    """The limit keys and stored cap of each job export_jobs hands out that has keys."""
    rows = _rows(link, "export", sql.export_limits, params)
    return {str(job_id): (keys, cap) for job_id, rate_key, conc_key, cap in rows
            for keys in (keys_of_columns(rate_key, conc_key),) if keys is not None}


def wait_modes(link: Link, sql: Statements, params: dict[str, Any]) -> dict[str, str]:
    """Each waiting job's mode (dependencies.SUCCESS, ANY or FAILURE), by id."""
    rows = _rows(link, "wait_modes", sql.wait_modes, params)
    return {str(job_id): _MODES[int(code)] for job_id, code in rows}


def export_dormant(link: Link, sql: Statements, params: dict[str, Any]) -> list[DormantJob]:
    """The revivable cancelled dependents still kept, in enqueue order."""
    rows = _rows(link, "export", sql.export_dormant, params)
    return [DormantJob(job_from_row(row[:16]), bool(row[16]), keys_of_columns(row[17], row[18]),
                       tuple(row[19]), tuple(row[20]), row[21]) for row in rows]


def import_dormant(link: Link, sql: Statements, params: dict[str, Any],
                   jobs: Sequence[DormantJob]) -> list[str]:
    """Insert copied revivable dependents, cancelled now and kept `ttl` seconds, with
    their `dormant` rows; ids known are skipped. The ids of those inserted."""
    if not jobs:
        return []
    edges = [(p, copy.job.id, pos, pos >= len(copy.unmet)) for copy in jobs
             for pos, p in enumerate((*copy.unmet, *copy.failed))]
    values = {**params,
              "ids": [c.job.id for c in jobs], "prs": [c.job.priority for c in jobs],
              "ats": [c.job.available_at for c in jobs],
              "ts": [c.job.enqueued_at for c in jobs],
              "mas": [c.job.max_attempts for c in jobs], "atts": [c.job.attempts for c in jobs],
              "ks": [c.keyed for c in jobs], "errs": [c.job.last_error for c in jobs],
              "ps": [encode_payload(c.job.payload) for c in jobs],
              "rks": [columns_of(c.keys)[0] for c in jobs],
              "cks": [columns_of(c.keys)[1] for c in jobs], "ccs": [c.cap for c in jobs],
              "e_pre": [e[0] for e in edges], "e_dep": [e[1] for e in edges],
              "e_pos": [e[2] for e in edges], "e_failed": [e[3] for e in edges]}

    def run(conn: Conn) -> list[str]:
        with conn.transaction():
            rows = conn.execute(sql.import_dormant, values).fetchall()
            conn.execute(sql.bump_seq, values)
        return [str(row[0]) for row in rows]

    return link.run("import", run)


def export_windows(link: Link, sql: Statements, params: dict[str, Any]
                   ) -> list[CopiedWindow]:
    """Each rate key's ring that holds a start: its starts, oldest first, as many as it
    has slots (at least the count of every process that leased under it); no period."""
    rows = _rows(link, "export", sql.export_windows, {**params, "keys": None})
    return [CopiedWindow(str(key), max(size or 0, len(starts)), None, tuple(starts))
            for key, size, starts in rows if starts]


def import_windows(link: Link, sql: Statements, params: dict[str, Any],
                   windows: Sequence[CopiedWindow]) -> None:
    """Each copied window merged into this queue's ring of its key (the ring's size, at
    least the copy's count; window_copies.merged_starts) and laid out again, under the
    lock a limited lease takes, in one transaction."""
    if not windows:
        return

    def run(conn: Conn) -> None:
        with conn.transaction():
            conn.execute(sql.lock_windows, params)
            kept = {str(key): (size or 0, list(starts)) for key, size, starts in conn.execute(
                sql.export_windows, {**params, "keys": [w.key for w in windows]})}
            rings = []
            for copy in windows:
                size, starts = kept.get(copy.key, (0, []))
                size = max(size, copy.count)
                rings.append((copy.key, size, merged_starts(starts, copy.starts, size)))
            conn.execute(sql.import_windows, {
                **params, "keys": [key for key, _, _ in rings],
                "sizes": [size for _, size, _ in rings],
                "ns": [len(starts) for _, _, starts in rings],
                "lasts": [starts[-1] for _, _, starts in rings],
                "s_keys": [key for key, _, starts in rings for _ in starts],
                "s_slots": [slot for _, _, starts in rings for slot in range(len(starts))],
                "s_ats": [at for _, _, starts in rings for at in starts]})

    link.run("import", run)


def _rows(link: Link, operation: str, query: bytes,
          params: dict[str, Any]) -> list[tuple[Any, ...]]:
    def run(conn: Conn) -> list[tuple[Any, ...]]:
        return conn.execute(query, params).fetchall()

    return link.run(operation, run)


class Copies:
    """PostgresBackend's copying methods (JobImport, JobExport, Revival.export_dormant,
    Dependencies.wait_modes, RateWindows), each this module's function on its link,
    statements and bound values."""

    _link: Link
    _sql: Statements
    _params: Callable[..., dict[str, Any]]

    def import_jobs(self, jobs: Sequence[Job], keyed: Sequence[bool],
                    limits: Mapping[str, CopiedLimits] | None = None) -> list[JobState]:
        return import_jobs(self._link, self._sql, self._params(), jobs, keyed, limits or {})

    def export_jobs(self) -> list[tuple[Job, bool]]:  # JobExport.export_jobs
        return export_jobs(self._link, self._sql, self._params())

    def export_limits(self) -> dict[str, CopiedLimits]:  # JobExport.export_limits
        return export_limits(self._link, self._sql, self._params())

    def import_dormant(self, jobs: Sequence[DormantJob]) -> list[str]:
        return import_dormant(self._link, self._sql, self._params(), jobs)

    def export_dormant(self) -> list[DormantJob]:  # Revival.export_dormant
        return export_dormant(self._link, self._sql, self._params())

    def export_windows(self) -> list[CopiedWindow]:  # RateWindows.export_windows
        return export_windows(self._link, self._sql, self._params())

    def import_windows(self, windows: Sequence[CopiedWindow]) -> None:
        import_windows(self._link, self._sql, self._params(), windows)

    def wait_modes(self) -> dict[str, str]:  # Dependencies.wait_modes
        return wait_modes(self._link, self._sql, self._params())
