"""Planning `enqueue_graph` on the file log: every node's ENQUEUE in one batch.

A node without prerequisites is an ordinary ENQUEUE; one with them is planned as
depends_on= plans a job (dependencies.plan_dependent_enqueue), its prerequisites
being jobs already in the queue (by id) or earlier nodes of the graph (by
index), which are new in this batch and so unfinished, unless planned cancelled
at once (a node whose own prerequisite had already failed). Everything that can
be wrong (an unknown prerequisite id, a job id in use) is refused before the
first record is added. Pure: no os, time, random or threads.
"""

from __future__ import annotations

from collections.abc import Sequence

from ...backoff import Rng
from ...dependencies import GraphNode, with_graph_nodes
from ...errors import NobrokerError
from .batch import Batch
from .commands import new_job_ids
from .dependencies import plan_dependent_enqueue, prerequisites
from .state import JobState, QueueState

__all__ = ["plan_graph"]


def plan_graph(state: QueueState, batch: Batch, now: float, payload_texts: Sequence[str],
               nodes: Sequence[GraphNode], rng: Rng) -> tuple[list[str], list[JobState]]:
    """The ENQUEUE (and CANCEL) records of every node, in node order: the jobs' ids
    and the state each is left in (pending, waiting or cancelled)."""
    for node in nodes:
        if node.job_id is not None and (node.job_id in state.jobs
                                        or node.job_id in state.done_keys):
            raise NobrokerError(f"job {node.job_id!r} is already in the queue: a graph's "
                                "job ids must be new")
    # What the queue knows of each node's prerequisites by id (JobNotFoundError now).
    known = [prerequisites(state, [p for p in node.depends_on if isinstance(p, str)])
             if node.depends_on else None for node in nodes]
    generated = iter(new_job_ids(state.jobs, sum(node.job_id is None for node in nodes),
                                 rng))
    ids = [next(generated) if node.job_id is None else node.job_id for node in nodes]
    if len(set(ids)) != len(ids):  # a caller's id that the next generated one matches
        raise NobrokerError("a graph's job id is one the queue is about to generate")
    outcomes: list[JobState] = []
    for node, job_id, payload_text, found in zip(nodes, ids, payload_texts, known,
                                                 strict=True):
        keyed = node.job_id is not None
        assert node.max_attempts is not None  # checked_nodes filled it in
        if found is None:
            batch.add_enqueue(job_id, node.priority, now + node.delay, now,
                              node.max_attempts, keyed, payload_text)
            outcomes.append(JobState.PENDING)
            continue
        outcomes.append(plan_dependent_enqueue(
            batch, now, job_id, payload_text, priority=node.priority, delay=node.delay,
            max_attempts=node.max_attempts, keyed=keyed,
            known=with_graph_nodes(node.depends_on, found, ids,
                                   lambda index: outcomes[index] is JobState.CANCELLED),
            mode=node.mode))
    return ids, outcomes
