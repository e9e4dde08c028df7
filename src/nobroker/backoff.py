"""Retry delays: exponential backoff with jitter.

The delay is decided once, by the writer, and recorded in the log as an
absolute time; replay never calls this module's randomness.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

__all__ = ["BackoffPolicy"]


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
        for name in ("base", "factor", "max_delay", "jitter"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not math.isfinite(value) or value < 0:
                raise ValueError(f"BackoffPolicy.{name} must be a finite number >= 0, "
                                 f"not {value!r}")
        if self.jitter > 1:
            raise ValueError(f"BackoffPolicy.jitter must be between 0 and 1, not {self.jitter}")
        if self.factor < 1:
            raise ValueError(f"BackoffPolicy.factor must be >= 1, not {self.factor}")

    def delay(self, attempts: int, rng: random.Random | None = None) -> float:
        exponent = max(attempts - 1, 0)
        # Cap the exponent before computing: factor ** 10_000 overflows a float.
        raw = self.max_delay if exponent > 1000 else self.base * self.factor ** exponent
        capped = min(raw, self.max_delay)
        if not self.jitter:
            return capped
        fraction = (rng or random).random()
        return capped * (1.0 - self.jitter * fraction)
