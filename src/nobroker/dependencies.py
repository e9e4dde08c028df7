"""depends_on=: the prerequisites a new job waits for, as the Queue facade takes them.

`Queue.enqueue(..., depends_on=...)` and tasks' `apply_async(..., depends_on=...)`
take job ids, Jobs, TaskResults (anything with an `id`), a `Dependency`, or a
list mixing them; this module turns that into the job ids a backend with the
`dependencies` capability stores, and refuses it clearly on the others. The
rules a backend follows are in docs/TASKS.md, "Dependencies".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, cast

from . import transactions, validation
from .backend import GraphNode
from .codec import encode_payloads
from .errors import NobrokerError

if TYPE_CHECKING:
    from .backend import Backend, Dependencies
    from .models import Job

__all__ = ["Dependency", "GraphNode", "prerequisite_ids", "enqueuer", "failure_error",
           "checked_nodes", "enqueue_graph", "verdict", "with_graph_nodes", "Known",
           "SUCCESS", "ANY", "FAILURE", "MODES", "NO_FAILURE"]

# What a dependent waits for (GraphNode.mode): every prerequisite to succeed; every one
# to finish, whatever its outcome (allow_failure=True); or one of them to die (on_error).
SUCCESS: Final = "success"
ANY: Final = "any"
FAILURE: Final = "failure"
MODES: Final = (SUCCESS, ANY, FAILURE)
NO_FAILURE: Final = "prerequisites finished without a failure"  # a "failure" node's cancel


def failure_error(prerequisite: str, state: str) -> str:
    """A dependent's last_error when a failed prerequisite cancels it (every backend
    words it so): names the prerequisite and what became of it."""
    what = "was dead-lettered" if state == "dead" else f"was {state}"
    return f"prerequisite {prerequisite} {what}"


def verdict(mode: str, failed: tuple[str, str] | None, died: bool,
            finished: bool) -> tuple[bool, str | None]:
    """What becomes of a job waiting in `mode`, every backend deciding alike: given the
    first of its prerequisites that failed (id and state: dead or cancelled), whether
    one was dead-lettered, and whether all of them have finished. (True, None): it is
    released (pending); (False, error): cancelled with that error; (False, None): it
    goes on waiting."""
    if mode == FAILURE:
        if died:
            return True, None
        return False, NO_FAILURE if finished else None
    if failed is not None and mode == SUCCESS:
        return False, failure_error(*failed)
    return finished, None


@dataclass(frozen=True, slots=True)
class Dependency:
    """RQ's shape: `Dependency(jobs=[r1, r2], allow_failure=True)`, accepted where
    depends_on= is; its allow_failure applies as the keyword's does."""

    jobs: Any
    allow_failure: bool = False


# What a new dependent learns of its prerequisites: the unfinished ones, the first that
# failed (id and state: dead or cancelled) and whether one was dead-lettered.
Known = tuple[list[str], tuple[str, str] | None, bool]


def with_graph_nodes(depends_on: Sequence[int | str], queued: Known, ids: Sequence[str],
                     cancelled: Callable[[int], bool]) -> Known:
    """`queued` (what a backend knows of a graph node's prerequisites by id) with its
    prerequisites by index added: new in the same write, so unfinished, unless
    `cancelled(index)` (a node settled at once by an already failed prerequisite);
    the unfinished ones in the order the node gave them."""
    queued_unmet, failed, died = queued
    waiting = set(queued_unmet)
    unmet: list[str] = []
    for prerequisite in depends_on:
        if isinstance(prerequisite, str):
            if prerequisite in waiting:
                unmet.append(prerequisite)
        elif cancelled(prerequisite):
            failed = failed or (ids[prerequisite], "cancelled")
        else:
            unmet.append(ids[prerequisite])
    return unmet, failed, died


def checked_nodes(nodes: Iterable[GraphNode]) -> list[GraphNode]:
    """The nodes, checked: options as enqueue's (`max_attempts` None stays None: the
    backend's default), prerequisites a tuple without duplicates; ValueError or
    TypeError naming the node for a bad one (an index that is not an earlier node's,
    a dependency on itself, a job id twice). A node is rebuilt only when its
    prerequisites needed it: building 10,000 frozen nodes again would cost a
    quarter of enqueue_many's time."""
    checked: list[GraphNode] = []
    ids: dict[str, int] = {}
    # Most nodes share their options: each distinct (type, value) triple checked once,
    # and the very objects of the node before (a group of one task's signatures) at once.
    options: set[tuple[object, ...]] = set()
    last: tuple[object, ...] = (options, options, options)  # matches no node
    for index, node in enumerate(nodes):
        if not isinstance(node, GraphNode):
            raise TypeError(f"node {index}: a GraphNode, not {type(node).__name__}")
        if (node.priority is not last[0] or node.delay is not last[1]
                or node.max_attempts is not last[2]):
            given = (node.priority, node.delay, node.max_attempts, type(node.priority),
                     type(node.delay), type(node.max_attempts))
            if given not in options:
                validation.job_options(node.priority, node.delay, node.max_attempts, 1)
                options.add(given)
            last = given
        if node.mode not in MODES:
            raise ValueError(f"node {index}: mode must be one of {MODES}, not {node.mode!r}")
        if node.job_id is not None:
            validation.job_id(node.job_id)
            if ids.setdefault(node.job_id, index) != index:
                raise ValueError(f"node {index}: job id {node.job_id!r} is node "
                                 f"{ids[node.job_id]}'s too")
        if node.depends_on != ():
            depends_on = _prerequisites(index, node.depends_on, node.job_id, ids)
            if depends_on != node.depends_on:
                node = GraphNode(node.payload, depends_on, node.mode, node.priority,
                                 node.delay, node.max_attempts, node.job_id)
        checked.append(node)
    return checked


def _prerequisites(index: int, depends_on: object, key: str | None,
                   ids: dict[str, int]) -> tuple[int | str, ...]:
    """Node `index`'s depends_on checked (see checked_nodes), duplicates dropped."""
    if isinstance(depends_on, (str, int)) or not isinstance(depends_on, Iterable):
        raise TypeError(f"node {index}: depends_on must be a tuple of indexes and ids")
    wanted: list[int | str] = []
    for item in depends_on:
        if type(item) is int:
            if not 0 <= item < index:
                raise ValueError(f"node {index}: depends on {item}, not an earlier node")
        elif isinstance(item, str):
            item = validation.job_id(item)
            if item == key:
                raise ValueError(f"node {index}: job {item!r} cannot depend on itself")
            if item in ids:
                raise ValueError(f"node {index}: job {item!r} is node {ids[item]} of "
                                 "this graph: name it by its index")
        else:
            raise TypeError(f"node {index}: depends_on takes node indexes and job ids, "
                            f"not {type(item).__name__}")
        wanted.append(item)
    return tuple(dict.fromkeys(wanted))


def enqueue_graph(queue: Any, backend: Backend, nodes: Iterable[GraphNode]) -> list[Job]:
    """Queue.enqueue_graph: the nodes checked and encoded, then written by the backend in
    one durable write; nothing is written if anything is wrong."""
    transactions.refuse_in_block(queue, "enqueue_graph")
    if not backend.capabilities.dependencies:
        raise NobrokerError(f"enqueue_graph is not supported by the {type(backend).__name__} "
                            "backend (it lacks the 'dependencies' capability)")
    checked = checked_nodes(nodes)
    texts = encode_payloads([node.payload for node in checked])
    if not checked:
        return []
    jobs = cast("Dependencies", backend).enqueue_graph(texts, checked)
    if queue.hooks is not None:
        queue.hooks.fire_each("enqueued", jobs)
    return jobs


def prerequisite_ids(depends_on: Any) -> tuple[list[str], bool]:
    """The prerequisites' ids (duplicates dropped, order kept) and whether a
    `Dependency` asked for allow_failure; TypeError for anything else."""
    allow = False
    if isinstance(depends_on, Dependency):
        depends_on, allow = depends_on.jobs, depends_on.allow_failure
    if isinstance(depends_on, str) or hasattr(depends_on, "id"):
        items: Iterable[Any] = [depends_on]
    elif isinstance(depends_on, Iterable):
        items = depends_on
    else:
        raise TypeError(f"depends_on takes job ids, Jobs or TaskResults, not "
                        f"{type(depends_on).__name__}")
    ids: list[str] = []
    for item in items:
        job_id = item if isinstance(item, str) else getattr(item, "id", None)
        if not isinstance(job_id, str):
            raise TypeError(f"depends_on takes job ids, Jobs or TaskResults, not "
                            f"{type(item).__name__}")
        ids.append(validation.job_id(job_id))
    return list(dict.fromkeys(ids)), allow


def enqueuer(queue: object, backend: Backend, connection: Any, depends_on: Any,
             allow_failure: bool) -> Callable[..., Job]:
    """What writes one job for Queue.enqueue: transactions.enqueuer's writer without
    `depends_on`, else the backend's enqueue with prerequisites. NobrokerError where the
    backend has none, or inside the caller's transaction (the release is written with
    the prerequisite's ack, which that transaction does not hold)."""
    if depends_on is None:
        return transactions.enqueuer(queue, backend, connection)
    if not backend.capabilities.dependencies:
        raise NobrokerError(f"depends_on= is not supported by the {type(backend).__name__} "
                            "backend (it lacks the 'dependencies' capability)")
    if connection is not None or transactions.active(queue) is not None:
        raise NobrokerError("depends_on= cannot be written in the caller's transaction")
    ids, allow = prerequisite_ids(depends_on)
    if not isinstance(allow_failure, bool):
        raise TypeError("allow_failure must be a bool")

    def write(payload_text: str, payload: Any, *, priority: int, delay: float,
              max_attempts: int, job_id: str | None, meta: dict[str, Any] | None = None
              ) -> Job:
        if job_id is not None and job_id in ids:
            raise ValueError(f"job {job_id!r} cannot depend on itself")
        return cast("Dependencies", backend).enqueue(
            payload_text, payload, priority=priority, delay=delay,
            max_attempts=max_attempts, job_id=job_id, depends_on=ids,
            allow_failure=allow_failure or allow, meta=meta)

    return write
