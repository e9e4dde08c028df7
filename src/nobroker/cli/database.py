"""The PostgreSQL commands: `db migrate` (create or upgrade a queue set's schema),
`db recount` (its counters counted anew from the rows) and `migrate` (copy a
queue's jobs between a directory and PostgreSQL).

Both import their backend only when run, so the rest of the command line
never needs psycopg.
"""

from __future__ import annotations

import argparse
import os

from ..backend import is_postgres_url
from .arguments import UsageError
from .location import URL_ENV, queue_location, queue_name


def cmd_db(args: argparse.Namespace) -> int:
    from ..opener import postgres_package

    location = queue_location(args)
    if not is_postgres_url(location):
        raise UsageError(f"db {args.action} needs a PostgreSQL URL (--url or ${URL_ENV})")
    if args.action == "recount":
        shown, counts = postgres_package().recount_url(location, args.schema)
        print(f"{shown}: counters counted anew from the rows"
              + ("" if counts else " (no queue has rows or counters)"))
        for queue in counts:
            print(f"  {queue.describe()}")
        return 0
    shown, before, after = postgres_package().migrate_url(location, args.schema)
    change = f"from version {before} to {after}" if before != after else f"at version {after}"
    print(f"{shown}: schema {change}")
    return 0


def cmd_migrate(args: argparse.Namespace) -> int:
    from ..opener import postgres_package
    from ..transfer import transfer

    source, target = (where if is_postgres_url(where) else os.path.abspath(where)
                      for where in (args.source, args.target))
    if is_postgres_url(source) == is_postgres_url(target):
        raise UsageError("migrate copies between a directory and a PostgreSQL URL "
                         "(one of --from/--to must be each)")
    postgres_package()  # first: without the driver, say so before opening anything
    done = transfer(source, target, queue_name(args))
    print(done.describe())
    return 0
