"""A nobroker job as Django's `TaskResult`, and the attempt history a job keeps.

Django's results carry more than a job does: one error (exception class and
traceback) per failed attempt, the workers that ran it, when it first and last
started. nobroker keeps them in the job itself, so any process reads them from
the queue with no table of its own:

- while attempts fail, the job's `last_error` is ``TaskAttemptFailed: `` and a
  JSON `History` (each failed attempt's error, every worker, the start times):
  the next attempt reads it back and adds to it;
- a finished job's result is the JSON `Outcome` below: the task's path and
  arguments (a done job keeps no payload), its return value and the history.

A `last_error` that is not ours (a time limit, "unknown task", a killed child)
reads as one error of the type it names.
"""

from __future__ import annotations

import builtins
import json
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Final

from ..models import Job, JobState
from ..validation import MAX_ERROR_LENGTH

__all__ = ["History", "TaskAttemptFailed", "ERROR_PREFIX", "OUTCOME_MARK", "timestamp"]

ERROR_PREFIX: Final = "TaskAttemptFailed: "
OUTCOME_MARK: Final = "nobroker.django"  # a key only our results have
# Leave room for the prefix and the JSON around the tracebacks.
_TRACEBACK_BUDGET: Final = MAX_ERROR_LENGTH - 600


class TaskAttemptFailed(Exception):
    """Raised by the worker's runner for a failed attempt: its message is the job's
    History as JSON, which the worker stores as the job's `last_error`."""


@dataclass(frozen=True, slots=True)
class History:
    """What the attempts so far left behind (times are seconds since the epoch)."""

    errors: list[dict[str, str]] = field(default_factory=list)
    workers: list[str] = field(default_factory=list)
    started_at: float | None = None
    last_attempted_at: float | None = None

    @classmethod
    def from_job(cls, job: Job) -> History:
        """The history a job holds: in its result once finished, else in last_error."""
        if isinstance(job.result, dict) and job.result.get(OUTCOME_MARK):
            return cls.from_mapping(job.result)
        text = job.last_error
        if text is None:
            return cls()
        if text.startswith(ERROR_PREFIX):
            try:
                return cls.from_mapping(json.loads(text[len(ERROR_PREFIX):]))
            except (ValueError, TypeError):
                pass
        return cls(errors=[foreign_error(text)])

    @classmethod
    def from_mapping(cls, data: dict[str, Any]) -> History:
        errors = [e for e in data.get("errors", []) if isinstance(e, dict)]
        workers = [str(w) for w in data.get("workers", [])]
        return cls(errors, workers, _number(data.get("started_at")),
                   _number(data.get("last_attempted_at")))

    def started(self, worker: str, now: float) -> History:
        """The history once `worker` started an attempt at `now`."""
        return replace(self, workers=[*self.workers, worker],
                       started_at=self.started_at if self.started_at is not None else now,
                       last_attempted_at=now)

    def failed(self, class_path: str, traceback: str) -> History:
        return replace(self, errors=[*self.errors, {"exception_class_path": class_path,
                                                    "traceback": traceback}])

    def as_mapping(self) -> dict[str, Any]:
        return {"errors": self.errors, "workers": self.workers,
                "started_at": self.started_at, "last_attempted_at": self.last_attempted_at}

    def error_text(self) -> str:
        """This history as a `last_error`, within its length limit: the oldest
        tracebacks are shortened first (their last lines are the useful ones)."""
        errors = [dict(e) for e in self.errors]
        budget = _TRACEBACK_BUDGET
        for error in reversed(errors):
            text = error.get("traceback", "")
            keep = max(budget, 0)
            if len(text) > keep:
                error["traceback"] = "..." + text[len(text) - keep:] if keep else ""
            budget -= len(error["traceback"])
        data = {**self.as_mapping(), "errors": errors}
        return ERROR_PREFIX + json.dumps(data, separators=(",", ":"))


def foreign_error(text: str) -> dict[str, str]:
    """A `last_error` the runner did not write ("TimeoutError: exceeded 5 s") as an
    error entry: the exception class it names, if it is a builtin one."""
    name = text.partition(":")[0].strip()
    known = isinstance(getattr(builtins, name, None), type) and issubclass(
        getattr(builtins, name), BaseException)
    return {"exception_class_path": f"builtins.{name if known else 'Exception'}",
            "traceback": text}


def timestamp(seconds: float | None, aware: bool) -> datetime | None:
    """A stored time as Django wants it: aware (UTC) under USE_TZ, else naive local."""
    if seconds is None:
        return None
    return datetime.fromtimestamp(seconds, UTC) if aware else datetime.fromtimestamp(seconds)


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) \
        else None


# A job waiting for prerequisites (depends_on=) has not run yet: Django calls that READY.
STATUS_OF: Final = {JobState.PENDING: "READY", JobState.WAITING: "READY",
                    JobState.LEASED: "RUNNING",
                    JobState.DONE: "SUCCESSFUL", JobState.DEAD: "FAILED",
                    JobState.CANCELLED: "FAILED"}
