"""A job's place in a workflow: the jobs it waits (or waited) for, and those that name it.

`lineage(queue, job)` is what `nobroker get` and the dashboard's job page show.
It reads through the public Queue API only, so every backend answers alike.

- Parents come from the job itself: `waiting_for` while it waits (depends_on=:
  the prerequisites not yet finished), and a canvas step's payload (`parents`,
  `failure_of`: step_payloads.py), which keeps them after the step was
  released. A plain depends_on job's prerequisites are forgotten once it is
  released: no backend keeps them.
- Children are the jobs naming it in their `waiting_for` or payload. A backend
  indexes dependents only while they wait, and not behind the Queue API, so
  this is a scan, bounded: the waiting jobs first (where a chord callback or a
  chain's next step is until it runs), then, for a finished or dead job only
  (an unfinished one has released no one), the pending, leased and dead ones,
  SCAN_LIMIT jobs in all; `complete` says whether the bound cut it short. A
  backend without the `dependencies` capability has no workflows: nothing is
  scanned.
- Progress, for a step receiving two or more results (a chord callback): how
  many of them are done, from `waiting_for` while it waits (a failure would
  have cancelled it), all of them once it was released.
- A finished job (done, cancelled) is kept without its payload: its parents
  are forgotten, and it is no longer anyone's child.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from ..models import Job, JobState
from .step_payloads import Tree, failure_of, parents_of

if TYPE_CHECKING:
    from ..queue import Queue

__all__ = ["Lineage", "lineage", "named_parents", "SCAN_LIMIT"]

SCAN_LIMIT: Final = 10_000  # jobs read at most to find one job's children
# Where children are looked for, in this order: a waiting child is the usual one.
_SCANNED: Final = (JobState.WAITING, JobState.PENDING, JobState.LEASED, JobState.DEAD)
# A job not finished yet has released no one: its children, if any, are all waiting.
_UNFINISHED: Final = (JobState.WAITING, JobState.PENDING, JobState.LEASED)


@dataclass(frozen=True, slots=True)
class Lineage:
    """One job's parents and children, by id, in the order found."""

    parents: tuple[str, ...]
    children: tuple[str, ...]
    progress: tuple[int, int] | None = None  # (parents done, parents) of a chord callback
    complete: bool = True  # False: the children's scan stopped at SCAN_LIMIT jobs

    def __bool__(self) -> bool:
        """Whether the job is in a workflow at all (what the views show only then)."""
        return bool(self.parents or self.children)

    def as_dict(self) -> dict[str, Any]:
        """The JSON shape `nobroker get` and the dashboard's API both use."""
        found: dict[str, Any] = {"parents": list(self.parents),
                                 "children": list(self.children),
                                 "children_complete": self.complete}
        if self.progress is not None:
            found["progress"] = {"done": self.progress[0], "total": self.progress[1]}
        return found


def lineage(queue: Queue, job: Job, *, scan_limit: int = SCAN_LIMIT) -> Lineage:
    """`job`'s parents and children in `queue` (see the module's docstring)."""
    # A backend may hand a finished job's payload out (PostgreSQL keeps the row's):
    # read as the others keep it, without.
    finished = job.state is JobState.DONE or job.state is JobState.CANCELLED
    received, watched = _payload_parents(None if finished else job.payload)
    parents = tuple(dict.fromkeys([*received, *watched, *job.waiting_for]))
    children: list[str] = []
    complete = True
    if queue.capabilities.dependencies:
        states = (JobState.WAITING,) if job.state in _UNFINISHED else _SCANNED
        children, complete = _children(queue, job.id, states, scan_limit)
    return Lineage(parents, tuple(children), _progress(job, received), complete)


def named_parents(payload: Any) -> list[str]:
    """The job ids a canvas step's payload names (results it receives, jobs an on_error
    handler watches); [] for any other payload."""
    received, watched = _payload_parents(payload)
    return [*received, *watched]


def _payload_parents(payload: Any) -> tuple[list[str], list[str]]:
    """(ids whose results the step receives, ids a handler watches), from a task payload
    only: a plain job's dict may have a "parents" key of its own."""
    if not isinstance(payload, dict) or not isinstance(payload.get("task"), str):
        return [], []
    try:
        tree, watched = parents_of(payload), failure_of(payload)
    except ValueError:  # not a step's: the worker refuses it, the views show it as is
        return [], []
    return ([] if tree is None else list(dict.fromkeys(_flat(tree))), watched or [])


def _flat(tree: Tree) -> list[str]:
    if isinstance(tree, str):
        return [tree]
    return [job_id for item in tree for job_id in _flat(item)]


def _children(queue: Queue, job_id: str, states: tuple[JobState, ...], budget: int
              ) -> tuple[list[str], bool]:
    """The jobs in `states` naming `job_id`, and whether every one was read."""
    found: dict[str, None] = {}
    complete = True
    for state in states:
        jobs = queue.list_jobs(state, limit=budget + 1)  # one more: is anything left?
        if len(jobs) > budget:
            jobs, complete = jobs[:budget], False
        budget -= len(jobs)
        for other in jobs:
            if job_id in other.waiting_for or job_id in named_parents(other.payload):
                found[other.id] = None
        if not complete:
            break
    return list(found), complete


def _progress(job: Job, received: list[str]) -> tuple[int, int] | None:
    """(done, total) of the results a step receives, when it receives two or more."""
    total = len(received)
    if total < 2:
        return None
    if job.state is JobState.WAITING:
        return total - len(set(job.waiting_for).intersection(received)), total
    return total, total  # released: every one of them succeeded
