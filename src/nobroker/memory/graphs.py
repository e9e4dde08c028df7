"""`enqueue_graph` on the in-memory backend: every node added in one change.

As the file engine plans it (file/state/graphs.py), as moves on the table: a
node without prerequisites is an ordinary new job; one with them waits, or is
pending or cancelled at once, by verdict() over what the table knows of its
prerequisites by id and of the earlier nodes it names by index. Everything that
can be wrong is refused before the first job is added. Pure: `now` and `keep`
come in as arguments.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from ..backend import CopiedLimits
from ..dependencies import GraphNode, verdict, with_graph_nodes
from ..errors import JobNotFoundError, NobrokerError
from ..limits import Limits
from ..models import JobState
from .jobs import MemoryJob
from .table import MemoryTable

__all__ = ["add_graph", "prerequisites"]


def add_graph(table: MemoryTable, now: float, payload_texts: Sequence[str],
              nodes: Sequence[GraphNode], keep: float, default_attempts: int,
              limits: Limits, copied: Mapping[str, CopiedLimits] | None = None
              ) -> list[MemoryJob]:
    """The nodes' jobs, in node order; a node cancelled at once is kept `keep` seconds,
    a node's max_attempts None is `default_attempts`; each has the limit keys
    `limits` computes from its payload (a waiting one is limited once released), or
    those `copied` gives its id (nobroker migrate's)."""
    for node in nodes:
        if node.job_id is not None and (node.job_id in table.jobs
                                        or node.job_id in table.done_keys):
            raise NobrokerError(f"job {node.job_id!r} is already in the queue: a graph's "
                                "job ids must be new")
    known = [prerequisites(table, [p for p in node.depends_on if isinstance(p, str)])
             if node.depends_on else None for node in nodes]
    ids = [table.new_id() if node.job_id is None else node.job_id for node in nodes]
    if len(set(ids)) != len(ids):  # a caller's id that a generated one matches
        raise NobrokerError("a graph's job id is one the queue is about to generate")
    jobs: list[MemoryJob] = []
    for node, job_id, text, found in zip(nodes, ids, payload_texts, known, strict=True):
        unmet: list[str] = []
        released, error = True, None
        if found is not None:
            unmet, failed, died = with_graph_nodes(
                node.depends_on, found, ids,
                lambda index: jobs[index].state is JobState.CANCELLED)
            released, error = verdict(node.mode, failed, died, not unmet)
        keys, cap = (limits.stored_keys(node.payload) if copied is None
                     else copied.get(node.job_id or "", (None, None)))
        job = table.add(job_id, node.job_id is not None, text, node.priority,
                        now + node.delay, now, node.max_attempts or default_attempts,
                        None if released or error else unmet, node.mode, keys, cap)
        if error is not None:
            job.last_error = error
            table.finish(job, JobState.CANCELLED, now, keep)
        jobs.append(job)
    return jobs


def prerequisites(table: MemoryTable, depends_on: Iterable[str]
                  ) -> tuple[list[str], tuple[str, JobState] | None, bool]:
    """The prerequisites not finished yet, the first that failed (dead or cancelled)
    with its state, and whether one was dead-lettered; JobNotFoundError for an id
    the queue does not know (a finished keyed job still remembered counts as done)."""
    unmet: list[str] = []
    failed: tuple[str, JobState] | None = None
    died = False
    for job_id in depends_on:
        job = table.jobs.get(job_id)
        if job is None:
            if job_id not in table.done_keys:
                raise JobNotFoundError(job_id, "prerequisite job")
        elif job.state in (JobState.DEAD, JobState.CANCELLED):
            failed = failed or (job_id, job.state)
            died = died or job.state is JobState.DEAD
        elif job.state is not JobState.DONE:
            unmet.append(job_id)
    return unmet, failed, died
