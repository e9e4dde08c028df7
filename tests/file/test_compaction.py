"""Compaction while others keep working: the unlocked write, the catch-up, and peers
that follow a compaction by relocating their jobs instead of reloading.

The claim each test checks: after a compaction that ran while another handle
(same process or another process) wrote, every handle's in-memory state equals
a full replay of the new generation, and every job's payload reads back
(payload locations are not part of a state's fingerprint, so they are checked
separately, job by job).
"""

from __future__ import annotations

import json
import threading
from typing import Any

from harness.support import TempDirTestCase, file_queue, spawn_python, store_of

from nobroker import CorruptLogError, Queue
from nobroker.file.disk.fs import FileSystem
from nobroker.file.log.logfile import LogFile
from nobroker.file.log.records import Applied


def full_replay(directory: str) -> tuple[object, ...]:
    """The fingerprint a fresh open gives with checkpoints switched off."""
    with file_queue(directory, readonly=True, checkpoints=False) as fresh:
        return store_of(fresh).state.fingerprint()


def payloads(q: Queue) -> dict[str, Any]:
    return {job.id: job.payload for job in q.list_jobs()}


class CompactionWithPeersTest(TempDirTestCase):
    def fill(self, q: Queue, jobs: int) -> None:
        q.enqueue_many([{"n": i, "pad": "x" * (i % 50)} for i in range(jobs)])
        leased = q.lease(300)
        q.ack_many(leased[:100])
        for job in leased[100:200]:
            q.nack(job, error=f"failed {job.id}")
        q.enqueue({"keyed": True}, job_id="key-1")

    def test_a_peer_in_this_process_follows_a_compaction_with_every_payload_intact(self) -> None:
        directory = str(self.tmp / "q")
        with Queue(directory, fsync=False, auto_compact=None) as q, \
                Queue(directory, fsync=False, auto_compact=None) as peer:
            self.fill(q, 3000)
            before = payloads(peer)
            result = q.compact()
            self.assertEqual(result.new_generation, 1)
            peer.enqueue({"after": 1})  # the peer notices the new generation here
            self.assertEqual(peer.generation, 1)
            after = payloads(peer)
            self.assertEqual({k: v for k, v in after.items() if k in before}, before)
            self.assertEqual(len(after), len(before) + 1)
            self.assertEqual(store_of(peer).state.fingerprint(), full_replay(directory))
            q.stats()
            self.assertEqual(store_of(q).state.fingerprint(), store_of(peer).state.fingerprint())

    def test_writes_during_an_unlocked_compaction_are_carried_over(self) -> None:
        directory = str(self.tmp / "q")
        with Queue(directory, fsync=False, auto_compact=None) as q:
            self.fill(q, 20000)
            stop = threading.Event()
            written: list[str] = []

            def writer() -> None:
                with Queue(directory, fsync=False, auto_compact=None) as other:
                    while not stop.is_set() or len(written) < 50:
                        job = other.enqueue({"during": len(written)})
                        written.append(job.id)
                        leased = other.lease_one()
                        assert leased is not None
                        other.ack(leased) if len(written) % 2 else other.nack(leased)

            thread = threading.Thread(target=writer)
            thread.start()
            try:
                q.compact()
            finally:
                stop.set()
                thread.join()
            q.stats()
            self.assertEqual(store_of(q).state.fingerprint(), full_replay(directory))
            self.assertEqual(len(payloads(q)), len(store_of(q).state.jobs))

    def test_a_peer_process_follows_and_agrees_with_a_full_replay(self) -> None:
        directory = str(self.tmp / "q")
        code = r"""
import json, sys
from nobroker import Queue
q = Queue(sys.argv[1], fsync=False, auto_compact=None)
print("ready", flush=True)
n = 0
for line in sys.stdin:
    if line.strip() == "stop":
        break
    job = q.enqueue({"peer": n}); n += 1
    got = q.lease_one()
    q.ack(got)
    print("ok", flush=True)
q.stats()
jobs = {j.id: j.payload for j in q.list_jobs()}
print(json.dumps({"generation": q.generation, "jobs": len(jobs),
                  "fingerprint": repr(q.backend.handle.state.fingerprint())}), flush=True)
"""
        with Queue(directory, fsync=False, auto_compact=None) as q:
            self.fill(q, 5000)
            peer = spawn_python(code, directory)
            assert peer.stdin is not None and peer.stdout is not None
            self.assertEqual(peer.stdout.readline().strip(), b"ready")
            for _ in range(20):
                peer.stdin.write(b"go\n")
                peer.stdin.flush()
                self.assertEqual(peer.stdout.readline().strip(), b"ok")
            q.compact()
            for _ in range(20):  # the first of these follows the compaction
                peer.stdin.write(b"go\n")
                peer.stdin.flush()
                self.assertEqual(peer.stdout.readline().strip(), b"ok")
            peer.stdin.write(b"stop\n")
            peer.stdin.flush()
            report = json.loads(peer.stdout.readline())
            peer.wait(timeout=60)
        self.assertEqual(report["generation"], 1)
        self.assertEqual(report["fingerprint"], repr(full_replay(directory)))

    def run_after_preparing(self, q: Queue, action: Any) -> object:
        """q.compact(), with `action()` run right after the new file is written."""
        from nobroker.file.generations import compaction
        real = compaction.prepare_generation

        def prepare(*args: Any, **kwargs: Any) -> Any:
            prepared = real(*args, **kwargs)
            action()
            return prepared

        compaction.prepare_generation = prepare  # type: ignore[assignment]
        try:
            return q.compact()
        finally:
            compaction.prepare_generation = real  # type: ignore[assignment]

    def test_the_switch_does_not_replay_what_peers_wrote_into_the_state_it_drops(self
                                                                               ) -> None:
        # Everything a peer wrote during the compaction is replayed once, into
        # the new generation's state, outside the lock; reading it forward into
        # the compacting handle's old state, under the lock, would block
        # everyone for as long as that replay takes.
        directory = str(self.tmp / "q")
        with Queue(directory, fsync=False, auto_compact=None) as q, \
                Queue(directory, fsync=False, auto_compact=None) as peer:
            self.fill(q, 2000)
            old_state = store_of(q).state
            applied: list[int] = []
            real_apply = old_state.apply_batch

            def counting(batch: Any) -> None:
                applied.append(len(batch))
                real_apply(batch)

            def peer_writes() -> None:
                old_state.apply_batch = counting  # type: ignore[method-assign]
                for i in range(300):
                    peer.enqueue({"during": i})
                peer.ack(peer.lease_one())

            self.run_after_preparing(q, peer_writes)
            self.assertEqual(applied, [])
            self.assertIsNot(store_of(q).state, old_state)
            self.assertEqual(store_of(q).state.fingerprint(), full_replay(directory))
            self.assertEqual(len(payloads(q)), 2000 - 100 + 1 + 300 - 1)

    def test_a_dead_writers_torn_tail_found_at_the_switch_is_saved_aside(self) -> None:
        directory = str(self.tmp / "q")
        with Queue(directory, fsync=False, auto_compact=None) as q:
            self.fill(q, 500)
            log_path = store_of(q).live_log().path
            end = store_of(q).live_log().end

            def die_mid_write() -> None:
                # A batch whose first record says more follow, and then nothing.
                from nobroker.file.log import framing
                record = b'{"b":999999,"id":"x","pr":0,"at":1.0,"t":1.0,"ma":1,"p":1}'
                with open(log_path, "r+b") as f:
                    f.seek(end)
                    f.write(framing.encode_record(1, record, more=True))

            result = self.run_after_preparing(q, die_mid_write)
            self.assertEqual(getattr(result, "new_generation", None), 1)
            sides = [p.name for p in (self.tmp / "q").iterdir() if ".torn-" in p.name]
            self.assertEqual(sides, [f"default.000000.log.torn-{end}"])
            self.assertEqual(store_of(q).state.fingerprint(), full_replay(directory))

    def test_a_losers_checkpoint_over_the_winners_is_never_used_to_follow(self) -> None:
        # Two compactions of generation 0: `other` wins and switches; `q`, which
        # had started first, writes its checkpoint afterwards, under the same
        # name, then sees it lost. That checkpoint describes a file that was
        # thrown away: a peer following the switch with it would read payloads
        # at the wrong offsets. It must notice, and reload instead.
        directory = str(self.tmp / "q")
        with Queue(directory, fsync=False, auto_compact=None) as q, \
                Queue(directory, fsync=False, auto_compact=None) as other, \
                Queue(directory, fsync=False, auto_compact=None) as peer:
            self.fill(q, 600)
            for job in q.lease(50):  # so the two snapshots differ in their layout
                q.nack(job, error="x" * 100)
            expected = payloads(peer)
            from nobroker.file.generations import compaction
            real = compaction.write_generation

            def write_after_the_winner(*args: Any, **kwargs: Any) -> Any:
                compaction.write_generation = real  # type: ignore[assignment]
                # The same jobs, but early records grow: every later offset moves.
                for job in other.lease(5):
                    other.nack(job, error="y" * 300)
                other.q_done = other.compact()  # type: ignore[attr-defined]
                other.enqueue({"after": "switch"})
                return real(*args, **kwargs)

            compaction.write_generation = write_after_the_winner  # type: ignore[assignment]
            try:
                self.assertIsNone(store_of(q).compactor.compact_once())
            finally:
                compaction.write_generation = real  # type: ignore[assignment]
            self.assertEqual(other.q_done.new_generation, 1)  # type: ignore[attr-defined]
            after = payloads(peer)  # peer follows generation 1 now
            self.assertEqual(peer.generation, 1)
            # The loser's checkpoint never took the name: the peer moved, not reloaded.
            self.assertEqual((store_of(peer).counters.follows,
                              store_of(peer).counters.reloads), (1, 0))
            self.assertEqual({k: v for k, v in after.items() if k in expected}, expected)
            self.assertEqual(store_of(peer).state.fingerprint(), full_replay(directory))

    def test_a_compaction_that_loses_the_race_throws_its_file_away(self) -> None:
        directory = str(self.tmp / "q")
        with Queue(directory, fsync=False, auto_compact=None) as q, \
                Queue(directory, fsync=False, auto_compact=None) as other:
            self.fill(q, 500)
            original = store_of(q).compactor.compact_once

            def racing() -> object:
                # Let `other` compact between our preparation and our switch.
                from nobroker.file.generations import compaction
                real = compaction.prepare_generation

                def prepare(*args: Any, **kwargs: Any) -> Any:
                    prepared = real(*args, **kwargs)
                    compaction.prepare_generation = real  # type: ignore[assignment]
                    other.compact()
                    return prepared

                compaction.prepare_generation = prepare  # type: ignore[assignment]
                try:
                    return original()
                finally:
                    compaction.prepare_generation = real  # type: ignore[assignment]

            store_of(q).compactor.compact_once = racing  # type: ignore[method-assign]
            self.assertIsNone(store_of(q).compactor.compact_once())
            store_of(q).compactor.compact_once = original  # type: ignore[method-assign]
            leftovers = [n for n in (self.tmp / "q").iterdir() if ".tmp-" in n.name]
            self.assertEqual(leftovers, [])
            self.assertEqual(q.generation, 1)
            self.assertEqual(q.compact().new_generation, 2)
            self.assertEqual(store_of(q).state.fingerprint(), full_replay(directory))


class HalfWrittenBatch(FileSystem):
    """Reads see the second half of one byte range as zeros, once: a batch that
    another process is still copying into the page cache, as a reader without
    the queue's lock (a compaction catching up) can find it."""

    def __init__(self, start: int, end: int) -> None:
        self.hidden = ((start + end) // 2, end)

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        data = super().pread(fd, size, offset)
        if self.hidden is None:
            return data
        lo, hi = self.hidden
        if offset >= hi or offset + len(data) <= lo:
            return data
        self.hidden = None  # the writer finishes before anyone reads again
        a, b = max(lo, offset) - offset, min(hi, offset + len(data)) - offset
        return data[:a] + bytes(b - a) + data[b:]


class UnlockedCatchUpTest(TempDirTestCase):
    """A compaction's unlocked catch-up stops at a batch still being written; only
    the locked read judges damage (seen failing compactions when it did not)."""

    def setUp(self) -> None:
        super().setUp()
        with Queue(self.tmp / "q") as q:
            for n in range(3):
                q.enqueue({"n": n})  # three batches
        self.batches: list[tuple[int, int]] = []
        log = LogFile.open(FileSystem(), str(self.tmp / "q"), "default", 0, readonly=True)
        log.scan(lambda batch: self.batches.append(
            (batch[0].offset, batch[-1].offset + batch[-1].size)), 0, full=True)
        log.close()
        self.assertEqual(len(self.batches), 3)

    def scan(self, *, locked: bool) -> tuple[LogFile, int]:
        second = self.batches[1]
        log = LogFile.open(HalfWrittenBatch(*second), str(self.tmp / "q"), "default", 0,
                           readonly=True)
        self.addCleanup(log.close)
        seen: list[Applied] = []
        log.scan(seen.extend, 0, full=False, locked=locked)
        return log, len(seen)

    def test_without_the_lock_it_stops_before_the_half_written_batch(self) -> None:
        log, records = self.scan(locked=False)
        self.assertEqual((log.end, records), (self.batches[0][1], 1))
        seen: list[Applied] = []
        log.scan(seen.extend, 1, full=False, locked=False)  # the writer has finished
        self.assertEqual((log.end, len(seen)), (self.batches[2][1], 2))

    def test_under_the_lock_the_same_bytes_are_judged(self) -> None:
        # Under the lock nobody writes, so damage followed by an intact batch is
        # corruption: exactly what the unlocked catch-up must not conclude.
        with self.assertRaises(CorruptLogError):
            self.scan(locked=True)
