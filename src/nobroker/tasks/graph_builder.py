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
    # The plain task payload of this call, made once (None: made when compiled). The
    # engine never changes a payload, so the nodes of one signature may share it.
    payload: dict[str, Any] | None = None
    # This call as a node on its own (no prerequisites, that payload, its own job id),
    # made once too: a group of prepared signatures lists its members' nodes (a frozen
    # GraphNode costs about a microsecond to build, a sixth of enqueue_many's per job).
    node: GraphNode | None = None


# Not frozen, these three: a frozen dataclass is slow to build, and a group makes
# thousands. Nothing changes them after the builder made them.
@dataclass(slots=True)
class StepOut:
    """The handle of one step: node `index`; `parent`, the handle before it."""

    index: int
    parent: Out | None = None


@dataclass(slots=True)
class GroupOut:
    """The handle of a group: its members' handles, in member order; a member that is
    one step right after what came before the group is just its node's index (its
    result is made when the group's results are read: a group may have thousands)."""

    members: tuple[Out | int, ...]
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
class GraphBuilder:
    """Collects steps and handlers; `finish` makes the GraphNodes. The steps are kept
    in parallel lists, not an object each: a group of 10,000 is 10,000 steps."""

    new_id: Callable[[], str]
    _specs: list[StepSpec] = field(default_factory=list)
    _deps: list[tuple[int, ...]] = field(default_factory=list)
    _parents: list[IndexTree | None] = field(default_factory=list)  # what each receives
    _ids: list[str | None] = field(default_factory=list)
    _handlers: list[tuple[StepSpec, range]] = field(default_factory=list)

    @property
    def count(self) -> int:
        """How many steps there are so far (the next one's index)."""
        return len(self._specs)

    def step(self, spec: StepSpec, after: Exit | None, *, receives: bool) -> Exit:
        """Add one task call after `after` (None: at the start); it receives what
        `after` passes on as its first argument when `receives` (not an immutable
        signature's) and something ran before it."""
        index = self.add(spec, after, receives=receives)
        return Exit((index,), index, StepOut(index, None if after is None else after.result))

    def add(self, spec: StepSpec, after: Exit | None, *, receives: bool) -> int:
        """`step` without the Exit: the new step's index (a group's member calls)."""
        index = len(self._specs)
        self._specs.append(spec)
        if after is None:
            self._deps.append(())
            self._parents.append(None)
        else:
            self._deps.append(after.deps)
            self._parents.append(after.value if receives else None)
        self._ids.append(spec.job_id)
        return index

    def add_steps(self, specs: Sequence[StepSpec], after: Exit | None,
                  receives: Sequence[bool]) -> range:
        """`add` of each of `specs`, side by side (a group's members): their indexes."""
        start, count = len(self._specs), len(specs)
        self._specs += specs
        self._ids += [spec.job_id for spec in specs]
        if after is None:
            self._deps += [()] * count
            self._parents += [None] * count
        else:
            self._deps += [after.deps] * count
            value = after.value
            self._parents += [value if given else None for given in receives]
        return range(start, start + count)

    def watch(self, handler: StepSpec, steps: range) -> None:
        """Run `handler` once if one of `steps`, or of the steps waiting for them, dies."""
        if steps:
            self._handlers.append((handler, steps))

    def finish(self, result: Out | None) -> Compiled:
        """The GraphNodes: the steps in order, then one "failure" node per handler."""
        steps = len(self._specs)
        watched: list[list[int]] = []
        if self._handlers:
            children: list[list[int]] = [[] for _ in range(steps)]
            for index, deps in enumerate(self._deps):
                for dep in deps:
                    children[dep].append(index)
            watched = [_reach(children, scope) for _, scope in self._handlers]
        # the payloads first: naming a step in one gives that step a job id
        payloads = [spec.payload if parents is None and spec.payload is not None
                    else self._payload(index)
                    for index, (spec, parents) in enumerate(zip(self._specs, self._parents,
                                                                strict=True))]
        handler_payloads = [step_payload(handler.task, handler.args, handler.kwargs,
                                         failure_of=[self._id(i) for i in scope])
                            for (handler, _), scope in zip(self._handlers, watched,
                                                           strict=True)]
        ids, waits = self._ids, self._deps
        nodes = [spec.node if spec.node is not None and not waits[index]
                 and payloads[index] is spec.payload and ids[index] == spec.job_id
                 else GraphNode(payloads[index], waits[index], SUCCESS, spec.priority,
                                spec.delay, spec.max_attempts, ids[index])
                 for index, spec in enumerate(self._specs)]
        nodes += [GraphNode(payload, tuple(scope), FAILURE, handler.priority, handler.delay,
                            handler.max_attempts, handler.job_id)
                  for payload, (handler, _), scope in zip(handler_payloads, self._handlers,
                                                          watched, strict=True)]
        tasks = [spec.task for spec in self._specs]
        tasks += [handler.task for handler, _ in self._handlers]
        return Compiled(nodes, tasks, result)

    def _payload(self, index: int) -> dict[str, Any]:
        """Step `index`'s payload, with the ids of the steps it receives (finish takes
        a signature's own plain payload, made once, without calling this)."""
        spec, parents = self._specs[index], self._parents[index]
        return step_payload(spec.task, spec.args, spec.kwargs,
                            parents=None if parents is None else self._tree(parents))

    def _tree(self, tree: IndexTree) -> Tree:
        if isinstance(tree, int):
            return self._id(tree)
        return [self._tree(item) for item in tree]

    def _id(self, index: int) -> str:
        job_id = self._ids[index]
        if job_id is None:
            job_id = self._ids[index] = self.new_id()
        return job_id


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
