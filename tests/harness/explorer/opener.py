"""Opening a crash state: materialise it in scratch and open a Queue on it.

Part of the crash-state explorer; the theory is in harness/explorer/__init__.py.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from harness.support import FakeClock, file_queue, store_of
from nobroker import CorruptLogError, Job, JobState, NotLeasedError, Queue
from nobroker.file.disk.fs import FileSystem

from .disk_model import _State
from .driver import EPOCH, _ignored_name
from .recording import QUEUE
from .report import _Outcome


class _Opener:
    """Materialises states in a scratch directory and opens a Queue on them."""

    def __init__(self, root: str, queue_kwargs: dict[str, Any]) -> None:
        self.dir = os.path.join(root, "state")
        os.makedirs(self.dir, exist_ok=True)
        self.kwargs = {k: v for k, v in queue_kwargs.items() if k not in ("fsync",)}
        self.fs = _FastFS()

    def materialise(self, state: _State) -> None:
        for name in os.listdir(self.dir):
            os.unlink(os.path.join(self.dir, name))
        linked = {name: group[0] for group in state.links for name in group[1:]}
        for name, data in state.files:
            path = os.path.join(self.dir, name)
            if name in linked:
                os.link(os.path.join(self.dir, linked[name]), path)
                continue
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
            finally:
                os.close(fd)

    def snapshot(self) -> dict[str, tuple[int, int, int]]:
        """Each file's (inode, size, mtime): any write, rename or unlink changes it."""
        out = {}
        for name in sorted(os.listdir(self.dir)):
            if not _ignored_name(name):
                st = os.stat(os.path.join(self.dir, name))
                out[name] = (st.st_ino, st.st_size, st.st_mtime_ns)
        return out

    def queue(self, clock: Callable[[], float] | None = None,
              fs: FileSystem | None = None) -> Queue:
        queue: Queue = file_queue(self.dir, QUEUE, clock=clock or FakeClock(EPOCH),
                                  fs=fs or self.fs, **self.kwargs)
        return queue

    def open(self, state: _State, now: float, continue_: bool) -> _Outcome:
        self.materialise(state)
        before = self.snapshot()
        outcome = _Outcome()
        try:
            queue = self.queue()
        except CorruptLogError as exc:
            outcome.error = f"CorruptLogError: {exc}"
            outcome.corrupt = True
            outcome.modified_on_error = self.snapshot() != before
            return outcome
        except Exception as exc:
            outcome.error = f"{type(exc).__name__}: {exc}"
            return outcome
        try:
            state_ = store_of(queue).state
            outcome.fingerprint = state_.fingerprint()
            outcome.last_batch = state_.last_batch
            outcome.generation = queue.generation
            outcome.repaired = queue.recovery.repaired or bool(queue.recovery.notes)
            outcome.jobs = {e.id: (str(e.state), e.token, e.lease_until)
                            for e in state_.jobs.values()}
        finally:
            queue.close()
        middle = self.snapshot()
        strays = [n for n in middle if not n.startswith(QUEUE + ".")]
        if strays:
            outcome.problems.append(("I10", f"files outside {QUEUE}.*: {strays}"))
        if middle == before and not continue_:
            # I7 holds trivially: the second open would read exactly the same files
            # (opening is deterministic); it matters where the first open wrote.
            return outcome
        try:
            again = self.queue()
            second = (store_of(again).state.fingerprint(), store_of(again).state.last_batch)
            again.close()
        except Exception as exc:
            outcome.problems.append(("I7", f"second open raised {type(exc).__name__}: {exc}"))
        else:
            if second != (outcome.fingerprint, outcome.last_batch):
                outcome.problems.append(("I7", "second open gave a different state"))
            after = self.snapshot()
            if after != middle:
                changed = sorted(n for n in set(after) | set(middle)
                                 if after.get(n) != middle.get(n))
                outcome.problems.append(("I7", f"second open modified {changed}"))
        if continue_:
            problem = self.continuation(outcome, now)
            if problem:
                outcome.problems.append(problem)
        return outcome

    def continuation(self, outcome: _Outcome, now: float) -> tuple[str, str] | None:
        """I9 (and I5): keep using the recovered queue, then reopen."""
        clock = FakeClock(now + 0.5)
        try:
            queue = self.queue(clock)
            try:
                if queue.stats().paused:  # a recovered pause holds: lift it to go on
                    queue.resume()
                live = {job_id: token for job_id, (state, token, until) in outcome.jobs.items()
                        if state == "leased" and until > clock.now}
                for job in queue.lease(10_000, visibility_timeout=60.0):
                    if job.id in live:
                        return "I5", f"job {job.id} leased again while its lease " \
                                     f"{live[job.id]} was live"
                for job_id, token in live.items():
                    stale = Job(job_id, None, 0, 0, 1, JobState.LEASED, 0.0, 0.0, None,
                                token=token + 1_000_000)
                    try:
                        queue.ack(stale)
                    except NotLeasedError:
                        pass
                    else:
                        return "I5", f"ack of {job_id} with a wrong token succeeded"
                x = queue.enqueue({"continuation": "x"}, priority=10**6)
                got = queue.lease(1, visibility_timeout=60.0)
                if [j.id for j in got] != [x.id]:
                    return "I9", f"lease after recovery gave {[j.id for j in got]}, not X"
                queue.ack(got[0])
                y = queue.enqueue({"continuation": "y"})
            finally:
                queue.close()
            reopened = self.queue(clock)
            try:
                jobs = store_of(reopened).state.jobs
                if x.id in jobs or y.id not in jobs:
                    return "I9", "after continuing and reopening, X (acked) is present " \
                                 "or Y (enqueued) is missing"
            finally:
                reopened.close()
        except Exception as exc:
            return "I9", f"continuing after recovery raised {type(exc).__name__}: {exc}"
        return None


class _FastFS(FileSystem):
    """The plain OS without fsyncs: checking states never waits on a disk."""

    def fsync(self, fd: int) -> None:
        pass

    def fdatasync(self, fd: int) -> None:
        pass

    def fsync_dir(self, path: str) -> None:
        pass
