"""The payload of a workflow step: a task payload with what the step reads when it runs.

A step of a chain, group or chord is an ordinary task job; its payload is the
task format (`{"task": NAME, "args": [...], "kwargs": {...}}`) with at most
one more key, so a job enqueued on its own keeps the plain format:

    "parents": TREE      the step's first argument is the value of TREE: a job
                         id stands for that job's result, a list for the list
                         of its items' values (a chord callback gets
                         ["id1", "id2"] -> [result1, result2]; a step after a
                         group of groups, nested lists)
    "failure_of": [ids]  an on_error handler: it is called with
                         job_id= and error= of the one of these that was
                         dead-lettered (the first, if several were)

The engine never rewrites a payload, so the ids are the compiler's
(canvas.py gives the nodes they name a job id of their own). Pure: building
and reading JSON values, no queue.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, TypeAlias

__all__ = ["PARENTS", "FAILURE_OF", "Tree", "step_payload", "parents_of", "failure_of"]

PARENTS: Final = "parents"
FAILURE_OF: Final = "failure_of"

# A job id, or a list of trees: what the step receives as its first argument.
Tree: TypeAlias = "str | list[Tree]"


def step_payload(task: str, args: Sequence[Any], kwargs: Mapping[str, Any], *,
                 parents: Tree | None = None,
                 failure_of: Sequence[str] | None = None) -> dict[str, Any]:
    """A step's payload: the task format, plus the step's inputs when it has any."""
    payload: dict[str, Any] = {"task": task, "args": list(args), "kwargs": dict(kwargs)}
    if parents is not None:
        payload[PARENTS] = parents
    if failure_of is not None:
        payload[FAILURE_OF] = list(failure_of)
    return payload


def parents_of(payload: Mapping[str, Any]) -> Tree | None:
    """The tree whose value the step receives first (None: a plain task call);
    ValueError if it is not made of job ids and lists."""
    if PARENTS not in payload:
        return None
    tree = payload[PARENTS]
    _check_tree(tree)
    return tree  # type: ignore[no-any-return]


def failure_of(payload: Mapping[str, Any]) -> list[str] | None:
    """The job ids an on_error handler watches (None: not a handler); ValueError for a
    malformed list."""
    if FAILURE_OF not in payload:
        return None
    ids = payload[FAILURE_OF]
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise ValueError(f"task payload: {FAILURE_OF!r} must be a list of job ids")
    return ids


def _check_tree(tree: object) -> None:
    stack = [tree]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(item)
        elif not isinstance(item, str):
            raise ValueError(f"task payload: {PARENTS!r} must hold job ids and lists, "
                             f"not {type(item).__name__}")
