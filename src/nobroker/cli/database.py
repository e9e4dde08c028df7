"""The PostgreSQL commands: `db migrate` (create or upgrade a queue set's schema)
and `migrate` (copy a queue's jobs between a directory and PostgreSQL).

Both import their backend only when run, so the rest of the command line
never needs psycopg.
"""

from __future__ import annotations

import argparse
import os

from .arguments import UsageError
from .location import URL_ENV, is_url, queue_location, queue_name


def cmd_db(args: argparse.Namespace) -> int:
    from ..postgres import migrate_url

    location = queue_location(args)
    if not is_url(location):
        raise UsageError(f"db migrate needs a PostgreSQL URL (--url or ${URL_ENV})")
    shown, before, after = migrate_url(location, args.schema)
    change = f"from version {before} to {after}" if before != after else f"at version {after}"
    print(f"{shown}: schema {change}")
    return 0


def cmd_migrate(args: argparse.Namespace) -> int:
    from ..transfer import transfer

    source, target = args.source, args.target
    try:
        done = transfer(source if is_url(source) else os.path.abspath(source),
                        target if is_url(target) else os.path.abspath(target), queue_name(args))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    print(done.describe())
    return 0
