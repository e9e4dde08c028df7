"""Celery's canvas on nobroker's tasks: signatures, chain, group, chord.

    add.s(2, 2)                          a Signature: a task call, not enqueued
    add.si(2, 2)                         immutable: ignores the previous step's result
    chain(add.s(2, 2), add.s(4))         also add.s(2, 2) | add.s(4)
    group(add.s(i, i) for i in range(10))
    chord(header, tsum.s())              also chord(header)(tsum.s())
    sig.on_error(notify.s())             runs once if the step (or one after it) dies

What it owns: building these values (arguments checked for JSON as they
are given), and compiling one into GraphNodes with the pure
`compile_canvas` (the walk is here, the bookkeeping in graph_builder.py).
`.delay()` enqueues the whole workflow with ONE `Queue.enqueue_graph`, all
or nothing, and hands back the results workflow_results.py makes. The
rules each step follows when it runs are docs/WORKFLOWS.md's; a step reads
its inputs with steps.py.
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Protocol, Self

from .. import validation
from ..codec import encode_payload
from ..dependencies import SUCCESS, GraphNode
from ..errors import SerializationError
from .graph_builder import Compiled, Exit, GraphBuilder, GroupOut, Out, StepSpec
from .step_payloads import step_payload
from .workflow_results import GroupResult, enqueue_workflow

if TYPE_CHECKING:
    from ..queue import Queue
    from .task_result import TaskResult

__all__ = ["Signature", "Chain", "Group", "Chord", "chain", "group", "chord",
           "compile_canvas", "new_ids"]

_OPTIONS = ("priority", "delay", "countdown", "max_attempts", "job_id")


class TaskLike(Protocol):
    """What a Signature reads of a Task (registry.py's, which imports this module)."""

    name: str
    queue: Queue
    priority: int
    max_attempts: int | None

    def apply_async(self, args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None,
                    *, delay: float | timedelta = 0.0, job_id: str | None = None,
                    priority: int | None = None,
                    max_attempts: int | None = None) -> TaskResult: ...


def new_ids() -> Callable[[], str]:
    """Job ids for one workflow's named nodes: one random prefix, then a counter."""
    prefix = uuid.uuid4().hex
    counter = iter(range(1 << 62))
    return lambda: f"wf-{prefix}-{next(counter)}"


def compile_canvas(canvas: Canvas, new_id: Callable[[], str] | None = None) -> Compiled:
    """The GraphNodes of `canvas` (and its results' shape); pure: no queue is touched."""
    builder = GraphBuilder(new_id if new_id is not None else new_ids())
    end = canvas.emit(builder, None)
    return builder.finish(end.result)


class Canvas:
    """What signatures, chains, groups and chords share: delay, `|`, on_error."""

    def __init__(self) -> None:
        self.errbacks: list[Signature] = []

    def on_error(self, handler: Signature) -> Self:
        """Call `handler` once, with `job_id=` and `error=` of the step that died, if a
        step of this (or one that waits for it) is dead-lettered; returns self."""
        if not isinstance(handler, Signature):
            raise TypeError(f"on_error takes a signature (task.s(...)), not "
                            f"{type(handler).__name__}")
        self.errbacks.append(handler)
        return self

    def __or__(self, other: Canvas) -> Chain:
        if not isinstance(other, Canvas):
            return NotImplemented
        return Chain(self, other)

    def delay(self) -> Any:
        """Enqueue the workflow (one durable write) and return its result: the last
        step's TaskResult, or a GroupResult."""
        return self.apply_async()

    def apply_async(self) -> Any:
        """As `delay`."""
        return enqueue_workflow(self.target_queue(), compile_canvas(self))

    async def adelay(self) -> Any:
        """`delay` for asyncio code: the write and its fsync run off the event loop."""
        return await asyncio.to_thread(self.apply_async)

    def emit(self, builder: GraphBuilder, after: Exit | None) -> Exit:
        """Add this expression's steps after `after`, then the handlers watching them."""
        start = builder.count
        end = self._emit(builder, after)
        for handler in self.errbacks:
            if handler.errbacks:
                raise ValueError(f"the on_error handler {handler!r} has on_error handlers "
                                 f"of its own; a handler's failure is its own affair")
            builder.watch(handler.spec(), range(start, builder.count))
        return end

    def _emit(self, builder: GraphBuilder, after: Exit | None) -> Exit:
        raise NotImplementedError

    def find_queues(self, found: dict[int, Queue]) -> None:
        """Add the queues of its signatures (handlers included) to `found`, by id."""
        for handler in self.errbacks:
            handler.find_queues(found)

    def target_queue(self) -> Queue:
        """The one queue its signatures' tasks are registered on (ValueError if none or
        several)."""
        queues: dict[int, Queue] = {}
        self.find_queues(queues)
        if len(queues) > 1:
            raise ValueError("a workflow's tasks must all be registered on one queue")
        if not queues:
            raise ValueError("this workflow names no queue: build it from tasks "
                             "(task.s(...)) or give a signature queue=")
        return next(iter(queues.values()))


class Signature(Canvas):
    """One task call with its arguments and job options: `task.s(...)`, `task.si(...)`."""

    def __init__(self, task: TaskLike | str, args: Sequence[Any] = (),
                 kwargs: Mapping[str, Any] | None = None, *, immutable: bool = False,
                 queue: Queue | None = None, **options: Any) -> None:
        super().__init__()
        self.name = task if isinstance(task, str) else task.name
        self.queue = queue if queue is not None or isinstance(task, str) else task.queue
        self._defaults = (0, None) if isinstance(task, str) else (task.priority,
                                                                    task.max_attempts)
        self.bound = None if isinstance(task, str) else task  # None: known by name only
        self.args = tuple(args)
        self.kwargs = dict(kwargs or {})
        self.immutable = bool(immutable)
        self.options: dict[str, Any] = {}
        _check_json(self.name, self.args, self.kwargs)
        self.set(**options)

    def set(self, **options: Any) -> Self:
        """Set job options (priority=, delay= or countdown= seconds, max_attempts=,
        job_id=), checked now; returns self, as Celery's does."""
        for key, value in options.items():
            if key not in _OPTIONS:
                raise TypeError(f"unknown signature option {key!r}; the options are "
                                f"{', '.join(_OPTIONS)}")
            if key in ("delay", "countdown"):
                key, value = "delay", validation.number(
                    key, value.total_seconds() if isinstance(value, timedelta) else value,
                    minimum=0)
            elif key == "priority":
                value = validation.integer("priority", value, -validation.INT_LIMIT,
                                           validation.INT_LIMIT)
            elif key == "max_attempts":
                value = validation.integer("max_attempts", value, 1, validation.INT_LIMIT)
            else:
                value = validation.job_id(value)
            self.options[key] = value
        priority, attempts = self._defaults
        get = self.options.get
        priority, delay = get("priority", priority), get("delay", 0.0)
        attempts, job_id = get("max_attempts", attempts), get("job_id")
        # made now, with the plain payload and node, so that compiling a group of
        # thousands of prepared signatures does little more than list them
        payload = step_payload(self.name, self.args, self.kwargs)
        self._spec = StepSpec(self.name, self.args, self.kwargs, priority, delay, attempts,
                              job_id, payload, GraphNode(payload, (), SUCCESS, priority, delay,
                                                         attempts, job_id))
        return self

    def clone(self, args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None,
              **options: Any) -> Signature:
        """A copy with `args` put in front (not for an immutable one), `kwargs` and
        `options` merged in; the handlers are shared."""
        copy = Signature(self.bound or self.name,
                         self.args if self.immutable else (*args, *self.args),
                         {**self.kwargs, **(kwargs or {})}, immutable=self.immutable,
                         queue=self.queue, **{**self.options, **options})
        copy.errbacks = list(self.errbacks)
        return copy

    def spec(self) -> StepSpec:
        """The call and its options, as the compiler takes them (made by `set`)."""
        return self._spec

    def delay(self, *args: Any, **kwargs: Any) -> Any:
        """Enqueue the call, `args` put in front of the signature's own."""
        return self.apply_async(args, kwargs)

    def apply_async(self, args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None,
                    **options: Any) -> Any:
        """Enqueue the call: a plain task job (as `task.apply_async`), or, with on_error
        handlers, the step and its handlers in one write."""
        sig = self.clone(args, kwargs, **options) if args or kwargs or options else self
        task = sig.bound
        if sig.errbacks or task is None:
            return enqueue_workflow(sig.target_queue(), compile_canvas(sig))
        return task.apply_async(sig.args, sig.kwargs, **sig.options)

    async def adelay(self, *args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(self.apply_async, args, kwargs)

    def _emit(self, builder: GraphBuilder, after: Exit | None) -> Exit:
        return builder.step(self.spec(), after, receives=not self.immutable)

    def find_queues(self, found: dict[int, Queue]) -> None:
        if self.queue is not None:
            found[id(self.queue)] = self.queue
        super().find_queues(found)

    def __repr__(self) -> str:
        shown = [repr(a) for a in self.args] + [f"{k}={v!r}" for k, v in self.kwargs.items()]
        return f"{self.name}{'.si' if self.immutable else ''}({', '.join(shown)})"


class Chain(Canvas):
    """Steps one after the other, each given the previous one's result first."""

    def __init__(self, *tasks: Canvas | Iterable[Canvas]) -> None:
        super().__init__()
        steps = _members("chain", tasks)
        # a | b | c is one chain; a chain with handlers of its own stays one step
        self.tasks: list[Canvas] = [inner for step in steps for inner in (
            step.tasks if isinstance(step, Chain) and not step.errbacks else [step])]

    def __call__(self) -> Any:
        """Celery's `chain(...)()`: enqueue it now."""
        return self.apply_async()

    def _emit(self, builder: GraphBuilder, after: Exit | None) -> Exit:
        if not self.tasks:
            raise ValueError("an empty chain has nothing to run")
        for step in self.tasks:
            after = step.emit(builder, after)
        assert after is not None
        return after

    def find_queues(self, found: dict[int, Queue]) -> None:
        for step in self.tasks:
            step.find_queues(found)
        super().find_queues(found)

    def __repr__(self) -> str:
        return " | ".join(repr(step) for step in self.tasks)


class Group(Canvas):
    """Members run side by side; the result is their results, in member order."""

    def __init__(self, *tasks: Canvas | Iterable[Canvas]) -> None:
        super().__init__()
        self.tasks: list[Canvas] = _members("group", tasks)

    def __call__(self) -> GroupResult:
        """Celery's `group(...)()`: enqueue it now."""
        return self.apply_async()

    def apply_async(self) -> GroupResult:
        if not self.tasks:  # nothing to write: [] at once
            return GroupResult([])
        result: GroupResult = super().apply_async()
        return result

    def _emit(self, builder: GraphBuilder, after: Exit | None) -> Exit:
        start = builder.count
        before = None if after is None else after.result
        deps: list[int] = []
        values: list[Any] = []
        members: list[Out | int] = []
        nested = False  # deps from plain runs are new nodes, each once: no dedupe needed
        for plain, run in itertools.groupby(self.tasks, key=_plain):
            if plain:  # the common case: a run of signatures, added at once, no Exit each
                calls = [member for member in run if isinstance(member, Signature)]
                added = builder.add_steps([call.spec() for call in calls], after,
                                          [not call.immutable for call in calls])
                deps += added
                values += added
                members += added
                continue
            nested = True
            for member in run:
                end = member.emit(builder, after)
                deps.extend(end.deps)
                values.append(end.value)
                if end.result is not None:
                    members.append(end.result)
        if not self.tasks and after is not None:
            deps = list(after.deps)  # an empty group: what follows waits for what came before
        return Exit(tuple(dict.fromkeys(deps) if nested else deps), values,
                    GroupOut(tuple(members), range(start, builder.count), before))

    def find_queues(self, found: dict[int, Queue]) -> None:
        for member in self.tasks:
            if type(member) is Signature and not member.errbacks:  # Signature.find_queues,
                queue = member.queue  # without two calls per member
                if queue is not None:
                    found[id(queue)] = queue
            else:
                member.find_queues(found)
        super().find_queues(found)

    def __repr__(self) -> str:
        return f"group({', '.join(repr(member) for member in self.tasks)})"


class Chord(Canvas):
    """A group (the header), then `body` given the list of the header's results."""

    def __init__(self, header: Group | Iterable[Canvas], body: Canvas | None = None) -> None:
        super().__init__()
        self.header = header if isinstance(header, Group) else Group(header)
        if body is not None and not isinstance(body, Canvas):
            raise TypeError(f"a chord's callback is a signature, not {type(body).__name__}")
        self.body = body

    def __call__(self, body: Canvas) -> Any:
        """Celery's `chord(header)(callback)`: enqueue with this callback, now."""
        return Chord(self.header, body).apply_async()

    def apply_async(self) -> Any:
        if self.body is None:
            raise ValueError("this chord has no callback: chord(header, callback) or "
                             "chord(header)(callback)")
        return super().apply_async()

    def _emit(self, builder: GraphBuilder, after: Exit | None) -> Exit:
        if self.body is None:
            raise ValueError("this chord has no callback")
        return self.body.emit(builder, self.header.emit(builder, after))

    def find_queues(self, found: dict[int, Queue]) -> None:
        self.header.find_queues(found)
        if self.body is not None:
            self.body.find_queues(found)
        super().find_queues(found)

    def __repr__(self) -> str:
        return f"chord({self.header!r}, {self.body!r})"


# Celery's names: its canvas classes are spelled in lower case.
chain = Chain
group = Group
chord = Chord


def _members(kind: str, given: tuple[Canvas | Iterable[Canvas], ...]) -> list[Canvas]:
    """`group(a, b)` or `group([a, b])` / `group(a for ...)`, checked."""
    items: Iterable[Any] = given
    if len(given) == 1 and not isinstance(given[0], Canvas):
        items = given[0]
    members = list(items)
    for member in members:
        if not isinstance(member, Canvas):
            raise TypeError(f"a {kind} takes signatures (task.s(...)), chains, groups and "
                            f"chords, not {type(member).__name__}")
    return members


def _plain(member: Canvas) -> bool:
    """A signature without handlers: one node, nothing watching it."""
    return type(member) is Signature and not member.errbacks


def _check_json(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    try:
        encode_payload([args, kwargs])
    except SerializationError as exc:
        raise SerializationError(f"task {name!r}: arguments are not JSON: {exc}") from None
