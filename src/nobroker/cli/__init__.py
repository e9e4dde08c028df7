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

The package, by command group: `parser.py` (every command's arguments),
`jobs.py` (enqueue, stats, list, get, dlq, purge, cancel, pause, resume,
result), `work.py` (work), `maintenance.py` (inspect, recover, compact),
`database.py` (db migrate, migrate), `dashboard.py` (dashboard, stats
--watch); below them `arguments.py` (argument types, UsageError),
`location.py` (which queue, opened how), `output.py` (printing) and
`logformat.py` (`work --log-format json`).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from ..errors import CorruptLogError, NobrokerError
from ..worker.joblog import JOB_LOG
from .arguments import UsageError
from .logformat import JsonFormatter
from .output import complain
from .parser import Command, build_parser
from .work import load_handler

__all__ = ["main", "load_handler", "UsageError"]


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
            if getattr(args, "log_format", "text") == "json":
                handler.setFormatter(JsonFormatter())
                JOB_LOG.addHandler(handler)  # a line per job, which text logs leave out
        func: Command = args.func
        return func(args)
    except UsageError as exc:
        complain(str(exc))
        return 2
    except CorruptLogError as exc:
        hint = (" (`nobroker inspect` shows the damage; `nobroker recover --salvage` keeps "
                "every intact batch)" if exc.path.endswith(".log") else "")
        complain(f"{exc}{hint}")
        return 1
    except NobrokerError as exc:
        complain(str(exc))
        return 1
    except BrokenPipeError:  # `nobroker list | head`: the reader left; that is fine
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except OSError as exc:  # e.g. the directory is not writable: not a bug of ours
        complain(str(exc))
        return 1
    except SystemExit as exc:  # --help and --version
        return exc.code if isinstance(exc.code, int) else 0
    except KeyboardInterrupt:
        return 130
    finally:
        if handler is not None:
            logger.removeHandler(handler)
            JOB_LOG.removeHandler(handler)
            logger.setLevel(saved_level)
