"""What a workflow's `.delay()` hands back: TaskResults and GroupResults over its jobs.

`enqueue_workflow` writes a compiled workflow with one `Queue.enqueue_graph`
and builds its handles from the `Out` shape graph_builder.py made: a
chain's last step (its `.parent` back to the first), a GroupResult, a
chord's callback (its `.parent` the header's GroupResult).

Every handle remembers the `Workflow` it belongs to, because two answers
need the whole graph: which step failed first (a chain's last step is only
*cancelled* when an earlier one dies, and `get` should name the one that
died, and its task), and what "cancel the chain" covers (every job of it
not finished; the handle of one step or member covers its own jobs).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

from ..dependencies import GraphNode
from ..errors import JobNotFoundError, TaskFailed
from ..models import Job, JobState
from .graph_builder import Compiled, GroupOut, Out, StepOut
from .task_result import TaskResult

if TYPE_CHECKING:
    from ..queue import Queue

__all__ = ["Workflow", "StepResult", "GroupResult", "enqueue_workflow"]

Handle: TypeAlias = "TaskResult | GroupResult"


@dataclass(frozen=True, slots=True)
class Workflow:
    """The jobs one `.delay()` wrote, in node order, and what each waits for."""

    queue: Queue
    ids: list[str]
    tasks: list[str]
    nodes: list[GraphNode]  # what each waits for: depends_on, earlier nodes by index

    def first_failure(self, index: int) -> TaskFailed | None:
        """TaskFailed for the dead-lettered job, among node `index` and every node it
        waits for (directly or not), that finished first; None if none died."""
        seen = {index}
        todo = [index]
        while todo:
            for dep in self.nodes[todo.pop()].depends_on:
                if isinstance(dep, int) and dep not in seen:
                    seen.add(dep)
                    todo.append(dep)
        dead = [(job.finished_at or 0.0, node, job) for node, job in
                ((node, self._job(node)) for node in sorted(seen))
                if job is not None and job.state is JobState.DEAD]
        if not dead:
            return None
        _, node, job = min(dead, key=lambda item: item[:2])
        return TaskFailed(job.id, str(job.state), job.last_error, self.tasks[node])

    def cancel(self, nodes: range) -> bool:
        """Cancel the unfinished jobs of `nodes`, last first (so that none is released
        between two cancels); True if one was."""
        cancelled = False
        for node in reversed(nodes):
            cancelled = self.queue.cancel(self.ids[node]) or cancelled
        return cancelled

    def _job(self, node: int) -> Job | None:
        try:
            return self.queue.get(self.ids[node])
        except JobNotFoundError:
            return None


class StepResult(TaskResult):
    """A TaskResult of one workflow step: `get` names the step that failed first."""

    __slots__ = ("index", "scope", "workflow")

    def __init__(self, workflow: Workflow, index: int, scope: range,
                 parent: Handle | None) -> None:
        super().__init__(workflow.queue, workflow.ids[index], parent)
        self.workflow = workflow
        self.index = index
        self.scope = scope  # the nodes cancel() cancels

    def get(self, timeout: float | None = None) -> Any:
        """The step's result; TaskFailed naming the first step that was dead-lettered
        (its job id and task) if this one did not run for that reason."""
        try:
            return super().get(timeout)
        except TaskFailed as failed:
            raise self._explained(failed) from None

    async def aget(self, timeout: float | None = None) -> Any:
        try:
            return await super().aget(timeout)
        except TaskFailed as failed:
            raise self._explained(failed) from None

    def cancel(self) -> bool:
        """Cancel every job this handle covers that has not finished (a running one's
        lease is revoked); True if one was."""
        return self.workflow.cancel(self.scope)

    def _explained(self, failed: TaskFailed) -> TaskFailed:
        cause = self.workflow.first_failure(self.index)
        if cause is not None:
            return cause
        return TaskFailed(failed.job_id, failed.state, failed.last_error,
                          self.workflow.tasks[self.index])


class GroupResult:
    """The members' handles of a group, in member order (Celery's GroupResult)."""

    __slots__ = ("_made", "_make", "parent", "scope", "workflow")

    def __init__(self, results: list[Handle] | Callable[[], list[Handle]],
                 parent: Handle | None = None, workflow: Workflow | None = None,
                 scope: range = range(0)) -> None:
        # The members' handles, or what makes them when first asked for: a group of
        # 10,000 members need not build 10,000 handles inside delay().
        self._made = None if callable(results) else list(results)
        self._make = results if callable(results) else None
        self.parent = parent  # what ran before the group, if anything
        self.workflow = workflow
        self.scope = scope

    @property
    def results(self) -> list[Handle]:
        """The members' handles, in member order."""
        if self._made is None:
            assert self._make is not None
            self._made, self._make = self._make(), None
        return self._made

    def get(self, timeout: float | None = None) -> list[Any]:
        """The members' results in member order, once all have finished; TaskFailed
        for the first member (in member order) that failed; TimeoutError if they
        have not all finished within `timeout` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        return [member.get(_left(deadline)) for member in self.results]

    async def aget(self, timeout: float | None = None) -> list[Any]:
        """`get` for asyncio code."""
        deadline = None if timeout is None else time.monotonic() + timeout
        return [await member.aget(_left(deadline)) for member in self.results]

    def ready(self) -> bool:
        """True once every member has finished (done, dead or cancelled)."""
        return all(member.ready() for member in self.results)

    def successful(self) -> bool:
        """True once every member has succeeded."""
        return all(_succeeded(member) for member in self.results)

    def failed(self) -> bool:
        """True if a member has ended dead or cancelled."""
        return any(member.ready() and not _succeeded(member) for member in self.results)

    def completed_count(self) -> int:
        """How many members have succeeded."""
        return sum(1 for member in self.results if _succeeded(member))

    def cancel(self) -> bool:
        """Cancel every job of the group that has not finished; True if one was."""
        return self.workflow is not None and self.workflow.cancel(self.scope)

    def __len__(self) -> int:
        return len(self.results)

    def __iter__(self) -> Iterator[Handle]:
        return iter(self.results)

    def __repr__(self) -> str:
        return f"GroupResult({self.results!r})"


def enqueue_workflow(queue: Queue, compiled: Compiled) -> Handle:
    """Write the workflow (one enqueue_graph: all or nothing) and return its handle. On an
    eager queue (nobroker.testing) every step has run, in order, when this returns."""
    jobs = queue.enqueue_graph(compiled.nodes)
    workflow = Workflow(queue, [job.id for job in jobs], compiled.tasks, compiled.nodes)
    if queue.eager:
        from ..testing import run_eagerly
        for job in jobs:  # a step comes after what it waits for, handlers last
            run_eagerly(queue, job)
    if compiled.result is None:
        return GroupResult([])
    return _handle(workflow, compiled.result, range(len(jobs)))


def _handle(workflow: Workflow, top: Out, scope: range) -> Handle:
    """The handle `top` describes (covering `scope`: every job), its parents made once
    each (a group's members share the handle before the group), walking up a chain's
    parents without recursing, however long the chain."""
    made: dict[int, Handle] = {}  # id() of an Out -> its handle

    def make(out: Out, covers: range | None = None) -> Handle:
        line: list[Out] = []
        item: Out | None = out
        while item is not None and id(item) not in made:
            line.append(item)
            item = item.parent
        for item in reversed(line):
            parent = None if item.parent is None else made[id(item.parent)]
            own = covers if item is out else None
            if isinstance(item, StepOut):
                made[id(item)] = StepResult(workflow, item.index, own or range(
                    item.index, item.index + 1), parent)
            else:
                assert isinstance(item, GroupOut)
                made[id(item)] = GroupResult(functools.partial(make_all, item),
                                             parent, workflow, own or item.nodes)
        return made[id(out)]

    def make_all(group: GroupOut) -> list[Handle]:
        # a member given as its node's index follows what came before the group, made
        # by then (a handle is made after its parent's)
        before = None if group.parent is None else made[id(group.parent)]
        return [StepResult(workflow, member, range(member, member + 1), before)
                if isinstance(member, int) else make(member) for member in group.members]

    return make(top, scope)


def _left(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.0, deadline - time.monotonic())


def _succeeded(member: Handle) -> bool:
    if isinstance(member, GroupResult):
        return member.successful()
    try:
        return member.state is JobState.DONE
    except JobNotFoundError:
        return False  # forgotten: its outcome is no longer known
