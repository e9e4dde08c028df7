"""The seam of tools/bench/peers/run.py: the System base class (one method per
operation a workload needs), Skip / NotApplicable and their text, the lazy import
of a peer package, SQLite's durability read back from a connection, and
die_with_parent for the servers and consumers the script starts.

Third-party packages are imported only by name, at run time (peer_module here;
importlib in the drain's child process).
"""

from __future__ import annotations

import importlib
import signal
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

SYNC_NAMES = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}


def die_with_parent() -> None:
    """In the child before exec: get SIGTERM if this script dies, even by SIGKILL (Linux)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:
        pass


class Skip(Exception):
    """This system cannot run (missing package, server, or it failed): "skipped: reason"."""


class NotApplicable(Skip):
    """The workload does not apply to this system (e.g. no batch API): "n/a: reason"."""


def peer_module(name: str) -> Any:
    """Import a peer package (third-party imports happen only here, at run time)."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise Skip(f"{name} not importable: {exc}") from None


def sqlite_durability(conn: sqlite3.Connection) -> str:
    mode = str(conn.execute("pragma journal_mode").fetchone()[0]).upper()
    sync = SYNC_NAMES.get(int(conn.execute("pragma synchronous").fetchone()[0]), "?")
    if sync in ("FULL", "EXTRA"):
        what = "fsync per commit"
    elif sync == "NORMAL" and mode == "WAL":
        what = "no fsync per commit: survives a process crash, power loss can drop recent commits"
    else:
        what = "no fsync: power loss can lose or corrupt data"
    return f"SQLite {mode}, synchronous={sync}: {what}"


class System:
    """One queue system under test, behind the operations the workloads need."""

    name = "?"
    takes = ""  # what happens to a taken job if the consumer crashes
    supports_batch = False  # has a one-call / one-transaction batch enqueue

    def __init__(self) -> None:
        self.durability = "?"

    # lifecycle
    def open(self, d: Path) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    # operations
    def enqueue(self, payload: dict[str, Any]) -> None:
        raise NotImplementedError

    def enqueue_loop(self, payloads: list[dict[str, Any]]) -> float:
        """Seconds to enqueue each payload with its own durable call."""
        enqueue = self.enqueue
        t = time.perf_counter()
        for p in payloads:
            enqueue(p)
        return time.perf_counter() - t

    def enqueue_batch(self, payloads: list[dict[str, Any]]) -> None:
        raise NotApplicable("no batch API")

    def prefill(self, payloads: list[dict[str, Any]]) -> None:
        """Fill fast, untimed (fsync off where the system allows)."""
        for p in payloads:
            self.enqueue(p)

    def take_ack(self, n: int) -> float:
        """Seconds for n take + ack round trips (jobs already there)."""
        raise NotImplementedError

    def cold_open(self, d: Path) -> float:
        """Seconds to open the closed store in d and have the first job in hand."""
        raise NotImplementedError

    def memory_per_job(self, d: Path, n: int) -> tuple[float, str]:
        raise NotApplicable("jobs stay on disk (bounded SQLite page cache)")


T = TypeVar("T")


def timed_first_job(open_store: Callable[[], T], first_job: Callable[[T], object],
                    close: Callable[[T], object]) -> float:
    """Seconds from opening a closed store to having its first job in hand (the
    close after is not timed): what every System's cold_open measures."""
    t = time.perf_counter()
    store = open_store()
    job = first_job(store)
    elapsed = time.perf_counter() - t
    close(store)
    if job is None:
        raise RuntimeError("no job after open")
    return elapsed


def skip_text(exc: Skip) -> str:
    return f"{'n/a' if isinstance(exc, NotApplicable) else 'skipped'}: {exc}"
