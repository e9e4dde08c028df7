"""Every command's arguments, in one argparse parser.

--dir, --url, --queue and --lock-timeout work before or after the command
name. Each subcommand's defaults name the function that runs it (func).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from .. import __version__
from ..models import JobState
from ..worker import DEFAULT_SHUTDOWN_TIMEOUT
from .arguments import (
    Parser,
    non_negative_int_arg,
    port_arg,
    positive_int_arg,
    positive_seconds_arg,
    prefetch_arg,
    queues_arg,
    seconds_arg,
    weights_arg,
)
from .dashboard import cmd_dashboard
from .database import cmd_db, cmd_migrate
from .jobs import (
    cmd_cancel,
    cmd_dlq,
    cmd_enqueue,
    cmd_get,
    cmd_list,
    cmd_pause,
    cmd_purge,
    cmd_result,
    cmd_resume,
    cmd_stats,
)
from .location import DEFAULT_DIR, DIR_ENV, URL_ENV
from .maintenance import cmd_compact, cmd_inspect, cmd_recover
from .work import cmd_work

Command = Callable[[argparse.Namespace], int]
AddCommand = Callable[[str, Command, str], argparse.ArgumentParser]


def build_parser() -> argparse.ArgumentParser:
    # --dir/--queue/--lock-timeout work before or after the command name. The copies
    # use SUPPRESS so a subcommand's absent option never hides the global one.
    common = Parser(add_help=False)
    common.add_argument("--dir", default=argparse.SUPPRESS, metavar="DIR",
                        help=f"the queue directory (default: ${DIR_ENV} or {DEFAULT_DIR})")
    common.add_argument("--url", default=argparse.SUPPRESS, metavar="URL",
                        help=f"a PostgreSQL queue set instead (postgresql://...; "
                        f"default: ${URL_ENV}); --dir takes a URL too")
    common.add_argument("--queue", default=argparse.SUPPRESS, metavar="NAME",
                        help="the queue's name within the directory (default: default)")
    common.add_argument("--lock-timeout", type=seconds_arg, default=argparse.SUPPRESS,
                        metavar="S", help="give up if another process holds the queue's "
                        "lock this long (default: 10)")
    parser = Parser(prog="nobroker", parents=[common],
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
    sub.add_argument("--delay", type=seconds_arg, default=0.0, metavar="S",
                     help="hide the job for S seconds")
    sub.add_argument("--job-id", metavar="KEY",
                     help="an idempotency key: enqueueing a known key adds nothing")
    sub.add_argument("--max-attempts", type=positive_int_arg, metavar="N",
                     help="deliveries before the dead-letter queue (default: 5)")

    sub = command("stats", cmd_stats, "count jobs by state (read-only)")
    sub.add_argument("--json", action="store_true", help="print JSON")
    sub.add_argument("--watch", action="store_true",
                     help="redraw the counts and rates every second until Ctrl-C")

    sub = command("list", cmd_list, "list jobs in enqueue order (read-only)")
    sub.add_argument("--state", choices=[str(s) for s in JobState])
    sub.add_argument("--limit", type=non_negative_int_arg, metavar="N", help="at most N jobs")
    sub.add_argument("--json", action="store_true", help="print JSON")

    sub = command("get", cmd_get, "show one job as JSON (read-only)")
    sub.add_argument("id", metavar="ID")

    sub = command("work", cmd_work, "run a handler, or a module's tasks, until stopped")
    sub.add_argument("handler", metavar="MODULE:FUNC|MODULE",
                     help="the handler, or a module whose @queue.task functions to run "
                     "(imported from the current directory first)")
    sub.add_argument("--pool", choices=("thread", "process"), default="thread",
                     help="run handlers in threads or in child processes (default: thread)")
    sub.add_argument("--timeout", type=positive_seconds_arg, metavar="S",
                     help="time limit per job (a task's own timeout= wins); a job over it is "
                     "nacked, and under --pool process its child is killed")
    sub.add_argument("--concurrency", type=positive_int_arg, default=1, metavar="N",
                     help="handlers running at once, in threads (default: 1)")
    sub.add_argument("--prefetch", type=prefetch_arg, metavar="K",
                     help="keep K jobs leased beyond the running ones, and ack finished "
                     "jobs in batches with the next leases; auto: K by the recent job "
                     "durations (default: auto with --weights, else 0)")
    sub.add_argument("--ack-delay", type=seconds_arg, metavar="S",
                     help="with --prefetch: let a finished job's ack wait up to S seconds "
                     "for others to share its write and fsync (default: 0)")
    sub.add_argument("--max-jobs", type=positive_int_arg, metavar="N",
                     help="stop after N jobs")
    sub.add_argument("--idle-timeout", type=seconds_arg, metavar="S",
                     help="stop after S seconds without work")
    sub.add_argument("--shutdown-timeout", type=seconds_arg, default=DEFAULT_SHUTDOWN_TIMEOUT,
                     metavar="S", help="on SIGINT/SIGTERM, wait at most S seconds for "
                     f"running handlers (default: {DEFAULT_SHUTDOWN_TIMEOUT:g})")
    sub.add_argument("--visibility-timeout", type=positive_seconds_arg, metavar="S",
                     help="lease length, renewed by heartbeats (default: 30)")
    sub.add_argument("--poll-interval", type=positive_seconds_arg, default=0.1, metavar="S",
                     help="how often an idle worker looks for work (default: 0.1)")
    sub.add_argument("--queues", type=queues_arg, metavar="A,B:N,C",
                     help="work several queues of --dir/--url, the first first (strict "
                     "priority); NAME:N runs at most N jobs of NAME at once")
    sub.add_argument("--weights", type=weights_arg, metavar="A=3,B=1",
                     help="with --queues: share picks by weight instead of by priority")
    sub.add_argument("--log-format", choices=("text", "json"), default="text",
                     help="json: one JSON object a line on stderr, with one line per job "
                     "(job_id, task, attempt, outcome, duration_ms)")
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
    sub = command("db", cmd_db, "PostgreSQL: create or upgrade a queue set's schema, or "
                  "count its jobs anew")
    sub.add_argument("action", choices=["migrate", "recount"], help="migrate: bring the "
                     "schema to this nobroker's version (creating it if missing); recount: "
                     "count every queue's jobs anew from the rows, after rows were changed "
                     "by hand (writers wait while it runs)")
    sub.add_argument("--schema", metavar="NAME", help="the schema (default: the URL's "
                     "?schema=, else nobroker)")
    sub = command("migrate", cmd_migrate, "copy a queue's jobs between a directory and "
                  "PostgreSQL: pending, leased (as pending) and dead jobs, waiting jobs "
                  "with their prerequisites, revivable cancelled dependents, each with its "
                  "limit keys and cap, and the rate limits' windows (their latest "
                  "starts); safe to run twice")
    sub.epilog = "Not copied: finished jobs and remembered keys. See docs/CLI.md."
    sub.add_argument("--from", dest="source", required=True, metavar="DIR|URL")
    sub.add_argument("--to", dest="target", required=True, metavar="URL|DIR")
    return parser


def _job_control_commands(command: AddCommand) -> None:
    sub = command("cancel", cmd_cancel, "cancel a pending or leased job")
    sub.add_argument("id", metavar="ID")
    command("pause", cmd_pause, "stop leasing jobs (enqueueing goes on) until resume")
    command("resume", cmd_resume, "lease jobs again after pause")
    sub = command("result", cmd_result, "print a finished job's result as JSON; exit 1 if "
                  "it failed, was cancelled, or has not finished")
    sub.add_argument("id", metavar="ID")
    sub.add_argument("--wait", type=seconds_arg, default=0.0, metavar="S",
                     help="wait up to S seconds for the job to finish (default: 0)")


def _add_dashboard(command: AddCommand) -> None:
    sub = command("dashboard", cmd_dashboard,
                  "serve a live web view of every queue in --dir (or --url)")
    sub.add_argument("--port", type=port_arg, default=8321, metavar="P",
                     help="TCP port (default: 8321; 0 picks a free one)")
    sub.add_argument("--host", default="127.0.0.1", metavar="H",
                     help="address to bind (default: 127.0.0.1, this machine only)")
    sub.add_argument("--read-only", action="store_true", help="refuse every change")
