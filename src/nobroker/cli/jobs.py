"""The job commands: enqueue, look (stats, list, get, dlq), change (dlq --requeue
and --delete, purge) and control (cancel, pause, resume, result).

Looking never changes anything: stats, list, get and dlq open the queue
read-only, and a torn tail such an open finds is reported, not cut.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from typing import Any

from ..codec import loads
from ..errors import JobNotFoundError, NobrokerError, SerializationError, TaskFailed
from ..models import JobState
from ..queue import Queue
from ..tasks.lineage import lineage
from .arguments import UsageError
from .dashboard import watch_stats
from .location import open_queue
from .output import complain, due_text, job_dict, print_json, short, table


def cmd_enqueue(args: argparse.Namespace) -> int:
    text = sys.stdin.read() if args.payload == "-" else args.payload
    try:
        payload = loads(text)
    except ValueError as exc:
        raise UsageError(f"the payload is not valid JSON: {exc}") from None
    with open_queue(args, create=True) as queue:
        try:
            job = queue.enqueue(payload, priority=args.priority, delay=args.delay,
                                max_attempts=args.max_attempts, job_id=args.job_id)
        except (SerializationError, ValueError, TypeError) as exc:
            raise UsageError(str(exc)) from None
    print(job.id)
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    if getattr(args, "watch", False):
        return watch_stats(args)
    with open_queue(args, readonly=True) as queue:
        stats = queue.stats()
        now = time.time()
        # Leases past their deadline still count as leased until a write records their
        # expiry; a read-only look must not write, so it only tells them apart.
        expired = sum(1 for job in queue.list_jobs(JobState.LEASED)
                      if job.lease_expires_at is not None and job.lease_expires_at <= now)
    torn = _torn_tail(queue)
    if args.json:
        print_json({"queue": queue.name, "directory": queue.directory,
                    **dataclasses.asdict(stats), "leased": stats.leased - expired,
                    "expired": expired, "torn_tail": torn})
        return 0
    print(f"queue {queue.name!r} in {queue.directory}"
          + (" -- PAUSED: nothing is leased until 'nobroker resume'" if stats.paused else ""))
    waiting = (("waiting", stats.waiting, "for their prerequisites"),) if stats.waiting else ()
    for label, value, note in (
            ("pending", stats.pending, ""), ("leased", stats.leased - expired, ""),
            ("expired", expired, ""), ("dead", stats.dead, ""), *waiting,
            ("in queue", stats.total,
             "pending + leased + expired + dead" + (" + waiting" if waiting else "")),
            ("kept", stats.kept, "finished, kept with their result or cancel"),
            ("done", stats.done, "acked since the queue was created"),
            ("generation", stats.generation, ""), ("log bytes", stats.log_bytes, "")):
        print(f"  {label:<11}{value:>12,}" + (f"  ({note})" if note else ""))
    print(f"  {'paused':<11}{'yes' if stats.paused else 'no':>12}")
    if expired:
        print(f"  ({expired} lease(s) ran out; the next write to the queue retries or "
              f"dead-letters them)")
    return 0


def _torn_tail(queue: Queue) -> dict[str, Any] | None:
    """A torn tail a read-only open found and left alone, said on stderr; for --json."""
    report = queue.recovery
    if report is None or report.torn_offset is None or report.repaired:
        return None
    print(f"nobroker: the log ends in a torn tail of {report.torn_bytes} bytes at offset "
          f"{report.torn_offset} ({report.torn_reason}): the next write (or `nobroker "
          f"recover`) cuts it and saves it to a side file", file=sys.stderr)
    return {"offset": report.torn_offset, "bytes": report.torn_bytes,
            "reason": report.torn_reason}


def cmd_list(args: argparse.Namespace) -> int:
    with open_queue(args, readonly=True) as queue:
        jobs = queue.list_jobs(args.state, limit=args.limit)
    _torn_tail(queue)
    if args.json:
        print_json([job_dict(job) for job in jobs])
        return 0
    if not jobs:
        print(f"no {args.state or ''} jobs".replace("  ", " "))
        return 0
    now = time.time()
    rows = [("ID", "STATE", "PRIORITY", "ATTEMPTS", "WHEN", "PAYLOAD")]
    rows += [(job.id, str(job.state), str(job.priority), f"{job.attempts}/{job.max_attempts}",
              due_text(job, now), short(job.payload)) for job in jobs]
    table(rows)
    return 0


def cmd_get(args: argparse.Namespace) -> int:
    with open_queue(args, readonly=True) as queue:
        try:
            job = queue.get(args.id)
        except JobNotFoundError as exc:
            # A typo and a finished job that was forgotten look the same to the queue.
            raise NobrokerError(f"{exc} (never enqueued, or finished and forgotten: a "
                                f"finished job is kept only when it was acked with a "
                                f"result, cancelled, or enqueued with --job-id)") from None
        found = job_dict(job)
        place = lineage(queue, job)
    if place:  # only a job in a workflow gets the key: the others print as before
        found["workflow"] = place.as_dict()
    print_json(found)
    return 0


def cmd_dlq(args: argparse.Namespace) -> int:
    if args.requeue is not None and args.delete is not None:
        raise UsageError("--requeue and --delete cannot be combined")
    if args.delete is not None:
        with open_queue(args) as queue:
            count = queue.delete_dead(args.delete or None)
        print(f"deleted {count} job(s) from the dead-letter queue")
        return 0
    if args.requeue is not None:
        with open_queue(args) as queue:
            count = queue.requeue_dead(args.requeue or None)
        print(f"requeued {count} job(s) from the dead-letter queue")
        return 0
    with open_queue(args, readonly=True) as queue:
        jobs = queue.dlq()
    if args.json:
        print_json([job_dict(job) for job in jobs])
        return 0
    if not jobs:
        print("the dead-letter queue is empty")
        return 0
    rows = [("ID", "ATTEMPTS", "LAST ERROR", "PAYLOAD")]
    rows += [(job.id, str(job.attempts), short(job.last_error or "", 50).strip('"'),
              short(job.payload, 40)) for job in jobs]
    table(rows)
    return 0


def cmd_purge(args: argparse.Namespace) -> int:
    if not args.yes:
        raise UsageError("purge deletes every pending job; add --yes to confirm")
    with open_queue(args) as queue:
        count = queue.purge()
    print(f"purged {count} pending job(s)")
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    with open_queue(args) as queue:
        cancelled = queue.cancel(args.id)
    if not cancelled:
        raise NobrokerError(f"job {args.id!r} is not pending or leased (finished, dead, "
                            f"or unknown): nothing cancelled")
    print(f"cancelled {args.id}")
    return 0


def cmd_pause(args: argparse.Namespace) -> int:
    with open_queue(args) as queue:
        queue.pause()
    print(f"queue {queue.name!r} paused: nothing is leased until 'nobroker resume'")
    return 0


def cmd_resume(args: argparse.Namespace) -> int:
    with open_queue(args) as queue:
        queue.resume()
    print(f"queue {queue.name!r} resumed")
    return 0


def cmd_result(args: argparse.Namespace) -> int:
    with open_queue(args, readonly=True) as queue:
        try:
            value = queue.result(args.id, timeout=args.wait)
        except TaskFailed as exc:
            complain(str(exc))
            return 1
        except TimeoutError:
            complain(f"job {args.id!r} has not finished"
                     + (f" within {args.wait:g}s" if args.wait else ""))
            return 1
    print(json.dumps(value, ensure_ascii=False))
    return 0
