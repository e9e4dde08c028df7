"""Starts a rate window granted this process ahead, on PostgreSQL (migrations/0016).

A rate-limited ack_and_lease that finds its window at most half used asks for
WANT more starts beside its own (nb_limited_lease_granted: a quarter of the
window's count at most; none with a job of a concurrency key). They are
recorded at once at `until`, a twentieth of the period after (0.05 s at most), the
latest queue time they may be used: until then this process's ack_and_lease
leases with one of them, taking no lock and writing no window, when the best
due job's start counts in that window alone and it has no concurrency key.
The statement's last column says what happened: "count until key" (granted;
`until` a float8's 8 bytes in hex, exact whatever the session's
extra_float_digits), "0" (one used), '' or None (neither).

Each lease claims one before it asks, under a lock, so two threads never use
one; one claimed and not used (the statement found another job best, or the
time was up) is not given back, and counts in its window as made, as do those
of a process that stops or is killed: conservative, never over the limit. So
the next ask is twice what the last grant saw used (WANT at most): slow jobs
ask for few; and none for COOL leases after a grant of which none was used
(the queue's best jobs are of other keys), so that such a mix does not write
WANT starts a lease.
"""

from __future__ import annotations

import struct
import threading
from typing import Any

__all__ = ["COOL", "WANT", "Grants"]

WANT = 16  # starts asked for beside a lease's own: the window written every 17th lease
COOL = 64  # leases that ask for none after a grant of which none was used


class Grants:
    """The starts granted to one PostgresBackend (see the module doc)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._key = ""  # the window's key (limit_windows.key: '' is the queue's own)
        self._count = 0  # granted last time
        self._left = 0
        self._used = 0
        self._until = 0.0
        self._want = WANT
        self._cool = 0

    def claim(self) -> dict[str, Any]:
        """The parameters of the next rate-limited ack_and_lease: a start granted (one
        claimed: `gk`, `gu`) or none, and `gw`, how many more to ask for."""
        with self._lock:
            want = self._want if self._cool == 0 else 0
            self._cool = max(0, self._cool - 1)
            if self._left > 0:
                self._left -= 1
                return {"gk": self._key, "gu": self._until, "gw": want}
        return {"gk": None, "gu": None, "gw": want}

    def told(self, outcome: str | None) -> None:
        """What a committed statement said (see the module doc). A new grant replaces
        any left (those count as made)."""
        if not outcome:
            return
        with self._lock:
            if outcome == "0":
                self._used += 1
                return
            count, until, key = outcome.split(" ", 2)
            if self._count:  # the grant this one replaces: what of it was used
                self._want = min(WANT, 2 * self._used) or WANT
                self._cool = COOL if self._used == 0 else 0
            self._key, self._count, self._left = key, int(count), int(count)
            self._used, self._until = 0, struct.unpack(">d", bytes.fromhex(until))[0]
