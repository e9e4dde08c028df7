"""A crash-state explorer for nobroker: record a workload, build every crash state, check each.

Theory of operation (research note reliability.md, sections 3, 4 and 9):

1. **Record.** A workload (a function of a `Driver`) runs the real `Queue`
   in one process, in a scratch directory, with an injected fake clock and
   a seeded rng (one `random.Random` shared by the workload's handles). Every
   file operation of the storage layer goes through `RecordingFS`, a
   `nobroker.file.disk.fs.FileSystem` that performs the call on the real OS and
   appends an `Event` (with its bytes,
   a synthetic inode id, and the source lines that issued it) to a trace.
   The driver adds BEGIN and END (returned / raised / crashed) markers
   around every API call. Before and after every call a *shadow check*
   compares the recorder's mirror of the directory with the real one, so a
   write that bypassed the seam fails the run instead of being missed.

   The oracle is exact and needs no model of its own: after each call the
   driver replays every log file it wrote (its complete batches, with
   `nobroker.file.state.state.QueueState.apply_batch`) and keeps the fingerprint after
   *each* batch, keyed by position (batch, generation). Positions order by
   batch first, so a generation that lost batches copied into it sorts below
   them, and at equal batch the newer generation (a compaction's snapshot)
   is the later one. The handle's own memory is cross-checked against that
   replay after every call (memory must be the replay of its log).

2. **Build crash states.** `_Model` replays the trace event by event under a
   disk model (a *profile*) and keeps, per inode, the bytes durable as of its
   last fsync (the *floor*) and every later version of each 512-byte sector
   and of the size; per directory, the entries durable as of the last
   directory fsync and the directory operations since. A crash state is a
   choice, per unit, of how far it got:

   - `process` (kill -9, the OS survives): everything issued persists, in
     order; the write in flight at the crash may be any byte prefix.
   - `ext4ish`: per inode, any subset of the un-fsynced sector versions,
     and any un-fsynced size (a grown file may show zeros where its data did
     not land); directory operations persist as an in-order prefix; rename
     is atomic and "safe" (a renamed file's earlier data lands no later than
     the rename: ext4's auto_da_alloc, modelled for every rename). No "safe
     file flush": fsync of a file does not persist its name.
   - `weak` (ALICE's default model): as ext4ish, but directory operations
     persist as any subset, a rename is three independent micro-ops (drop
     the target entry, add it, drop the source), nothing orders data before
     a rename, and the un-written part of a grown file may hold garbage
     (random bytes) rather than zeros, a file that never had a durable byte
     included (`new_file_garbage`, on by default; off, such a file shows
     zeros). That case once hid a bug: generation 0 was created in place, so
     a crash could leave a 16-byte NAME.000000.log of junk, which opening
     refuses forever (it cannot tell junk from someone else's file) although
     no call had returned. With the option off by default the explorer never
     built that state; now generation 0 is created under a temporary name and
     renamed once its header is durable, and test_explorer_teeth plants the
     old creation back to show the explorer catches it.
   - `windows`: as ext4ish, but `fsync_dir` does nothing (there is none on
     Windows) and, as NTFS's ordered metadata journal does, a file's fsync
     persists every directory operation issued before it. The spec's
     Windows caveat follows: a compaction's flip (and the rescue an open
     may do) is durable only at the next fsync, so under `windows` a
     returned `compact`/`open` promises nothing about generations; every
     other call's durability is still checked.

   An fsync that failed (`RecordingFS.arm(..., "eio")`) follows the Linux
   "fsyncgate" behaviour: the pages stay in the cache, readable, but are
   marked clean and never reach the disk unless written again.

   The state space is bounded by strategies (reliability.md section 9.4);
   each crash point gets E1 floor, E2 ceiling, E3 every unit rolled back
   alone (and every unit alone on the floor), E4 every data write torn in
   order / with one sector missing / as a size change without its data
   (and, in `process`, byte cuts in each record header, at 1/3 and 2/3 of
   the payload and at its last byte; every byte with `byte_exhaustive`),
   E5 every subset (weak) or prefix (ext4ish) of the pending directory
   micro-ops when there are at most `max_dir_subset` of them (else
   prefixes, single omissions and random subsets), E6 = E4 x E5 when both
   are pending (compaction), E7 `random_subsets` seeded random choices;
   E3/E4/E6 are sampled down to `max_unit_variants` per crash point. A
   unit is the size of an inode, one 512-byte sector (a run of sectors
   that only ever held zeros, such as log preallocation, is one unit) or
   one directory micro-op. With an fsync per call at most one call's bytes
   are pending, so the count grows linearly with the workload (the 50-call
   workload: about 180 crash points, 1,000-4,000 states per profile, a few
   seconds). Identical states are opened once (content hash) and the
   outcome is checked against every crash point that produced it.

3. **Check** each unique state: materialise it in a scratch directory (on
   /dev/shm when present), open `Queue` on it, compare with the oracle:

   - I1 the recovered state is `history[L]` with `lo <= L <= hi`: `hi` is
     the last position whose bytes were issued before the crash, `lo` the
     last position written by a call that RETURNED (so a torn batch never
     shows, nothing never written appears, and the state is the replay of
     a batch-aligned prefix of the history);
   - I2 at a persistence point (just after a RETURNED marker) `L == hi`;
   - I3 no update of a returned call is lost (`L >= lo`; reported with the
     lost calls and their writes and fsyncs named; an acked job that is
     back is I4);
   - P2 `enqueue_many` all-or-nothing: of a batch's jobs, none or all show;
   - I5 after recovery a job leased with a live deadline is not handed out
     again, a wrong token cannot ack it (checked on sampled states, I9);
   - I6 opening raises nothing (every state here is one a crash produces);
   - I7 opening twice gives the same state and the second open writes
     nothing (the second open runs whenever the first one wrote anything;
     otherwise it would read the same files); I10 no file outside `NAME.*`;
   - I8 (compound) the recovery of sampled repaired states is itself
     recorded and crashed (weak model); every state of it recovers to the
     same state;
   - I9 (continuation, sampled; always at persistence points) after
     recovery: lease every ready job, enqueue X, lease and ack it, enqueue
     Y, reopen: X gone, Y present;
   - E8 (rot, a corruption probe, not a crash state): bits of the type,
     length and CRC fields of sampled records of the final log flipped, with
     the log ending at that record's batch or one batch later; opening must
     raise `CorruptLogError` and modify nothing, or give a state of the
     history (damage in the last batch reads as a torn tail). And each
     512-byte sector holding a sampled record zeroed (a lost or misdirected
     write) where the call that wrote the first damaged batch had returned,
     fsynced, before its handle wrote a batch that lies wholly after the
     sector: opening must refuse and modify nothing.

   nobroker's network-file-system probe is stubbed while exploring (it
   reads /proc on every open and has nothing to do with crash states).

4. **Report** figures and violations; each violation names the crash point,
   the strategy, the operations the state dropped and the nobroker source
   lines that issued them (as ALICE does).

Public API (tools/torture/run.py calls these with bigger bounds):

    explore(workload, profile="weak", bounds=None, *, name=None) -> Report
        workload: a name in WORKLOADS or a callable taking a Driver;
        profile: "process" | "ext4ish" | "weak" | "windows", or a sequence
        of them (the workload is recorded once and explored per profile);
        bounds: a Bounds (strategies, random_subsets, max_dir_subset,
        max_unit_variants, byte_exhaustive, continuation, compound,
        compound_states, rot, rot_records, new_file_garbage, seed).
        Report: .ok, .total_violations, .violations (the first 50),
        .stats[profile] (crash_points, states, unique, violations,
        seconds), .compound_states, .continued_states, .rot_states,
        .merge(other), .summary().
    WORKLOADS: dict name -> workload; random_workload(seed, length);
    ace_workloads(length) -> {name: workload}; Bounds.torture(), Bounds.quick().
    long_run(seed=0, ace_length=3, random_workloads=8, random_length=300,
             profiles=PROFILES, deadline=None, progress=print) -> Report:
        the long run for `make.py torture`: every scenario under
        Bounds.torture(), every ACE sequence up to ace_length, and long random
        workloads; report.summary() prints the figures to quote.
    crash_states(events, profile) -> [ {name: bytes} ]: the states of a
        hand-written trace (for unit tests of the disk models).
    save_fixture / load_fixture / check_fixture / iter_fixtures: the
        regression corpus in tests/crash_corpus.

    (tests/ must be on sys.path: the package imports harness/support.py.)

What it does not model: lying devices and bit rot in data that was once
durable (only the E8 probe); reads of not-yet-durable data reported to a
caller (P8); true concurrency (handles are serialised in one process, so
group commit's overlapping batches are exercised through a writer that died
before its fsync and through fsync=False, not through racing threads:
tests/file/test_thread_sync.py's real threads and processes own that); the
lock file's identity (the concurrency tests own that); a crash in the
middle of an fsync; Linux's per-descriptor fsync error reporting (errseq: an
injected EIO reaches only the failing call); sector sizes other than 512
(a 4096-byte device tears less finely, so 512 is the stricter case); the
queue directory's own creation (it exists beforehand); and, being bounded,
a state that only a specific large subset of pending units produces (the
torture run's random subsets lower, not remove, that risk).

The modules, one concern each: recording (RecordingFS, Event), frames (log
bytes read on their own terms), driver (Driver, record: the oracle), workloads
and generated (named, random and ACE workloads), disk_model (a trace replayed
under a profile), strategies (Bounds: which states to build), opener (a state
materialised and opened), checks (every state against the oracle), report
(Violation, Report), run (explore, long_run) and corpus (the regression
fixtures).
"""

from __future__ import annotations

import harness.support  # noqa: F401  (puts src/ on sys.path)

from .corpus import check_fixture, iter_fixtures, load_fixture, save_fixture
from .driver import Call, Driver, Trace, Workload, record
from .generated import ace_workloads, random_workload
from .recording import PROFILES, SECTOR, Event, RecordingFS, SimulatedCrash
from .report import ProfileStats, Report, Violation
from .run import explore, long_run, scratch_root
from .strategies import Bounds, crash_states
from .workloads import WORKLOADS, payload

__all__ = [
    "PROFILES", "SECTOR", "WORKLOADS", "Bounds", "Driver", "Event", "RecordingFS",
    "Report", "SimulatedCrash", "Violation", "ace_workloads", "explore", "random_workload",
    "record", "load_fixture", "check_fixture", "crash_states", "iter_fixtures", "long_run",
    "save_fixture", "scratch_root", "payload", "Call", "Trace", "Workload", "ProfileStats",
]
