"""Copying a queue between backends: `nobroker migrate --from SRC --to DST`.

What it copies: every job the source holds -- pending, leased (arriving
pending: its holder's lease does not move with it) and dead -- with its id,
payload, priority, attempts, max_attempts, last error and times. What it
does not: finished jobs and the keys they leave behind, and the acks count.

Idempotent: a job whose id the target already holds is skipped, so a second
run copies nothing twice; the counts say what happened. Run it with the
workers of both queues stopped, or jobs may move while it reads.

Directory -> PostgreSQL copies everything above. PostgreSQL -> directory
goes through the public Queue API (a keyed enqueue per job), which cannot
set attempts or errors or create a dead job: pending jobs are copied with a
fresh attempt count, dead jobs are counted as not copied.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from .backend import Settings, is_postgres_url
from .models import JobState

__all__ = ["TransferReport", "transfer"]

_GENERATED = re.compile(r"0000[0-9a-f]{12}")  # the file engine's own ids: not user keys
_BATCH = 1000


@dataclass(frozen=True)
class TransferReport:
    copied: dict[str, int]  # state -> jobs copied
    skipped: int  # already in the target
    not_copied: dict[str, int]  # state -> jobs the target cannot take

    def describe(self) -> str:
        copied = ", ".join(f"{n} {state}" for state, n in self.copied.items()) or "nothing"
        line = f"copied {copied}; {self.skipped} already in the target"
        for state, n in self.not_copied.items():
            line += f"; {n} {state} not copied (the target cannot hold them that way)"
        return line


def transfer(source: str, target: str, name: str) -> TransferReport:
    if is_postgres_url(source) == is_postgres_url(target):
        raise ValueError("migrate copies between a directory and a PostgreSQL URL "
                         "(one of --from/--to must be each)")
    if is_postgres_url(target):
        return _to_postgres(source, target, name)
    return _to_directory(source, target, name)


def _to_postgres(directory: str, url: str, name: str) -> TransferReport:
    from .queue import Queue, postgres_backend

    open_backend = postgres_backend().open_backend

    with Queue(directory, name, readonly=True) as source:
        jobs = source.list_jobs()
    backend = open_backend(url, name, Settings())
    copied: dict[str, int] = {}
    try:
        for start in range(0, len(jobs), _BATCH):
            batch = jobs[start:start + _BATCH]
            for state in backend.import_jobs(batch, [not _GENERATED.fullmatch(j.id)
                                                     for j in batch]):
                copied[str(state)] = copied.get(str(state), 0) + 1
    finally:
        backend.close()
    return TransferReport(copied, len(jobs) - sum(copied.values()), {})


def _to_directory(url: str, directory: str, name: str) -> TransferReport:
    from .queue import Queue, postgres_backend

    open_backend = postgres_backend().open_backend

    backend = open_backend(url, name, Settings(readonly=True))
    try:
        jobs = backend.list_jobs(None, None)
    finally:
        backend.close()
    copied: dict[str, int] = {}
    skipped = 0
    dead = 0
    with Queue(directory, name) as target:
        for job in jobs:
            if job.state is JobState.DEAD:
                dead += 1
                continue
            try:
                target.get(job.id)
                skipped += 1
                continue
            except Exception:
                pass
            target.enqueue(job.payload, job_id=job.id, priority=job.priority,
                           max_attempts=job.max_attempts,
                           delay=max(0.0, job.available_at - time.time()))
            copied["pending"] = copied.get("pending", 0) + 1
    return TransferReport(copied, skipped, {"dead": dead} if dead else {})
