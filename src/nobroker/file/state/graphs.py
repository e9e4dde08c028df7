"""Planning `enqueue_graph` on the file log: every node's ENQUEUE in one batch.

A node without prerequisites is an ordinary ENQUEUE, and a run of them alike
(no job id, the same options) is written as enqueue_many writes its jobs, so
that a graph of independent nodes costs what enqueue_many does (replay applies
such a run in one step too). A node with prerequisites is planned as
depends_on= plans a job (dependencies.plan_dependent_enqueue), its
prerequisites being jobs already in the queue (by id) or earlier nodes of the
graph (by index), which are new in this batch and so unfinished, unless
planned cancelled at once (a node whose own prerequisite had already failed).
Everything that can be wrong (an unknown prerequisite id, a job id in use) is
refused before the first record is added. Pure: no os, time, random or threads.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ...backoff import Rng
from ...dependencies import GraphNode, with_graph_nodes
from ...errors import NobrokerError
from ...limits import JobKeys
from ...models import Job, new_pending_jobs
from .batch import Batch
from .commands import new_job_ids
from .dependencies import plan_dependent_enqueue, prerequisites
from .limitfields import plan_limited_enqueue
from .state import JobState, QueueState

__all__ = ["plan_graph", "graph_jobs", "Planned"]

# What plan_graph planned: the jobs' ids, the state each is left in, and the runs
# [start, end) of plain nodes (no prerequisites, no job id, the same options).
Planned = tuple[list[str], list[JobState], list[tuple[int, int]]]


def plain_runs(nodes: Sequence[GraphNode],
               keys: Sequence[JobKeys | None] = ()) -> list[tuple[int, int]]:
    """[start, end) of each run of nodes enqueue_many could write together (none with
    limit keys: `keys`, each node's)."""
    runs: list[tuple[int, int]] = []
    start = -1
    priority: object = None
    delay: object = None
    attempts: object = None
    for index, node in enumerate(nodes):
        if node.depends_on or node.job_id is not None or (keys and keys[index]):
            if start >= 0:
                runs.append((start, index))
                start = -1
            continue
        if start >= 0:
            # the same option objects (a group of one task's signatures), or equal ones
            if (node.priority is priority and node.delay is delay
                    and node.max_attempts is attempts) or (
                    (node.priority, node.delay, node.max_attempts) == (priority, delay,
                                                                       attempts)):
                continue
            runs.append((start, index))
        start, priority, delay, attempts = index, node.priority, node.delay, node.max_attempts
    if start >= 0:
        runs.append((start, len(nodes)))
    return runs


def plan_graph(state: QueueState, batch: Batch, now: float, payload_texts: Sequence[str],
               nodes: Sequence[GraphNode], rng: Rng, default_attempts: int,
               keys: Sequence[JobKeys | None] = ()) -> Planned:
    """The ENQUEUE (and CANCEL) records of every node, in node order (Planned); a node's
    max_attempts None is `default_attempts`; `keys`: each node's limit keys (or none),
    on its ENQUEUE, so that it is limited once pending."""
    given = [node.job_id for node in nodes if node.job_id is not None]
    for job_id in given:
        if job_id in state.jobs or job_id in state.done_keys:
            raise NobrokerError(f"job {job_id!r} is already in the queue: a graph's "
                                "job ids must be new")
    # What the queue knows of each node's prerequisites by id (JobNotFoundError now).
    known = {index: prerequisites(state, [p for p in node.depends_on if isinstance(p, str)])
             for index, node in enumerate(nodes) if node.depends_on}
    ids = new_job_ids(state.jobs, len(nodes) - len(given), rng)
    if given:  # a group's members, a chain's steps: mostly none (a lineage names some)
        generated = iter(ids)
        ids = [next(generated) if node.job_id is None else node.job_id for node in nodes]
        if len(set(ids)) != len(ids):  # a caller's id that the next generated one matches
            raise NobrokerError("a graph's job id is one the queue is about to generate")
    runs = plain_runs(nodes, keys)
    starts = dict(runs)
    outcomes: list[JobState] = []
    index = 0
    while index < len(nodes):
        node = nodes[index]
        attempts = node.max_attempts or default_attempts
        end = starts.get(index)
        if end is not None:
            batch.add_enqueues(ids[index:end], node.priority, now + node.delay, now,
                               attempts, payload_texts[index:end])
            outcomes.extend([JobState.PENDING] * (end - index))
            index = end
            continue
        job_keys = keys[index] if keys else None
        if index not in known:  # a keyed or limited node without prerequisites
            if job_keys is not None:
                plan_limited_enqueue(batch, ids[index], node.priority, now + node.delay,
                                     now, attempts, node.job_id is not None,
                                     payload_texts[index], job_keys)
            else:
                batch.add_enqueue(ids[index], node.priority, now + node.delay, now,
                                  attempts, True, payload_texts[index])
            outcomes.append(JobState.PENDING)
        else:
            outcomes.append(plan_dependent_enqueue(
                batch, now, ids[index], payload_texts[index], priority=node.priority,
                delay=node.delay, max_attempts=attempts,
                keyed=node.job_id is not None, mode=node.mode,
                known=with_graph_nodes(node.depends_on, known[index], ids,
                                       lambda i: outcomes[i] is JobState.CANCELLED),
                keys=job_keys))
        index += 1
    return ids, outcomes, runs


def graph_jobs(nodes: Sequence[GraphNode], planned: Planned, now: float,
               default_attempts: int, view: Callable[[str, Any], Job]) -> list[Job]:
    """The Jobs of a committed graph, in node order: a run of plain nodes as
    enqueue_many builds its Jobs, any other node by `view(id, payload)`."""
    ids, _, runs = planned
    jobs: list[Job] = []
    index = 0
    for start, end in [*runs, (len(nodes), len(nodes))]:
        jobs.extend(view(ids[i], nodes[i].payload) for i in range(index, start))
        if start < end:
            first = nodes[start]
            jobs.extend(new_pending_jobs(ids[start:end], [n.payload for n in nodes[start:end]],
                                         first.priority, first.max_attempts or default_attempts,
                                         now + first.delay, now))
        index = end
    return jobs
