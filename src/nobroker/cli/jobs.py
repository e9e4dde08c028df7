"""The `nobroker` command line: every queue operation, for shells and scripts.

What it owns: parsing arguments, opening the queue the way each command
needs it, printing results, and turning every failure into one line on
stderr and an exit code:

    0  done
    1  the queue said no: unknown job, locked, damaged, missing, unusable
    2  the command line was wrong: bad option, bad JSON, unimportable handler

Rules: a user mistake gets one line, never a traceback (a traceback means a
bug in nobroker); a failing command changes nothing; looking never changes
anything -- `stats`, `list`, `get` and `dlq` open the queue read-only,
`inspect` reads the raw log file without opening a queue, and no command
but `enqueue` and `work` creates a queue that is not there. Results go to
stdout (`--json` for scripts); progress and repairs are logged to stderr
through the `nobroker` logger.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from .. import __version__, validation
from ..backend import POSTGRES_SCHEMES
from ..codec import loads
from ..errors import (
    CorruptLogError,
    JobNotFoundError,
    NobrokerError,
    SerializationError,
    TaskFailed,
)
from ..file.inspection import RawRecord, current_log_path, read_records
from ..file.opening import queue_exists
from ..file.salvage import salvage
from ..models import Job, JobState
from ..queue import Queue
from ..worker import DEFAULT_SHUTDOWN_TIMEOUT, Handler, Worker, describe_error

__all__ = ["main", "load_handler", "UsageError"]

DEFAULT_DIR = "./jobs"
DIR_ENV = "NOBROKER_DIR"
URL_ENV = "NOBROKER_URL"  # a PostgreSQL URL; wins over $NOBROKER_DIR
PAYLOAD_WIDTH = 60  # characters of payload shown per row by `list` and `dlq`

Command = Callable[[argparse.Namespace], int]


class UsageError(Exception):
    """The command line cannot be carried out as written (exit 2)."""


class _Parser(argparse.ArgumentParser):
    """argparse, with its errors raised (one line, exit 2) instead of exiting."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see '{self.prog} --help')")


# -- argument types ---------------------------------------------------------

# argparse hands over text: parse it here, check it through validation.py, and
# say what is wrong in the CLI's own words (naming the text as typed).

def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    try:
        return validation.seconds("seconds", value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number >= 0") from None


def _positive_seconds(text: str) -> float:
    value = _seconds(text)
    try:
        return validation.seconds("seconds", value, positive=True)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} must be greater than 0") from None


def _whole_number(text: str, minimum: int, bound: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    try:
        return validation.integer("count", value, minimum)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} must be {bound}") from None


def _positive_int(text: str) -> int:
    return _whole_number(text, 1, "at least 1")


def _non_negative_int(text: str) -> int:
    return _whole_number(text, 0, "0 or more")


# -- opening queues ---------------------------------------------------------

def _directory(args: argparse.Namespace) -> str:
    """The queue's directory, or its PostgreSQL URL (--url, --dir, $NOBROKER_URL)."""
    chosen = (getattr(args, "url", None) or getattr(args, "dir", None)
              or os.environ.get(URL_ENV) or os.environ.get(DIR_ENV) or DEFAULT_DIR)
    return chosen if _is_url(chosen) else os.path.abspath(chosen)


def _is_url(location: str) -> bool:
    return location.startswith(POSTGRES_SCHEMES)


def _name(args: argparse.Namespace) -> str:
    return getattr(args, "queue", None) or "default"


def _require_queue(args: argparse.Namespace) -> tuple[str, str]:
    """The queue's directory and name, or a NobrokerError if no such queue exists."""
    directory, name = _directory(args), _name(args)
    if _is_url(directory):
        return directory, name  # the server says whether it is there
    if not os.path.isdir(directory):
        raise NobrokerError(f"no queue directory at {directory} (set --dir or ${DIR_ENV})")
    if not queue_exists(directory, name):
        raise NobrokerError(f"no queue named {name!r} in {directory}")
    return directory, name


def _open(args: argparse.Namespace, *, readonly: bool = False, create: bool = False,
          **options: Any) -> Queue:
    if create:
        directory, name = _directory(args), _name(args)
    else:
        directory, name = _require_queue(args)
    return Queue(directory, name, readonly=readonly, lock_timeout=args.lock_timeout, **options)


# -- output -----------------------------------------------------------------

def _job_dict(job: Job) -> dict[str, Any]:
    found = {"id": job.id, "state": str(job.state), "priority": job.priority,
             "attempts": job.attempts, "max_attempts": job.max_attempts,
             "available_at": job.available_at, "enqueued_at": job.enqueued_at,
             "lease_expires_at": job.lease_expires_at, "last_error": job.last_error,
             "payload": job.payload}
    if job.finished_at is not None:  # done, dead or cancelled: say so, and when
        found.update(finished_at=job.finished_at, result=job.result,
                     finished=_finished_line(job))
    if _key_only(job):  # nothing but its key and finish time is known: say so, not 0
        found.update(attempts=None, max_attempts=None, payload=None,
                     note="only the idempotency key of this finished job is remembered; "
                          "ack with result= to keep its result and attempts")
    return found


def _key_only(job: Job) -> bool:
    """A keyed job acked without a result: the queue remembers only its key and when
    it finished (max_attempts is at least 1 for every job the queue still knows)."""
    return job.state is JobState.DONE and job.max_attempts == 0


def _finished_line(job: Job) -> str:
    """'done at 2026-12-01 09:30:00 UTC after 1 of 5 attempts', as far as it is known."""
    assert job.finished_at is not None
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(job.finished_at))
    if _key_only(job):
        return f"{job.state} at {when}"
    return f"{job.state} at {when} after {job.attempts} of {job.max_attempts} attempts"


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, ensure_ascii=False))


def _short(value: Any, width: int = PAYLOAD_WIDTH) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text if len(text) <= width else text[:width - 3] + "..."


def _when(job: Job, now: float) -> str:
    if job.state is JobState.LEASED and job.lease_expires_at is not None:
        if job.lease_expires_at <= now:  # recorded as expired by the next write
            return f"lease expired {_ago(now - job.lease_expires_at)} ago"
        return f"lease ends in {_ago(job.lease_expires_at - now)}"
    if job.state is JobState.PENDING:
        return "ready" if job.available_at <= now else f"in {_ago(job.available_at - now)}"
    return "-"


def _ago(seconds: float) -> str:
    seconds = max(seconds, 0.0)
    if seconds < 60:
        return f"{seconds:.1f}s"
    if seconds < 3600:
        return f"{seconds / 60:.1f}m"
    return f"{seconds / 3600:.1f}h"


def _table(rows: Sequence[tuple[str, ...]]) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row[:-1], widths, strict=True)]
        print("  ".join([*cells, row[-1]]).rstrip())


# -- commands ---------------------------------------------------------------

def cmd_enqueue(args: argparse.Namespace) -> int:
    text = sys.stdin.read() if args.payload == "-" else args.payload
    try:
        payload = loads(text)
    except ValueError as exc:
        raise UsageError(f"the payload is not valid JSON: {exc}") from None
    with _open(args, create=True) as queue:
        try:
            job = queue.enqueue(payload, priority=args.priority, delay=args.delay,
                                max_attempts=args.max_attempts, job_id=args.job_id)
        except (SerializationError, ValueError, TypeError) as exc:
            raise UsageError(str(exc)) from None
    print(job.id)
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    if getattr(args, "watch", False):
        return _watch_stats(args)
    with _open(args, readonly=True) as queue:
        stats = queue.stats()
        now = time.time()
        # Leases past their deadline still count as leased until a write records their
        # expiry; a read-only look must not write, so it only tells them apart.
        expired = sum(1 for job in queue.list_jobs(JobState.LEASED)
                      if job.lease_expires_at is not None and job.lease_expires_at <= now)
    torn = _torn_tail(queue)
    if args.json:
        _print_json({"queue": queue.name, "directory": queue.directory,
                     **dataclasses.asdict(stats), "leased": stats.leased - expired,
                     "expired": expired, "torn_tail": torn})
        return 0
    print(f"queue {queue.name!r} in {queue.directory}"
          + (" -- PAUSED: nothing is leased until 'nobroker resume'" if stats.paused else ""))
    for label, value, note in (
            ("pending", stats.pending, ""), ("leased", stats.leased - expired, ""),
            ("expired", expired, ""), ("dead", stats.dead, ""),
            ("in queue", stats.total, "pending + leased + expired + dead"),
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
    with _open(args, readonly=True) as queue:
        jobs = queue.list_jobs(args.state, limit=args.limit)
    _torn_tail(queue)
    if args.json:
        _print_json([_job_dict(job) for job in jobs])
        return 0
    if not jobs:
        print(f"no {args.state or ''} jobs".replace("  ", " "))
        return 0
    now = time.time()
    rows = [("ID", "STATE", "PRIORITY", "ATTEMPTS", "WHEN", "PAYLOAD")]
    rows += [(job.id, str(job.state), str(job.priority), f"{job.attempts}/{job.max_attempts}",
              _when(job, now), _short(job.payload)) for job in jobs]
    _table(rows)
    return 0


def cmd_get(args: argparse.Namespace) -> int:
    with _open(args, readonly=True) as queue:
        try:
            job = queue.get(args.id)
        except JobNotFoundError as exc:
            # A typo and a finished job that was forgotten look the same to the queue.
            raise NobrokerError(f"{exc} (never enqueued, or finished and forgotten: a "
                                f"finished job is kept only when it was acked with a "
                                f"result, cancelled, or enqueued with --job-id)") from None
    _print_json(_job_dict(job))
    return 0


def cmd_dlq(args: argparse.Namespace) -> int:
    if args.requeue is not None and args.delete is not None:
        raise UsageError("--requeue and --delete cannot be combined")
    if args.delete is not None:
        with _open(args) as queue:
            count = queue.delete_dead(args.delete or None)
        print(f"deleted {count} job(s) from the dead-letter queue")
        return 0
    if args.requeue is not None:
        with _open(args) as queue:
            count = queue.requeue_dead(args.requeue or None)
        print(f"requeued {count} job(s) from the dead-letter queue")
        return 0
    with _open(args, readonly=True) as queue:
        jobs = queue.dlq()
    if args.json:
        _print_json([_job_dict(job) for job in jobs])
        return 0
    if not jobs:
        print("the dead-letter queue is empty")
        return 0
    rows = [("ID", "ATTEMPTS", "LAST ERROR", "PAYLOAD")]
    rows += [(job.id, str(job.attempts), _short(job.last_error or "", 50).strip('"'),
              _short(job.payload, 40)) for job in jobs]
    _table(rows)
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    directory, name = _require_queue(args)
    path = current_log_path(directory, name)
    try:
        records = list(read_records(path))
    except FileNotFoundError:
        raise NobrokerError(f"{path} is missing") from None
    damaged = [r for r in records if r.error is not None]
    if args.json:
        _print_json({"path": path, "records": [dataclasses.asdict(r) for r in records]})
    else:
        print(path)
        rows = [("OFFSET", "TYPE", "CRC", "PAYLOAD")]
        rows += [(str(r.offset), r.type + ("+" if r.more else ""), "ok" if r.crc_ok else "BAD",
                  _record_text(r)) for r in records]
        _table(rows)
        print(f"{len(records) - len(damaged)} record(s); '+' marks a record whose batch "
              f"continues")
    if damaged:
        regions = ", ".join(f"{r.length} bytes at offset {r.offset} ({r.error})"
                            for r in damaged[:5])
        more = f" and {len(damaged) - 5} more" if len(damaged) > 5 else ""
        print(f"nobroker: damaged: {regions}{more}. `nobroker recover` repairs a torn "
              f"tail; `nobroker recover --salvage` keeps the intact batches after "
              f"damage (see README, 'When the log is damaged')", file=sys.stderr)
        return 1
    return 0


def _record_text(record: RawRecord) -> str:
    if record.type == "DAMAGED":
        return f"<<< {record.length} damaged bytes: {record.error} >>>"
    if record.error is not None:
        return f"({record.error})"
    return json.dumps(record.payload, ensure_ascii=False, separators=(",", ":"))


def cmd_recover(args: argparse.Namespace) -> int:
    if args.salvage or args.point_in_time:
        return _salvage(args)
    with _open(args) as queue:  # opening is what repairs: it cuts a torn tail
        report = queue.recovery
    print(report.describe() if report is not None else "nothing to repair: this backend "
          "does not keep a log")
    return 0


def _salvage(args: argparse.Namespace) -> int:
    """`recover --salvage` / `--point-in-time`: see file/salvage.py."""
    if args.salvage and args.point_in_time:
        raise UsageError("choose one of --salvage and --point-in-time")
    directory, name = _require_queue(args)
    report = salvage(directory, name, point_in_time=args.point_in_time)
    if args.json:
        _print_json({**dataclasses.asdict(report), "bytes_set_aside": report.bytes_set_aside})
    else:
        print(report.describe())
    return 0


def cmd_compact(args: argparse.Namespace) -> int:
    with _open(args) as queue:
        result = queue.compact()
    print(f"compacted generation {result.old_generation} -> {result.new_generation}: "
          f"{result.bytes_before:,} -> {result.bytes_after:,} bytes, {result.live_jobs} live "
          f"job(s), {result.remembered_keys} remembered key(s), in "
          f"{result.seconds * 1000:.1f} ms")
    if result.bytes_after > result.bytes_before:
        print("the log grew: a snapshot record states each live job in full (attempts, "
              "state, times), and this log had too little dead space to make up for it")
    return 0


def cmd_purge(args: argparse.Namespace) -> int:
    if not args.yes:
        raise UsageError("purge deletes every pending job; add --yes to confirm")
    with _open(args) as queue:
        count = queue.purge()
    print(f"purged {count} pending job(s)")
    return 0


def cmd_work(args: argparse.Namespace) -> int:
    options: dict[str, Any] = dict(
        concurrency=args.concurrency, poll_interval=args.poll_interval, max_jobs=args.max_jobs,
        idle_timeout=args.idle_timeout, shutdown_timeout=args.shutdown_timeout,
        visibility_timeout=args.visibility_timeout, timeout=args.timeout, pool=args.pool)
    if ":" not in args.handler:  # a module of tasks: its queue and its registered tasks
        with load_tasks_queue(args.handler, args) as queue:
            stats = _run_worker(queue, None, options)
    else:
        handler = load_handler(args.handler)  # before opening: a typo must not create a queue
        with _open(args, create=True) as queue:
            stats = _run_worker(queue, handler, options)
    if stats.forced:
        signum = getattr(signal, stats.stopped_by, None)
        return 128 + int(signum) if isinstance(signum, int) else 1
    return 0


def _run_worker(queue: Queue, handler: Handler | None, options: dict[str, Any]) -> Any:
    try:
        worker = Worker(queue, handler, **options)
    except ValueError as exc:  # e.g. pool="process" and a handler it cannot import
        raise UsageError(str(exc)) from None
    return worker.run()


def load_tasks_queue(module_name: str, args: argparse.Namespace) -> Queue:
    """Import a tasks module; the queue its tasks are registered on.

    `nobroker work myapp.tasks` runs on the queue the module opened; --dir
    and --queue, if given, must name that queue (they pick one if the module
    registered tasks on several).
    """
    from ..tasks import registered_queues

    _import_module(module_name, hint=" (work takes MODULE:FUNCTION, or a MODULE of tasks)")
    queues = registered_queues()
    if "dir" in args:
        queues = [q for q in queues if q.directory == os.path.abspath(args.dir)]
    if "queue" in args:
        queues = [q for q in queues if q.name == args.queue]
    if not queues:
        given = " matching --dir/--queue" if "dir" in args or "queue" in args else ""
        raise UsageError(f"module {module_name!r} registered no tasks on a queue{given} "
                         f"(decorate functions with @queue.task)")
    if len(queues) > 1:
        names = ", ".join(sorted(f"{q.name!r} in {q.directory}" for q in queues))
        raise UsageError(f"module {module_name!r} registered tasks on several queues "
                         f"({names}); choose one with --dir and --queue")
    return queues[0]


def _import_module(module_name: str, hint: str = "") -> Any:
    """Import a user's module like `python -m` would, the current directory first;
    every failure is a UsageError with one line of text."""
    here = os.getcwd()
    if not any(os.path.abspath(entry or ".") == here for entry in sys.path):
        sys.path.insert(0, here)
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if module_name == missing or module_name.startswith(missing + "."):
            raise UsageError(f"cannot import {module_name!r}: no such module in {here} "
                             f"or on sys.path{hint}") from None
        logging.getLogger("nobroker").debug("importing %r failed", module_name, exc_info=True)
        raise UsageError(f"importing {module_name!r} failed: {describe_error(exc)}") from None
    except Exception as exc:  # the handler's own module is broken: say how, in one line
        # ... and with `work -v`, where: the traceback goes to the debug log.
        logging.getLogger("nobroker").debug("importing %r failed", module_name, exc_info=True)
        raise UsageError(f"importing {module_name!r} failed: {describe_error(exc)}") from None


def cmd_db(args: argparse.Namespace) -> int:
    from ..postgres import migrate_url

    location = _directory(args)
    if not _is_url(location):
        raise UsageError(f"db migrate needs a PostgreSQL URL (--url or ${URL_ENV})")
    shown, before, after = migrate_url(location, args.schema)
    change = f"from version {before} to {after}" if before != after else f"at version {after}"
    print(f"{shown}: schema {change}")
    return 0


def cmd_migrate(args: argparse.Namespace) -> int:
    from ..transfer import transfer

    source, target = args.source, args.target
    try:
        done = transfer(source if _is_url(source) else os.path.abspath(source),
                        target if _is_url(target) else os.path.abspath(target), _name(args))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    print(done.describe())
    return 0


def load_handler(spec: str) -> Handler:
    """The callable named by MODULE:FUNCTION, imported like `python -m` would.

    The current directory is searched first, so `nobroker work tasks:handle`
    finds ./tasks.py. Every failure is a UsageError with one line of text.
    """
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise UsageError(f"handler {spec!r} must look like MODULE:FUNCTION, "
                         f"e.g. myapp.tasks:handle")
    target = _import_module(module_name)
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise UsageError(f"module {module_name!r} has no attribute {attribute!r}") from None
    if not callable(target):
        kind = type(target).__name__
        article = "an" if kind[:1].lower() in "aeiou" else "a"
        raise UsageError(f"{spec} is {article} {kind}, not a function")
    handler: Handler = target
    return handler


# -- the dashboard and stats --watch (nobroker.web) -------------------------

def _watch_stats(args: argparse.Namespace) -> int:
    from ..web.watch import watch

    if args.json:
        raise UsageError("--watch draws for a terminal; it cannot be combined with --json")
    with _open(args, readonly=True) as queue:
        watch(queue, sys.stdout, tty=sys.stdout.isatty())
    return 0  # Ctrl-C is the way out of --watch, not a failure


def cmd_dashboard(args: argparse.Namespace) -> int:
    from ..web import TOKEN_ENV, Dashboard
    from ..web.server import MIN_TOKEN_LENGTH

    directory = _directory(args)
    if not _is_url(directory) and not os.path.isdir(directory):
        raise NobrokerError(f"no queue directory at {directory} (set --dir or ${DIR_ENV})")
    token = os.environ.get(TOKEN_ENV) or None
    if token is not None and len(token) < MIN_TOKEN_LENGTH:
        raise UsageError(f"${TOKEN_ENV}: the dashboard token must be at least "
                         f"{MIN_TOKEN_LENGTH} characters")
    # For a URL: --queue's queue, and every queue of the schema the backend can list.
    try:
        dashboard = Dashboard(directory, host=args.host, port=args.port,
                              readonly=args.read_only, token=token, queues=(_name(args),))
    except ValueError as exc:  # a bad URL or queue name (the message has no password)
        raise UsageError(str(exc)) from None
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set())
                for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        dashboard.start()
        # hub.directory: for a URL, the backend's location, password shown as ***
        print(f"nobroker dashboard for {dashboard.hub.directory} at {dashboard.url}",
              flush=True)
        if args.read_only:
            print("read-only: every change is refused", flush=True)
        else:
            print(f"open {dashboard.url}#token={dashboard.token} to make changes", flush=True)
            print(f"token: {dashboard.token}", flush=True)
        stop.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        dashboard.close()
    return 0


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} must be 0-65535 (0: any free port)")
    return value


def _add_dashboard(command: Callable[[str, Command, str], argparse.ArgumentParser]) -> None:
    sub = command("dashboard", cmd_dashboard,
                  "serve a live web view of every queue in --dir (or --url)")
    sub.add_argument("--port", type=_port, default=8321, metavar="P",
                     help="TCP port (default: 8321; 0 picks a free one)")
    sub.add_argument("--host", default="127.0.0.1", metavar="H",
                     help="address to bind (default: 127.0.0.1, this machine only)")
    sub.add_argument("--read-only", action="store_true", help="refuse every change")


# -- the parser -------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    # --dir/--queue/--lock-timeout work before or after the command name. The copies
    # use SUPPRESS so a subcommand's absent option never hides the global one.
    common = _Parser(add_help=False)
    common.add_argument("--dir", default=argparse.SUPPRESS, metavar="DIR",
                        help=f"the queue directory (default: ${DIR_ENV} or {DEFAULT_DIR})")
    common.add_argument("--url", default=argparse.SUPPRESS, metavar="URL",
                        help=f"a PostgreSQL queue set instead (postgresql://...; "
                        f"default: ${URL_ENV}); --dir takes a URL too")
    common.add_argument("--queue", default=argparse.SUPPRESS, metavar="NAME",
                        help="the queue's name within the directory (default: default)")
    common.add_argument("--lock-timeout", type=_seconds, default=argparse.SUPPRESS,
                        metavar="S", help="give up if another process holds the queue's "
                        "lock this long (default: 10)")
    parser = _Parser(prog="nobroker", parents=[common],
                     description="A durable job queue in a directory: no broker, no server.",
                     epilog="exit codes: 0 ok, 1 queue error, 2 usage error")
    parser.add_argument("--version", action="version", version=f"nobroker {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(name: str, func: Command, help_text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, parents=[common], help=help_text,
                                  description=help_text)
        sub.set_defaults(func=func)
        return sub

    sub = command("enqueue", cmd_enqueue, "add a job; prints its id")
    sub.add_argument("payload", metavar="JSON", help="the job's payload as JSON ('-': stdin)")
    sub.add_argument("--priority", type=int, default=0, metavar="N",
                     help="higher runs first (default: 0)")
    sub.add_argument("--delay", type=_seconds, default=0.0, metavar="S",
                     help="hide the job for S seconds")
    sub.add_argument("--job-id", metavar="KEY",
                     help="an idempotency key: enqueueing a known key adds nothing")
    sub.add_argument("--max-attempts", type=_positive_int, metavar="N",
                     help="deliveries before the dead-letter queue (default: 5)")

    sub = command("stats", cmd_stats, "count jobs by state (read-only)")
    sub.add_argument("--json", action="store_true", help="print JSON")
    sub.add_argument("--watch", action="store_true",
                     help="redraw the counts and rates every second until Ctrl-C")

    sub = command("list", cmd_list, "list jobs in enqueue order (read-only)")
    sub.add_argument("--state", choices=[str(s) for s in JobState])
    sub.add_argument("--limit", type=_non_negative_int, metavar="N", help="at most N jobs")
    sub.add_argument("--json", action="store_true", help="print JSON")

    sub = command("get", cmd_get, "show one job as JSON (read-only)")
    sub.add_argument("id", metavar="ID")

    sub = command("work", cmd_work, "run a handler, or a module's tasks, until stopped")
    sub.add_argument("handler", metavar="MODULE:FUNC|MODULE",
                     help="the handler, or a module whose @queue.task functions to run "
                     "(imported from the current directory first)")
    sub.add_argument("--pool", choices=("thread", "process"), default="thread",
                     help="run handlers in threads or in child processes (default: thread)")
    sub.add_argument("--timeout", type=_positive_seconds, metavar="S",
                     help="time limit per job (a task's own timeout= wins); a job over it is "
                     "nacked, and under --pool process its child is killed")
    sub.add_argument("--concurrency", type=_positive_int, default=1, metavar="N",
                     help="handlers running at once, in threads (default: 1)")
    sub.add_argument("--max-jobs", type=_positive_int, metavar="N",
                     help="stop after N jobs")
    sub.add_argument("--idle-timeout", type=_seconds, metavar="S",
                     help="stop after S seconds without work")
    sub.add_argument("--shutdown-timeout", type=_seconds, default=DEFAULT_SHUTDOWN_TIMEOUT,
                     metavar="S", help="on SIGINT/SIGTERM, wait at most S seconds for "
                     f"running handlers (default: {DEFAULT_SHUTDOWN_TIMEOUT:g})")
    sub.add_argument("--visibility-timeout", type=_positive_seconds, metavar="S",
                     help="lease length, renewed by heartbeats (default: 30)")
    sub.add_argument("--poll-interval", type=_positive_seconds, default=0.1, metavar="S",
                     help="how often an idle worker looks for work (default: 0.1)")
    sub.add_argument("-q", "--quiet", action="store_true", help="log warnings and errors only")
    sub.add_argument("-v", "--verbose", action="store_true", help="log debug detail too")

    sub = command("dlq", cmd_dlq, "list the dead-letter queue, or requeue from it")
    sub.add_argument("--requeue", nargs="?", const="", metavar="ID",
                     help="move one dead job (or, without ID, all) back to pending")
    sub.add_argument("--delete", nargs="?", const="", metavar="ID",
                     help="delete one dead job (or, without ID, all of them)")
    sub.add_argument("--json", action="store_true", help="print JSON")

    sub = command("inspect", cmd_inspect, "print every raw record of the log (read-only)")
    sub.add_argument("--json", action="store_true", help="print JSON")

    sub = command("recover", cmd_recover, "open the queue, repairing a torn tail, and report")
    sub.add_argument("--salvage", action="store_true", help="damaged log: keep every intact "
                     "batch, set each damaged region aside in a side file, report the loss")
    sub.add_argument("--point-in-time", action="store_true", help="damaged log: keep what "
                     "precedes the first damage, set the rest aside in a side file")
    sub.add_argument("--json", action="store_true", help="print the salvage report as JSON")
    command("compact", cmd_compact, "rewrite the log with only the live jobs")
    sub = command("purge", cmd_purge, "delete every pending job")
    sub.add_argument("--yes", action="store_true", help="really do it")
    _job_control_commands(command)
    _add_dashboard(command)

    # -- PostgreSQL (nobroker.postgres, needs nobroker[postgres])
    sub = command("db", cmd_db, "PostgreSQL: create or upgrade a queue set's schema")
    sub.add_argument("action", choices=["migrate"], help="migrate: bring the schema to "
                     "this nobroker's version (creating it if missing)")
    sub.add_argument("--schema", metavar="NAME", help="the schema (default: the URL's "
                     "?schema=, else nobroker)")
    sub = command("migrate", cmd_migrate, "copy a queue's jobs between a directory and "
                  "PostgreSQL (pending, leased as pending, dead); safe to run twice")
    sub.add_argument("--from", dest="source", required=True, metavar="DIR|URL")
    sub.add_argument("--to", dest="target", required=True, metavar="URL|DIR")
    return parser


# -- job control: cancel, pause, resume, result --------------------------------

def cmd_cancel(args: argparse.Namespace) -> int:
    with _open(args) as queue:
        cancelled = queue.cancel(args.id)
    if not cancelled:
        raise NobrokerError(f"job {args.id!r} is not pending or leased (finished, dead, "
                            f"or unknown): nothing cancelled")
    print(f"cancelled {args.id}")
    return 0


def cmd_pause(args: argparse.Namespace) -> int:
    with _open(args) as queue:
        queue.pause()
    print(f"queue {queue.name!r} paused: nothing is leased until 'nobroker resume'")
    return 0


def cmd_resume(args: argparse.Namespace) -> int:
    with _open(args) as queue:
        queue.resume()
    print(f"queue {queue.name!r} resumed")
    return 0


def cmd_result(args: argparse.Namespace) -> int:
    with _open(args, readonly=True) as queue:
        try:
            value = queue.result(args.id, timeout=args.wait)
        except TaskFailed as exc:
            _complain(str(exc))
            return 1
        except TimeoutError:
            _complain(f"job {args.id!r} has not finished"
                      + (f" within {args.wait:g}s" if args.wait else ""))
            return 1
    print(json.dumps(value, ensure_ascii=False))
    return 0


def _job_control_commands(command: Callable[[str, Command, str],
                                            argparse.ArgumentParser]) -> None:
    sub = command("cancel", cmd_cancel, "cancel a pending or leased job")
    sub.add_argument("id", metavar="ID")
    command("pause", cmd_pause, "stop leasing jobs (enqueueing goes on) until resume")
    command("resume", cmd_resume, "lease jobs again after pause")
    sub = command("result", cmd_result, "print a finished job's result as JSON; exit 1 if "
                  "it failed, was cancelled, or has not finished")
    sub.add_argument("id", metavar="ID")
    sub.add_argument("--wait", type=_seconds, default=0.0, metavar="S",
                     help="wait up to S seconds for the job to finish (default: 0)")


def _log_level(args: argparse.Namespace) -> int:
    if args.command != "work":
        return logging.WARNING
    if args.verbose:
        return logging.DEBUG
    return logging.WARNING if args.quiet else logging.INFO


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the exit code (never raises for a user mistake)."""
    parser = build_parser()
    logger = logging.getLogger("nobroker")
    handler: logging.Handler | None = None
    saved_level = logger.level
    try:
        args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
        if not hasattr(args, "lock_timeout"):
            args.lock_timeout = 10.0
        if not logger.handlers and not logging.getLogger().handlers:
            handler = logging.StreamHandler(sys.stderr)
            handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
            logger.addHandler(handler)
            logger.setLevel(_log_level(args))
        func: Command = args.func
        return func(args)
    except UsageError as exc:
        _complain(str(exc))
        return 2
    except CorruptLogError as exc:
        hint = (" (`nobroker inspect` shows the damage; `nobroker recover --salvage` keeps "
                "every intact batch)" if exc.path.endswith(".log") else "")
        _complain(f"{exc}{hint}")
        return 1
    except NobrokerError as exc:
        _complain(str(exc))
        return 1
    except BrokenPipeError:  # `nobroker list | head`: the reader left; that is fine
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except OSError as exc:  # e.g. the directory is not writable: not a bug of ours
        _complain(str(exc))
        return 1
    except SystemExit as exc:  # --help and --version
        return exc.code if isinstance(exc.code, int) else 0
    except KeyboardInterrupt:
        return 130
    finally:
        if handler is not None:
            logger.removeHandler(handler)
            logger.setLevel(saved_level)


def _complain(message: str) -> None:
    print(f"nobroker: {message}", file=sys.stderr)
