"""The pure half of the canvas compiler: steps in, GraphNodes (and the shape of the result) out.

canvas.py walks a chain/group/chord and calls `GraphBuilder.step` once per
task call, in an order where every step comes after those it waits for;
`on_error` handlers are noted with `watch` and placed last by `finish`,
because a handler waits for the steps that come after the one it watches
too. What `finish` returns is all `Queue.enqueue_graph` needs (one call, all
or nothing) and all the results need (`Out`: which node, or which nodes,
each returned handle stands for).

Rules:
- A node gets a job id of its own (`new_id`) only when another node's payload
  names it (a step reading its result, a handler watching it) or the caller
  set one; the others get the backend's ids, as plain enqueues do.
- An exit's `value` is what the next step receives first: a node index for
  one step's result, a list for a group's (member order), `[]` for an empty
  group; `deps` is what the next step waits for (an empty group passes on
  what it was given).
- A handler watches the steps of what it is attached to and every step that
  waits for them, directly or not (a chain's later steps): it is released
  once, when the first of them is dead-lettered (mode "failure").

No queue, no clock, no I/O: the tests compile without a queue.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from ..dependencies import FAILURE, SUCCESS, GraphNode
from .step_payloads import Tree, step_payload

__all__ = ["StepSpec", "StepOut", "GroupOut", "Out", "Exit", "Compiled", "GraphBuilder"]

# A node index, or a list of them: what an exit hands the next step, before ids exist.
IndexTree: TypeAlias = "int | list[IndexTree]"


@dataclass(frozen=True, slots=True)
class StepSpec:
    """One task call with its job options, as a signature holds it."""

    task: str
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]
    priority: int = 0
    delay: float = 0.0
    max_attempts: int | None = None
    job_id: str | None = None


# Not frozen, these three: a frozen dataclass is slow to build, and a group makes
# thousands. Nothing changes them after the builder made them.
@dataclass(slots=True)
class StepOut:
    """The handle of one step: node `index`; `parent`, the handle before it."""

    index: int
    parent: Out | None = None


@dataclass(slots=True)
class GroupOut:
    """The handle of a group: its members' handles, in member order."""

    members: tuple[Out, ...]
    nodes: range  # every node the group's members made
    parent: Out | None = None


Out: TypeAlias = StepOut | GroupOut


@dataclass(slots=True)
class Exit:
    """Where a compiled expression ends: what the next step waits for and receives."""

    deps: tuple[int, ...] = ()
    value: IndexTree | None = None  # None: nothing to pass on (nothing ran before)
    result: Out | None = None


@dataclass(frozen=True, slots=True)
class Compiled:
    """A workflow ready for `Queue.enqueue_graph`, and how to hand back its results."""

    nodes: list[GraphNode]
    tasks: list[str]  # each node's task name (TaskFailed names the step's task)
    result: Out | None  # None: nothing at all to run (an empty group's)


@dataclass(slots=True)
class _Node:
    spec: StepSpec
    deps: tuple[int, ...]
    parents: IndexTree | None = None
    watched: list[int] | None = None  # a handler's: the steps it watches
    job_id: str | None = None


@dataclass(slots=True)
class GraphBuilder:
    """Collects steps and handlers; `finish` makes the GraphNodes."""

    new_id: Callable[[], str]
    _nodes: list[_Node] = field(default_factory=list)
    _handlers: list[tuple[StepSpec, range]] = field(default_factory=list)

    @property
    def count(self) -> int:
        """How many steps there are so far (the next one's index)."""
        return len(self._nodes)

    def step(self, spec: StepSpec, after: Exit | None, *, receives: bool) -> Exit:
        """Add one task call after `after` (None: at the start); it receives what
        `after` passes on as its first argument when `receives` (not an immutable
        signature's) and something ran before it."""
        deps = after.deps if after is not None else ()
        passed = after.value if after is not None and receives else None
        index = len(self._nodes)
        self._nodes.append(_Node(spec, deps, passed, job_id=spec.job_id))
        return Exit((index,), index,
                    StepOut(index, after.result if after is not None else None))

    def watch(self, handler: StepSpec, steps: range) -> None:
        """Run `handler` once if one of `steps`, or of the steps waiting for them, dies."""
        if steps:
            self._handlers.append((handler, steps))

    def finish(self, result: Out | None) -> Compiled:
        """The GraphNodes: the steps in order, then one "failure" node per handler."""
        children: list[list[int]] = [[] for _ in self._nodes]
        for index, node in enumerate(self._nodes):
            for dep in node.deps:
                children[dep].append(index)
        for handler, steps in self._handlers:
            watched = _reach(children, steps)
            self._nodes.append(_Node(handler, tuple(watched), watched=watched,
                                     job_id=handler.job_id))
        payloads = [self._payload(node) for node in self._nodes]  # names ids: first
        nodes = [GraphNode(payload, node.deps, SUCCESS if node.watched is None
                           else FAILURE, node.spec.priority, node.spec.delay,
                           node.spec.max_attempts, node.job_id)
                 for payload, node in zip(payloads, self._nodes, strict=True)]
        return Compiled(nodes, [node.spec.task for node in self._nodes], result)

    def _payload(self, node: _Node) -> dict[str, Any]:
        spec = node.spec
        parents = None if node.parents is None else self._ids(node.parents)
        watched = None if node.watched is None else [self._id(i) for i in node.watched]
        return step_payload(spec.task, spec.args, spec.kwargs, parents=parents,
                            failure_of=watched)

    def _ids(self, tree: IndexTree) -> Tree:
        if isinstance(tree, int):
            return self._id(tree)
        return [self._ids(item) for item in tree]

    def _id(self, index: int) -> str:
        node = self._nodes[index]
        if node.job_id is None:
            node.job_id = self.new_id()
        return node.job_id


def _reach(children: Sequence[Sequence[int]], start: range) -> list[int]:
    """`start` and every step that waits for one of them, in node order."""
    seen = set(start)
    todo = list(start)
    while todo:
        for child in children[todo.pop()]:
            if child not in seen:
                seen.add(child)
                todo.append(child)
    return sorted(seen)
