"""What one handle did about compactions and fsyncs: counts a test or an operator can read.

Nothing here decides anything; the counts only make visible what would
otherwise show only as time (a compaction repeated in every process, a peer
that replayed a whole generation instead of following it, threads that did
not share their fsyncs). Plain integers, bumped by the thread that did the
work (the fsync counts under the handle's lock for pins, so threads lose none);
a reader may see them a moment late.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["HandleCounters"]


@dataclass(slots=True)
class HandleCounters:
    compactions_started: int = 0  # a new generation was being written (prepare began)
    compactions_switched: int = 0  # ... and became current (our switch)
    compactions_discarded: int = 0  # ... and was thrown away: a peer had switched first
    compactions_abandoned: int = 0  # ... or because a batch it copied unlocked was cut
    compactions_skipped: int = 0  # an automatic one was due, another process was on it
    follows: int = 0  # a peer's compaction followed by moving payload locations
    reloads: int = 0  # a peer's compaction followed by reloading from the files
    # Group commit: durable_calls / fdatasyncs is how many calls one fdatasync covered.
    durable_calls: int = 0  # write calls that committed records and waited for their fsync
    fdatasyncs: int = 0  # ... of which this handle's thread issued the fdatasync itself
