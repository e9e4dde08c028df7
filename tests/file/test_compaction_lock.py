"""One compaction at a time across processes, and checkpoints only a switch publishes.

Real processes throughout. The claims: N processes that all cross the
auto-compaction threshold make one compaction per switch (counted by the
handles' counters, not timed); a compactor killed with SIGKILL mid-way
blocks nobody (the kernel drops its lock) and loses no job; and a compaction
that loses the race to switch never replaces the winner's checkpoint, so a
peer follows the winner without a full reload.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import unittest
from pathlib import Path
from typing import Any

from harness.support import TempDirTestCase, file_queue, spawn_python, store_of

from nobroker import LockTimeoutError, Queue
from nobroker.file.disk.fs import FileSystem

# Every child opens the queue like this (FileOptions are no Queue arguments).
PRELUDE = r"""
import json, os, sys, time
from nobroker import Queue
from nobroker.backend import Settings
from nobroker.file.backend import FileBackend, FileOptions

def open_queue(**options):
    settings = {k: options.pop(k) for k in ("fsync", "lock_timeout") if k in options}
    return Queue.from_backend(FileBackend(sys.argv[1], "default", Settings(**settings),
                                          FileOptions(**options)))

def counters(q):
    c = q.backend.handle.counters
    return {name: getattr(c, name) for name in c.__slots__}
"""

DRAINER = PRELUDE + r"""
import logging
sizes = []  # bytes before each of our automatic compactions, from its log line
class Sizes(logging.Handler):
    def emit(self, record):
        if record.getMessage().startswith("auto-compacted"):
            sizes.append(record.args[1])
logging.getLogger("nobroker").addHandler(Sizes())
logging.getLogger("nobroker").setLevel(logging.INFO)
q = open_queue(fsync=False, auto_compact=0.5, min_compact_bytes=32 << 10)
print("ready", flush=True)
sys.stdin.readline()  # everyone starts together
for i in range(int(sys.argv[2])):
    q.enqueue({"i": i, "pad": "x" * 300})
    job = q.lease_one()
    q.ack(job)
q.stats()
print(json.dumps({**counters(q), "sizes": sizes}), flush=True)
q.close()
"""


def full_replay(directory: str) -> tuple[object, ...]:
    with file_queue(directory, readonly=True, checkpoints=False) as fresh:
        return store_of(fresh).state.fingerprint()


def temp_files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if ".tmp" in p.name)


class OneCompactionAtATimeTest(TempDirTestCase):
    def test_processes_auto_compacting_one_queue_make_one_compaction_per_switch(self
                                                                               ) -> None:
        directory = str(self.tmp / "q")
        Queue(directory).close()
        children = [spawn_python(DRAINER, directory, "1500") for _ in range(3)]
        try:
            for child in children:
                assert child.stdout is not None
                self.assertEqual(child.stdout.readline().strip(), b"ready")
            for child in children:
                assert child.stdin is not None
                child.stdin.write(b"go\n")
                child.stdin.flush()
            reports = []
            for child in children:
                out, err = child.communicate(timeout=120)
                self.assertEqual(child.returncode, 0, err.decode())
                reports.append(json.loads(out))
        finally:
            for child in children:
                if child.poll() is None:
                    child.kill()
                    child.wait()
        with Queue(directory) as q:
            generation = q.generation
        sizes = [size for r in reports for size in r.pop("sizes")]
        total = {key: sum(r[key] for r in reports) for key in reports[0]}
        self.assertGreaterEqual(generation, 3, total)  # enough switches to race over
        self.assertEqual(total["compactions_switched"], generation, total)
        # Not a single generation written twice: nobody started one it did not switch to.
        self.assertEqual(total["compactions_started"], generation, total)
        self.assertEqual(total["compactions_discarded"], 0, total)
        # And none ran that was no longer due (re-checked under the queue's lock after
        # the compaction lock: a peer may have just switched to a small new generation).
        self.assertEqual(len(sizes), generation)
        self.assertGreaterEqual(min(sizes), 32 << 10, sizes)

    def test_a_compactor_killed_mid_way_blocks_nobody_and_loses_no_job(self) -> None:
        directory = str(self.tmp / "q")
        with Queue(directory, fsync=False, auto_compact=None) as q:
            ids = {job.id for job in q.enqueue_many([{"n": i} for i in range(400)])}
            for job in q.lease(150):
                q.ack(job)
                ids.discard(job.id)
        code = PRELUDE + r"""
from nobroker.file.generations import compaction
real = compaction.prepare_generation
def prepare(*args, **kwargs):
    prepared = real(*args, **kwargs)
    print("prepared", flush=True)
    time.sleep(600)  # holding the compaction lock, new file and checkpoint written
compaction.prepare_generation = prepare
open_queue(auto_compact=None).compact()
"""
        child = spawn_python(code, directory)
        try:
            assert child.stdout is not None
            self.assertEqual(child.stdout.readline().strip(), b"prepared")
            # Its checkpoint waits under a name of its own: nobody would look for it.
            self.assertFalse((self.tmp / "q" / "default.000001.ckpt").exists())
            self.assertFalse((self.tmp / "q" / "default.000001.switch.ckpt").exists())
            self.assertTrue(any(".ckpt.tmp-" in n for n in temp_files(self.tmp / "q")))
            with Queue(directory, lock_timeout=0.2, auto_compact=None) as q:
                with self.assertRaises(LockTimeoutError) as caught:
                    q.compact()  # an explicit compaction waits for the running one
                if sys.platform == "linux":
                    self.assertEqual(caught.exception.holder_pid, child.pid)
                self.assertEqual(q.generation, 0)
            os.kill(child.pid, signal.SIGKILL)
            child.wait()
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
        with Queue(directory, lock_timeout=5, auto_compact=None) as q:
            self.assertEqual({job.id for job in q.list_jobs()}, ids)
            result = q.compact()  # the kernel dropped the dead compactor's lock
            self.assertEqual(result.new_generation, 1)
            self.assertEqual({job.id for job in q.list_jobs()}, ids)
        self.assertEqual(temp_files(self.tmp / "q"), [])  # its leftovers are gone
        with Queue(directory) as again:
            self.assertEqual({job.id for job in again.list_jobs()}, ids)
            self.assertEqual(store_of(again).recovery.checkpoint_offset is not None, True)
        self.assertEqual(self.replayed(directory), ids)

    def replayed(self, directory: str) -> set[str]:
        with file_queue(directory, readonly=True, checkpoints=False) as fresh:
            return {job.id for job in fresh.list_jobs()}

    def test_a_losing_compactions_checkpoint_never_replaces_the_winners(self) -> None:
        # The loser bypasses the compaction lock (as the rescue at open does) and
        # writes its snapshot and checkpoint only after the winner has switched.
        directory = str(self.tmp / "q")
        with Queue(directory, fsync=False, auto_compact=None) as q:
            q.enqueue_many([{"n": i, "pad": "p" * (i % 40)} for i in range(600)])
            for job in q.lease(50):
                q.nack(job, error="x" * 100)  # so the two snapshots differ in layout
        code = PRELUDE + r"""
from nobroker.file.generations import compaction
real = compaction.write_generation
def write(*args, **kwargs):
    print("writing", flush=True)
    sys.stdin.readline()  # until the winner has switched
    return real(*args, **kwargs)
compaction.write_generation = write
q = open_queue(fsync=False, auto_compact=None)
result = q.backend.handle.compactor.compact_once()
print(json.dumps({"result": None if result is None else result.new_generation,
                  **counters(q)}), flush=True)
"""
        with Queue(directory, fsync=False, auto_compact=None) as peer, \
                Queue(directory, fsync=False, auto_compact=None) as winner:
            expected = {job.id: job.payload for job in peer.list_jobs()}
            for job in winner.lease(5):  # early records grow: every later offset moves
                winner.nack(job, error="y" * 300)
            loser = spawn_python(code, directory)
            try:
                assert loser.stdin is not None and loser.stdout is not None
                self.assertEqual(loser.stdout.readline().strip(), b"writing")
                self.assertEqual(winner.compact().new_generation, 1)
                loser.stdin.write(b"go\n")
                loser.stdin.flush()
                out, err = loser.communicate(timeout=60)
                self.assertEqual(loser.returncode, 0, err.decode())
            finally:
                if loser.poll() is None:
                    loser.kill()
                    loser.wait()
            report: dict[str, Any] = json.loads(out)
            self.assertIsNone(report["result"])  # it saw the switch and threw its work away
            self.assertEqual(report["compactions_discarded"], 1)
            after = {job.id: job.payload for job in peer.list_jobs()}  # follows here
            self.assertEqual(peer.generation, 1)
            counters = store_of(peer).counters
            self.assertEqual((counters.follows, counters.reloads), (1, 0))
            self.assertEqual(after, expected)
            self.assertEqual(store_of(peer).state.fingerprint(), full_replay(directory))
        self.assertEqual(temp_files(self.tmp / "q"), [])

    def test_an_automatic_compaction_rechecks_it_is_due_once_it_has_the_lock(self) -> None:
        # b saw a log full of dead records, but before its automatic compaction got
        # the compaction lock, a compacted: under the queue's lock b follows, finds
        # nothing due, and writes no generation of its own.
        directory = str(self.tmp / "q")
        with file_queue(directory, fsync=False, auto_compact=None) as a, \
                file_queue(directory, fsync=False, auto_compact=0.5,
                           min_compact_bytes=1024) as b:
            a.enqueue_many([{"n": i, "pad": "x" * 200} for i in range(50)])
            a.ack_many(a.lease(50))
            b.stats()
            self.assertTrue(store_of(b).compactor.due())
            self.assertEqual(a.compact().new_generation, 1)
            store_of(b).compactor.auto()
            self.assertEqual(store_of(b).counters.compactions_started, 0)
            self.assertEqual(b.generation, 1)


class CountingFS(FileSystem):
    """Counts the opens of one file name (the compaction lock's)."""

    def __init__(self, suffix: str) -> None:
        self.suffix, self.opens = suffix, 0

    def open(self, path: str, flags: int, mode: int = 0o600) -> int:
        if path.endswith(self.suffix):
            self.opens += 1
        return super().open(path, flags, mode)


HOLDER = r"""
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)  # as a compacting peer holds it
print("held", flush=True)
sys.stdin.readline()
"""


class CompactionLockDescriptorTest(TempDirTestCase):
    def test_writes_during_a_peers_compaction_try_its_lock_without_reopening_it(self
                                                                               ) -> None:
        # Every write below finds compaction due and tries NAME.compacting, which
        # another process holds: one flock try each, on a descriptor opened once.
        directory = self.tmp / "q"
        with file_queue(directory, fsync=False, auto_compact=None) as filler:
            filler.enqueue_many([{"n": i, "pad": "x" * 200} for i in range(50)])
            filler.ack_many(filler.lease(50))  # dead records: compaction is due
        child = spawn_python(HOLDER, str(directory / "default.compacting"))
        try:
            assert child.stdout is not None
            self.assertEqual(child.stdout.readline().strip(), b"held")
            fs = CountingFS("default.compacting")
            with file_queue(directory, fs=fs, fsync=False, auto_compact=0.5,
                            min_compact_bytes=1024) as q:
                store = store_of(q)
                for i in range(20):
                    q.enqueue({"n": i})
                self.assertEqual(store.counters.compactions_skipped, 20)
                self.assertEqual(fs.opens, 1)
                self.assertEqual(store.compactor.lock.tries, 20)
                child.kill()
                child.wait()
                # With the holder gone, the same descriptor takes the lock: it compacts.
                q.enqueue({"n": 20})
                self.assertEqual(q.generation, 1)
                self.assertEqual(fs.opens, 1)
        finally:
            child.kill()
            child.wait()


    @unittest.skipUnless(hasattr(os, "fork"), "needs fork()")
    def test_a_forked_child_does_not_share_its_parents_compaction_lock(self) -> None:
        # The store keeps NAME.compacting open; a forked child using that descriptor
        # (flock belongs to the open file description) would hold it with its parent.
        with Queue(str(self.tmp / "q"), auto_compact=None) as q:
            q.enqueue("before")
            with store_of(q).compactor.compaction_lock(wait=False) as held:
                self.assertTrue(held)
                pid = os.fork()
                if pid == 0:  # pragma: no cover - the child reports by exit code
                    code = 3
                    try:
                        q.stats()  # the child's first call reopens its store
                        with store_of(q).compactor.compaction_lock(wait=False) as mine:
                            code = 1 if mine else 0
                    finally:
                        os._exit(code)
                _, status = os.waitpid(pid, 0)
            self.assertEqual(os.waitstatus_to_exitcode(status), 0,
                             "the child took the compaction lock its parent held")


class CheckpointAfterTheSwitchTest(TempDirTestCase):
    """A checkpoint saved in the new generation after the switch (at close(), or by a
    live handle in the background) leaves the switch's own checkpoint in place: a
    peer that has not moved yet still follows without a full reload, while a cold
    open reads the newer checkpoint. Real processes; the writer dies by SIGKILL."""

    WRITER = PRELUDE + r"""
how = sys.argv[2]
q = open_queue(fsync=False, auto_compact=None, checkpoint_after_bytes=0,
               checkpoint_every_bytes=1024)
switched = q.compact().bytes_after
for i in range(60):  # ~20 KiB in generation 1: past a quarter of what it covers
    q.enqueue({"after": i, "pad": "z" * 300})
if how == "close":
    q.close()  # saves default.000001.ckpt
    q = open_queue(fsync=False, auto_compact=None)
    q.enqueue({"after": "close"})
print(json.dumps({"switched": switched, **counters(q)}), flush=True)
time.sleep(600)  # until the SIGKILL
"""

    def test_a_peer_follows_cheaply_after_a_later_checkpoint_in_the_new_generation(self
                                                                                  ) -> None:
        for how in ("close", "background"):
            with self.subTest(how):
                self.follow_after(how)

    def follow_after(self, how: str) -> None:
        directory = str(self.tmp / how)
        with Queue(directory, fsync=False, auto_compact=None) as q:
            q.enqueue_many([{"n": i, "pad": "p" * (i % 40)} for i in range(600)])
            q.ack_many(q.lease(100))
        with Queue(directory, fsync=False, auto_compact=None) as peer:
            peer.stats()  # on generation 0, up to date
            writer = spawn_python(self.WRITER, directory, how)
            try:
                assert writer.stdout is not None
                report: dict[str, Any] = json.loads(writer.stdout.readline())
            finally:
                os.kill(writer.pid, signal.SIGKILL)
                writer.wait()
            names = os.listdir(directory)
            self.assertIn("default.000001.ckpt", names)  # the later checkpoint (by close()
            # or, with no close before the SIGKILL, by the live handle in the background)
            self.assertIn("default.000001.switch.ckpt", names)  # the switch's, kept
            jobs = {job.id for job in peer.list_jobs()}  # follows the switch here
            counters = store_of(peer).counters
            self.assertEqual((counters.follows, counters.reloads), (1, 0))
            self.assertEqual(peer.generation, 1)
            self.assertEqual(store_of(peer).state.fingerprint(), full_replay(directory))
        self.assertEqual(len(jobs), 560 if how == "background" else 561)
        with Queue(directory, readonly=True) as cold:  # reads the newest checkpoint
            offset = store_of(cold).recovery.checkpoint_offset
            self.assertIsNotNone(offset)
            self.assertGreater(offset, report["switched"])
