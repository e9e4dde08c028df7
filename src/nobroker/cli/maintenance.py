"""The log's own commands: inspect (every raw record), recover (a torn tail cut;
--salvage and --point-in-time for a damaged log) and compact.

inspect reads the raw log file without opening a queue, so it works on a
log that no longer opens; recover without a flag is an ordinary open, which
is what repairs a torn tail.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from ..errors import NobrokerError
from ..file.inspection import RawRecord, current_log_path, read_records
from ..file.repair.salvage import salvage
from .arguments import UsageError
from .location import open_queue, require_queue
from .output import print_json, table


def cmd_inspect(args: argparse.Namespace) -> int:
    directory, name = require_queue(args)
    path = current_log_path(directory, name)
    try:
        records = list(read_records(path))
    except FileNotFoundError:
        raise NobrokerError(f"{path} is missing") from None
    damaged = [r for r in records if r.error is not None]
    if args.json:
        print_json({"path": path, "records": [dataclasses.asdict(r) for r in records]})
    else:
        print(path)
        rows = [("OFFSET", "TYPE", "CRC", "PAYLOAD")]
        rows += [(str(r.offset), r.type + ("+" if r.more else ""), "ok" if r.crc_ok else "BAD",
                  _record_text(r)) for r in records]
        table(rows)
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
    with open_queue(args) as queue:  # opening is what repairs: it cuts a torn tail
        report = queue.recovery
    print(report.describe() if report is not None else "nothing to repair: this backend "
          "does not keep a log")
    return 0


def _salvage(args: argparse.Namespace) -> int:
    """`recover --salvage` / `--point-in-time`: see file/salvage.py."""
    if args.salvage and args.point_in_time:
        raise UsageError("choose one of --salvage and --point-in-time")
    directory, name = require_queue(args)
    report = salvage(directory, name, point_in_time=args.point_in_time)
    if args.json:
        print_json({**dataclasses.asdict(report), "bytes_set_aside": report.bytes_set_aside})
    else:
        print(report.describe())
    return 0


def cmd_compact(args: argparse.Namespace) -> int:
    with open_queue(args) as queue:
        result = queue.compact()
    print(f"compacted generation {result.old_generation} -> {result.new_generation}: "
          f"{result.bytes_before:,} -> {result.bytes_after:,} bytes, {result.live_jobs} live "
          f"job(s), {result.remembered_keys} remembered key(s), in "
          f"{result.seconds * 1000:.1f} ms")
    if result.bytes_after > result.bytes_before:
        print("the log grew: a snapshot record states each live job in full (attempts, "
              "state, times), and this log had too little dead space to make up for it")
    return 0
