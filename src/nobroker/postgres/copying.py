"""Jobs copied in and out of a PostgreSQL queue (`nobroker migrate`, nobroker.transfer):
copied jobs inserted as they were (backend.JobImport), and the modes of the waiting
jobs, which a copy gives the target with their prerequisites (Dependencies.wait_modes).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

from ..models import Job, JobState
from .connection import Link
from .graphs import MODE_CODES
from .rows import STATES, import_params
from .statements import Statements

__all__ = ["import_jobs", "wait_modes"]

Conn = psycopg.Connection[tuple[Any, ...]]

_MODES = {code: mode for mode, code in MODE_CODES.items()}


def import_jobs(link: Link, sql: Statements, params: dict[str, Any], jobs: Sequence[Job],
                keyed: Sequence[bool]) -> list[JobState]:
    """Insert copied jobs as they were, in one transaction; ids known are skipped."""
    if not jobs:
        return []
    params = {**params, **import_params(jobs, keyed)}

    def run(conn: Conn) -> list[JobState]:
        with conn.transaction():
            rows = conn.execute(sql.import_jobs, params).fetchall()
            conn.execute(sql.bump_seq, params)
        return [STATES[row[0]] for row in rows]

    return link.run("import", run)


def wait_modes(link: Link, sql: Statements, params: dict[str, Any]) -> dict[str, str]:
    """Each waiting job's mode (dependencies.SUCCESS, ANY or FAILURE), by id."""
    rows = link.run("wait_modes", lambda conn: conn.execute(sql.wait_modes, params).fetchall())
    return {str(job_id): _MODES[int(code)] for job_id, code in rows}
