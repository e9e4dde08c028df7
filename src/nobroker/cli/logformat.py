"""`nobroker work --log-format json`: every log line as one JSON object.

Each record becomes {"time", "level", "logger", "message"} and, for the
worker's one record per job (the `nobroker.jobs` logger, worker/joblog.py),
its fields: `job_id`, `queue`, `task`, `attempt`, `outcome`, `duration_ms`.
A traceback, if the record carries one, goes in `exc`. One object a line,
so that `jq` and log shippers read the stream as it comes.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Final

__all__ = ["JsonFormatter", "JOB_FIELDS"]

JOB_FIELDS: Final = ("job_id", "queue", "task", "attempt", "outcome", "duration_ms")


class JsonFormatter(logging.Formatter):
    """A log record as one line of JSON."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(
                timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in JOB_FIELDS:
            if name in record.__dict__:
                line[name] = record.__dict__[name]
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)
