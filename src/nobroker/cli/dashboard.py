"""`nobroker dashboard` and `stats --watch`: the command line's doors into
nobroker.dashboard, imported only when one of them runs.

The dashboard serves until SIGINT or SIGTERM, which only set a flag; the
server is closed and the previous signal handlers put back on the way out.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading

from ..backend import is_postgres_url
from ..errors import NobrokerError
from .arguments import UsageError
from .location import DIR_ENV, open_queue, queue_location, queue_name


def watch_stats(args: argparse.Namespace) -> int:
    from ..dashboard.watch import watch

    if args.json:
        raise UsageError("--watch draws for a terminal; it cannot be combined with --json")
    with open_queue(args, readonly=True) as queue:
        watch(queue, sys.stdout, tty=sys.stdout.isatty())
    return 0  # Ctrl-C is the way out of --watch, not a failure


def cmd_dashboard(args: argparse.Namespace) -> int:
    from ..dashboard import TOKEN_ENV, Dashboard
    from ..dashboard.server import MIN_TOKEN_LENGTH

    directory = queue_location(args)
    if not is_postgres_url(directory) and not os.path.isdir(directory):
        raise NobrokerError(f"no queue directory at {directory} (set --dir or ${DIR_ENV})")
    token = os.environ.get(TOKEN_ENV) or None
    if token is not None and len(token) < MIN_TOKEN_LENGTH:
        raise UsageError(f"${TOKEN_ENV}: the dashboard token must be at least "
                         f"{MIN_TOKEN_LENGTH} characters")
    # For a URL: --queue's queue, and every queue of the schema the backend can list.
    try:
        dashboard = Dashboard(directory, host=args.host, port=args.port,
                              readonly=args.read_only, token=token, queues=(queue_name(args),))
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
