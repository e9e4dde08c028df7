"""Which groups of limited jobs a lease looks at: `Parking`, a cache over a backend's
index of limited jobs (one group per pair of keys), shared by the file engine's
replay state and the in-memory backend. What the limits are, and the `Budget` a
lease spends, are limits.py's. Nothing here reads a clock or touches storage.
"""

from __future__ import annotations

from collections.abc import Mapping

from .limits import JobKeys, Limits, family

__all__ = ["Parking"]


class Parking:
    """Which pairs of keys a lease looks at: the groups of limited jobs (a backend's
    index per pair of keys), less those set aside while their concurrency key is full.

    Computed concurrency keys (one per customer, say) can be many, and most of them
    full: a lease that asked each group would cost O(keys). A group whose key is full
    (`in_use` at the declared limit) is parked under that key the first time a lease
    finds it so, and comes back when a holder of the key lets go (`freed`, on an ack,
    nack, expiry...), or when the limits asked with differ from those it was parked
    under (another declaration: every group comes back). So a lease reads the groups
    that may have room, and each parking is paid for by the finishing that undoes it.
    A cache over the backend's state, never stored: rebuilt empty, it parks again."""

    __slots__ = ("_under", "active", "by_key")

    def __init__(self) -> None:
        self.active: dict[JobKeys, None] = {}  # the groups a lease looks at, as a set
        self.by_key: dict[str, set[JobKeys]] = {}  # concurrency key -> groups parked
        self._under: dict[str, int] = {}  # the concurrency limits they were parked under

    def add(self, keys: JobKeys) -> None:
        """A new group (it has jobs now)."""
        self.active[keys] = None

    def remove(self, keys: JobKeys) -> None:
        """A group with no job left."""
        self.active.pop(keys, None)
        parked = self.by_key.get(keys[1] or "")
        if parked is not None:
            parked.discard(keys)

    def asked_under(self, limits: Limits) -> None:
        """Before a lease or a wait decides under `limits`: parked under others, every
        group comes back."""
        if limits.concurrency != self._under:
            for parked in self.by_key.values():
                self.active.update(dict.fromkeys(parked))
            self.by_key.clear()
            self._under = dict(limits.concurrency)

    def park_if_full(self, keys: JobKeys, limits: Limits, in_use: Mapping[str, int]) -> bool:
        """Set `keys`' group aside if its concurrency key is full now; whether it was."""
        key = keys[1]
        limit = None if key is None else limits.concurrency.get(family(key))
        if key is None or limit is None or in_use.get(key, 0) < limit:
            return False
        del self.active[keys]
        self.by_key.setdefault(key, set()).add(keys)
        return True

    def freed(self, key: str) -> None:
        """A holder of concurrency key `key` let go: its groups come back."""
        parked = self.by_key.pop(key, None)
        if parked:
            self.active.update(dict.fromkeys(parked))
