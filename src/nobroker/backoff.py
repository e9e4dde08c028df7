"""Retry delays: exponential backoff with jitter.

The delay is decided once, by the writer, and recorded in the log as an
absolute time; replay never calls this module's randomness.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Protocol

from .validation import number

__all__ = ["BackoffPolicy", "Rng"]


class Rng(Protocol):
    """What the writers draw ids and jitter from: `random.Random` or a seeded one.
    Planning code takes one from its caller instead of importing `random`."""

    def random(self) -> float: ...

    def getrandbits(self, k: int, /) -> int: ...


@dataclass(frozen=True, slots=True)
class BackoffPolicy:
    """Delay before retry number n (n = attempts so far, from 1).

    delay = min(max_delay, base * factor ** (n - 1)), then reduced by a random
    fraction up to `jitter` (0 = exact, 0.5 = anywhere in [50%, 100%]), so
    that jobs failing together do not all retry in the same instant.
    """

    base: float = 1.0
    factor: float = 2.0
    max_delay: float = 300.0
    jitter: float = 0.5

    def __post_init__(self) -> None:
        number("BackoffPolicy.base", self.base, minimum=0)
        number("BackoffPolicy.factor", self.factor, minimum=1)
        number("BackoffPolicy.max_delay", self.max_delay, minimum=0)
        number("BackoffPolicy.jitter", self.jitter, minimum=0, maximum=1)

    def delay(self, attempts: int, rng: Rng | None = None) -> float:
        """The delay before retry `attempts`; its jitter drawn from `rng` (the queue
        passes its own; without one, the `random` module's)."""
        exponent = max(attempts - 1, 0)
        # Cap the exponent before computing: factor ** 10_000 overflows a float.
        raw = self.max_delay if exponent > 1000 else self.base * self.factor ** exponent
        capped = min(raw, self.max_delay)
        if not self.jitter:
            return capped
        fraction = (rng or random).random()
        return capped * (1.0 - self.jitter * fraction)
