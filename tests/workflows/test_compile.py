"""The canvas compiler, pure: chain/group/chord/on_error in, GraphNodes out, no queue.

Signatures are built by task name (`Signature("add", ...)`), so nothing here
opens a queue; ids come from a counter (`n0`, `n1`, ...), so the payloads are
exact. What the nodes do when enqueued and run is test_workflows.py's.
"""

from __future__ import annotations

import itertools
import unittest
from collections.abc import Callable
from typing import Any

from nobroker import SerializationError, chain, chord, group
from nobroker.dependencies import GraphNode
from nobroker.tasks import Signature, compile_canvas
from nobroker.tasks.graph_builder import Compiled, GroupOut, StepOut


def sig(name: str, *args: Any, **kwargs: Any) -> Signature:
    return Signature(name, args, kwargs)


def counter() -> Callable[[], str]:
    numbers = itertools.count()
    return lambda: f"n{next(numbers)}"


def compiled(canvas: Any) -> Compiled:
    return compile_canvas(canvas, counter())


def call(task: str, *args: Any, **extra: Any) -> dict[str, Any]:
    """A payload as the compiler writes it: the plain task format, plus `extra`."""
    return {"task": task, "args": list(args), "kwargs": {}, **extra}


class SignatureTest(unittest.TestCase):
    def test_a_lone_signature_is_one_plain_task_payload(self) -> None:
        out = compiled(sig("add", 2, 2))
        self.assertEqual(out.nodes, [GraphNode(call("add", 2, 2))])
        self.assertEqual(out.result, StepOut(0))

    def test_non_json_arguments_are_refused_when_the_signature_is_built(self) -> None:
        with self.assertRaisesRegex(SerializationError, "task 'add': arguments are not JSON"):
            sig("add", object())
        with self.assertRaises(SerializationError):
            sig("add", when=float("nan"))

    def test_options_are_checked_and_land_on_the_node(self) -> None:
        step = sig("add", 1).set(priority=5, countdown=3, max_attempts=2, job_id="mine")
        self.assertEqual(compiled(step).nodes,
                         [GraphNode(call("add", 1), (), "success", 5, 3.0, 2, "mine")])
        with self.assertRaisesRegex(TypeError, "unknown signature option 'queue'"):
            sig("add").set(queue="other")
        with self.assertRaises(ValueError):
            sig("add").set(delay=-1)

    def test_the_pipe_builds_one_flat_chain(self) -> None:
        a, b, c = sig("a"), sig("b"), sig("c")
        self.assertEqual((a | b | c).tasks, [a, b, c])
        self.assertEqual(chain(a, chain(b, c)).tasks, [a, b, c])
        self.assertEqual(chain([a, b]).tasks, [a, b])

    def test_members_that_are_not_signatures_are_refused(self) -> None:
        with self.assertRaisesRegex(TypeError, "a group takes signatures"):
            group(sig("a"), "b")  # type: ignore[arg-type]
        with self.assertRaisesRegex(TypeError, "on_error takes a signature"):
            sig("a").on_error(chain(sig("b"), sig("c")))  # type: ignore[arg-type]


class ChainTest(unittest.TestCase):
    def test_each_step_waits_for_the_previous_one_and_receives_its_result(self) -> None:
        out = compiled(chain(sig("add", 2, 2), sig("add", 4), sig("add", 8)))
        self.assertEqual(out.nodes, [
            GraphNode(call("add", 2, 2), job_id="n0"),
            GraphNode(call("add", 4, parents="n0"), (0,), job_id="n1"),
            GraphNode(call("add", 8, parents="n1"), (1,)),
        ])
        self.assertEqual(out.result, StepOut(2, StepOut(1, StepOut(0))))

    def test_an_immutable_step_waits_but_receives_nothing(self) -> None:
        out = compiled(sig("a") | Signature("b", (1,), immutable=True))
        self.assertEqual(out.nodes, [GraphNode(call("a")), GraphNode(call("b", 1), (0,))])

    def test_a_chain_ending_in_a_group_hands_back_the_group(self) -> None:
        out = compiled(sig("a") | group(sig("b"), sig("c")))
        self.assertEqual([n.depends_on for n in out.nodes], [(), (0,), (0,)])
        self.assertEqual([n.payload.get("parents") for n in out.nodes], [None, "n0", "n0"])
        # a member that is one step after the group's parent is its node's index
        self.assertEqual(out.result, GroupOut((1, 2), range(1, 3), StepOut(0)))

    def test_a_step_after_a_group_receives_the_members_results_in_order(self) -> None:
        out = compiled(chain(group(sig("a"), sig("b")), sig("c")))
        self.assertEqual(out.nodes[2], GraphNode(call("c", parents=["n0", "n1"]), (0, 1)))

    def test_an_empty_chain_is_refused(self) -> None:
        with self.assertRaisesRegex(ValueError, "empty chain"):
            compiled(chain())


class GroupTest(unittest.TestCase):
    def test_members_are_independent_and_the_result_lists_them_in_order(self) -> None:
        out = compiled(group(sig("add", i, i) for i in range(3)))
        self.assertEqual(out.nodes, [GraphNode(call("add", i, i)) for i in range(3)])
        self.assertEqual(out.result, GroupOut((0, 1, 2), range(3)))

    def test_a_chain_inside_a_group_feeds_its_own_steps(self) -> None:
        out = compiled(group(chain(sig("a"), sig("b")), sig("c")))
        self.assertEqual([n.depends_on for n in out.nodes], [(), (0,), ()])
        self.assertEqual(out.nodes[1].payload["parents"], "n0")

    def test_an_empty_group_compiles_to_nothing(self) -> None:
        out = compiled(group())
        self.assertEqual((out.nodes, out.result), ([], GroupOut((), range(0))))


class ChordTest(unittest.TestCase):
    def test_the_callback_waits_for_every_member_and_receives_their_list(self) -> None:
        out = compiled(chord([sig("a"), sig("b")], sig("tsum")))
        self.assertEqual(out.nodes[2], GraphNode(call("tsum", parents=["n0", "n1"]), (0, 1)))
        self.assertEqual(out.result, StepOut(2, GroupOut((0, 1), range(2))))

    def test_a_chord_with_an_empty_header_runs_its_callback_with_an_empty_list(self) -> None:
        out = compiled(chord([], sig("tsum")))
        self.assertEqual(out.nodes, [GraphNode(call("tsum", parents=[]))])

    def test_an_empty_header_after_a_step_passes_on_what_it_waited_for(self) -> None:
        out = compiled(sig("a") | chord([], sig("tsum")))
        self.assertEqual(out.nodes[1], GraphNode(call("tsum", parents=[]), (0,)))

    def test_a_chord_whose_callback_is_a_chain(self) -> None:
        out = compiled(chord([sig("a"), sig("b")], sig("c") | sig("d")))
        self.assertEqual([n.depends_on for n in out.nodes], [(), (), (0, 1), (2,)])
        self.assertEqual(out.nodes[3].payload["parents"], "n2")
        self.assertIsInstance(out.result, StepOut)
        assert isinstance(out.result, StepOut)
        self.assertEqual(out.result.index, 3)

    def test_nested_groups_pass_nested_lists(self) -> None:
        out = compiled(chord([group(sig("a"), sig("b")), sig("c")], sig("d")))
        self.assertEqual(out.nodes[3].payload["parents"], [["n0", "n1"], "n2"])

    def test_a_chord_without_a_callback_cannot_compile(self) -> None:
        with self.assertRaisesRegex(ValueError, "no callback"):
            compiled(chord([sig("a")]))


class OnErrorTest(unittest.TestCase):
    def test_a_handler_is_a_failure_node_placed_last(self) -> None:
        out = compiled(sig("a").on_error(sig("notify", "ops")))
        self.assertEqual(out.nodes, [
            GraphNode(call("a"), job_id="n0"),
            GraphNode(call("notify", "ops", failure_of=["n0"]), (0,), "failure")])

    def test_a_handler_on_a_step_watches_the_steps_after_it_too(self) -> None:
        out = compiled(chain(sig("a"), sig("b").on_error(sig("h")), sig("c")))
        handler = out.nodes[-1]
        self.assertEqual((handler.depends_on, handler.mode), ((1, 2), "failure"))
        self.assertEqual(handler.payload["failure_of"], [out.nodes[1].job_id,
                                                         out.nodes[2].job_id])

    def test_a_handler_on_a_chain_watches_every_step(self) -> None:
        out = compiled(chain(sig("a"), sig("b")).on_error(sig("h")))
        self.assertEqual(out.nodes[-1].depends_on, (0, 1))

    def test_a_handler_on_a_chord_header_watches_the_callback_too(self) -> None:
        out = compiled(chord(group(sig("a"), sig("b")).on_error(sig("h")), sig("c")))
        self.assertEqual(out.nodes[-1].depends_on, (0, 1, 2))

    def test_a_handler_of_a_handler_is_refused(self) -> None:
        with self.assertRaisesRegex(ValueError, "handlers of its own"):
            compiled(sig("a").on_error(sig("h").on_error(sig("hh"))))

    def test_on_error_returns_the_signature(self) -> None:
        step = sig("a")
        self.assertIs(step.on_error(sig("h")).on_error(sig("g")), step)


if __name__ == "__main__":
    unittest.main()
