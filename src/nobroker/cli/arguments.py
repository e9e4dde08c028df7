"""What the command line's words mean: argparse that reports instead of exiting,
and the argument types every command shares.

argparse hands over text: each type parses it, checks it through
validation.py, and says what is wrong in the CLI's own words (naming the
text as typed). A bad command line is a UsageError: one line, exit 2.
"""

from __future__ import annotations

import argparse
from typing import NoReturn

from .. import validation


class UsageError(Exception):
    """The command line cannot be carried out as written (exit 2)."""


class Parser(argparse.ArgumentParser):
    """argparse, with its errors raised (one line, exit 2) instead of exiting."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see '{self.prog} --help')")


def seconds_arg(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    try:
        return validation.seconds("seconds", value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number >= 0") from None


def positive_seconds_arg(text: str) -> float:
    value = seconds_arg(text)
    try:
        return validation.seconds("seconds", value, positive=True)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} must be greater than 0") from None


def _whole_number(text: str, minimum: int, bound: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    try:
        return validation.integer("count", value, minimum)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} must be {bound}") from None


def positive_int_arg(text: str) -> int:
    return _whole_number(text, 1, "at least 1")


def non_negative_int_arg(text: str) -> int:
    return _whole_number(text, 0, "0 or more")


def prefetch_arg(text: str) -> int | str:
    """--prefetch: K, or "auto" (K by the recent job durations)."""
    return "auto" if text == "auto" else _whole_number(text, 0, "0 or more, or auto")


def port_arg(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} must be 0-65535 (0: any free port)")
    return value


def _named_numbers(text: str, separator: str, what: str) -> list[tuple[str, int | None]]:
    """"a,b<sep>2" as [("a", None), ("b", 2)]: queue names, each with a number or not."""
    pairs: list[tuple[str, int | None]] = []
    for item in text.split(","):
        name, given, number = item.strip().partition(separator)
        try:
            validation.queue_name(name)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name!r} in {text!r} is not a queue name") \
                from None
        value = None
        if given:
            try:
                value = validation.integer(what, int(number), 1)
            except ValueError:
                raise argparse.ArgumentTypeError(
                    f"{what} {number!r} of queue {name!r} must be a whole number, at least 1") \
                    from None
        if any(name == seen for seen, _ in pairs):
            raise argparse.ArgumentTypeError(f"queue {name!r} appears twice in {text!r}")
        pairs.append((name, value))
    return pairs


def queues_arg(text: str) -> list[tuple[str, int | None]]:
    """--queues high,default:4,low: names in priority order, each with a cap or not."""
    return _named_numbers(text, ":", "cap")


def weights_arg(text: str) -> dict[str, int]:
    """--weights high=3,default=2,low=1: a weight for every queue."""
    pairs = _named_numbers(text, "=", "weight")
    missing = [name for name, weight in pairs if weight is None]
    if missing:
        raise argparse.ArgumentTypeError(f"give each queue a weight (NAME=N): {missing}")
    return {name: weight for name, weight in pairs if weight is not None}
