"""Jobs with prerequisites on PostgreSQL: enqueue's depends_on= and enqueue_graph.

Both are one transaction (`write`): lock the prerequisites already in the queue
(sql/queries/lock_prerequisites.sql, in id order: an ack of one waits for this
transaction, then finds the dependents it added), decide each new job's state
here (`plan`, the rules of docs/TASKS.md "Dependencies", as the file backend
decides them), then insert every job, its `waits` row and its `prerequisites`
rows in one statement (enqueue_graph.sql). What happens when a prerequisite
finishes is the server's: nb_settle (sql/migrations/0004_dependencies.sql), in
the statement that finishes it. `plan` is pure: no connection, no SQL text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import psycopg

from ..backend import CopiedLimits
from ..dependencies import ANY, FAILURE, SUCCESS, GraphNode, verdict
from ..errors import JobNotFoundError, NobrokerError
from ..limits import Limits
from ..models import Job, JobState
from .connection import Link
from .limited import keys_params
from .rows import BLOCKED, job_from_row
from .statements import Statements
from .transactional import Conflict, retried

__all__ = ["Node", "Planned", "plan", "write", "enqueue", "mode_of", "nodes_of",
           "MODE_CODES"]

Conn = psycopg.Connection[tuple[Any, ...]]

MODE_CODES: Final = {SUCCESS: 0, ANY: 1, FAILURE: 2}  # waits.mode, as nb_settle reads it
_PENDING, _CANCELLED = 0, 4
_FAILED: Final = {2: str(JobState.DEAD), 4: str(JobState.CANCELLED)}  # failed jobs' codes


@dataclass(frozen=True, slots=True)
class Node:
    """One job to write: its payload text and options, and its prerequisites (an int
    is an earlier node of the same write, a str a job already in the queue)."""

    payload_text: str
    depends_on: tuple[int | str, ...]
    mode: str  # a key of MODE_CODES
    priority: int
    delay: float
    max_attempts: int
    job_id: str | None
    meta: str | None = None  # its metadata from the start, JSON text (rows.enqueue_params)
    rate_key: str = ""  # its limit keys ('' for none: limited.key_params), kept while it
    conc_key: str = ""  # waits, so that it is limited once released
    conc_cap: int | None = None  # the cap declared for conc_key (limit_use shows it)


@dataclass(frozen=True, slots=True)
class Planned:
    """A node's state when written: BLOCKED (waiting for `unmet`), 0 pending, or 4
    cancelled with `error`."""

    state: int
    unmet: tuple[str, ...] = ()
    error: str | None = None


def mode_of(allow_failure: bool) -> str:
    """depends_on='s mode: every prerequisite to succeed, or (allow_failure) to finish."""
    return ANY if allow_failure else SUCCESS


def nodes_of(payload_texts: Sequence[str], nodes: Sequence[GraphNode], max_attempts: int,
             limits: Limits, copied: Mapping[str, CopiedLimits] | None = None) -> list[Node]:
    """enqueue_graph's GraphNodes (checked by the Queue) with their payloads' texts and
    limit keys (or those `copied` gives their ids: nobroker migrate's), a max_attempts
    None being the queue's `max_attempts`."""
    keys = keys_params(limits, [n.payload for n in nodes], None if copied is None else
                       [copied.get(n.job_id or "", (None, None)) for n in nodes])
    return [Node(text, tuple(n.depends_on), n.mode, n.priority, float(n.delay),
                 max_attempts if n.max_attempts is None else n.max_attempts, n.job_id,
                 None, rate_key, conc_key, cap)
            for text, n, rate_key, conc_key, cap in zip(payload_texts, nodes, keys["rks"],
                                                        keys["cks"], keys["ccs"], strict=True)]


def _planned(mode: str, failed: tuple[str, str] | None, died: bool,
             unmet: list[str]) -> Planned:
    """dependencies.verdict's answer as a state to write."""
    released, error = verdict(mode, failed, died, not unmet)
    if released:
        return Planned(_PENDING)
    return Planned(_CANCELLED, error=error) if error else Planned(BLOCKED, tuple(unmet))


def plan(nodes: Sequence[Node], ids: Sequence[str], known: dict[str, int]) -> list[Planned]:
    """Each node's state, in node order: `ids` are the nodes' job ids, `known` the
    state codes of the jobs already in the queue that they name."""
    planned: list[Planned] = []
    for node in nodes:
        unmet: list[str] = []
        failed: tuple[str, str] | None = None
        died = False
        for prerequisite in node.depends_on:
            if isinstance(prerequisite, int):
                job_id, code = ids[prerequisite], planned[prerequisite].state
            else:
                job_id, code = prerequisite, known[prerequisite]
            if code in _FAILED:
                failed = failed or (job_id, _FAILED[code])
                died = died or code == 2
            elif code != 3:
                unmet.append(job_id)
        planned.append(_planned(node.mode, failed, died, unmet))
    return planned


def write(conn: Conn, sql: Statements, params: dict[str, Any], nodes: Sequence[Node],
          keep_existing: bool = False) -> list[Job] | None:
    """The nodes written in `conn`'s open transaction; their Jobs in node order. A key
    already taken is NobrokerError, or, with `keep_existing` (enqueue's rule: the
    caller returns that job), None and nothing written. JobNotFoundError for a
    prerequisite the queue does not know (or no longer), before anything is written."""
    named = [p for node in nodes for p in node.depends_on if isinstance(p, str)]
    keys = [node.job_id for node in nodes if node.job_id is not None]
    for key in keys:  # a finished key past its retention, or cancelled, is free
        conn.execute(sql.forget_key, params | {"id": key})
    rows = (conn.execute(sql.lock_prerequisites, params | {"ids": named + keys}).fetchall()
            if named or keys else [])  # a graph of new jobs only: one round trip less
    known = {str(row[0]): int(row[1]) for row in rows}
    for job_id in named:
        if job_id not in known:
            raise JobNotFoundError(job_id, "prerequisite job")
    taken = [key for key in keys if key in known]
    if taken and not keep_existing:
        raise NobrokerError(f"job id {taken[0]!r} is already in the queue")
    if taken:
        return None
    seqs = [int(row[0]) for row in conn.execute(sql.job_seqs, params | {"n": len(nodes)})]
    ids = [node.job_id or f"{seq:016x}" for node, seq in zip(nodes, seqs, strict=True)]
    planned = plan(nodes, ids, known)
    edges = [(pre, ids[i], pos) for i, p in enumerate(planned)
             for pos, pre in enumerate(p.unmet)]
    prerequisites = {pre for pre, _, _ in edges}
    waiting = [(ids[i], len(p.unmet), MODE_CODES[nodes[i].mode])
               for i, p in enumerate(planned) if p.state == BLOCKED]
    values = params | {
        "ids": ids, "seqs": seqs, "states": [p.state for p in planned],
        "prs": [n.priority for n in nodes], "delays": [n.delay for n in nodes],
        "mas": [n.max_attempts for n in nodes], "ks": [n.job_id is not None for n in nodes],
        "ps": [n.payload_text for n in nodes], "ms": [n.meta for n in nodes],
        "rks": [n.rate_key for n in nodes], "cks": [n.conc_key for n in nodes],
        "ccs": [n.conc_cap for n in nodes],
        "errs": [p.error for p in planned],
        "deps": [job_id in prerequisites for job_id in ids],
        "flag": sorted(prerequisites.intersection(known)),
        "w_ids": [w[0] for w in waiting], "w_unmet": [w[1] for w in waiting],
        "w_modes": [w[2] for w in waiting],
        "e_pre": [e[0] for e in edges], "e_dep": [e[1] for e in edges],
        "e_pos": [e[2] for e in edges]}
    written = {row[0]: row for row in conn.execute(sql.enqueue_graph, values).fetchall()}
    if len(written) != len(nodes):
        raise Conflict  # a generated id met a key, or a key came meanwhile: roll back
    return [job_from_row((*written[job_id], list(p.unmet)))
            for job_id, p in zip(ids, planned, strict=True)]


def enqueue(link: Link, sql: Statements, params: dict[str, Any], nodes: Sequence[Node],
            keep_existing: bool = False) -> list[Job]:
    """`write` in a transaction of its own on `link`, tried again after a Conflict;
    with `keep_existing`, a key already taken gives that job (one node: enqueue's)."""
    def run(conn: Conn) -> list[Job]:
        with conn.transaction():
            jobs = write(conn, sql, params, nodes, keep_existing)
            if jobs is None:
                row = conn.execute(sql.get, params | {"id": nodes[0].job_id}).fetchone()
                assert row is not None, "a key that is taken is visible"
                return [job_from_row(row)]
            return jobs

    return retried(link, "enqueue", run)
