"""One log record per job a worker ran: the `nobroker.jobs` logger.

Each record's message is one line ("job ID succeeded in 12 ms") and its
fields, for a structured formatter (`nobroker work --log-format json`), are
`job_id`, `queue`, `task`, `attempt`, `outcome` and `duration_ms`. The
outcomes: succeeded, retried, dead (dead-lettered), snoozed (given back
untried), cancelled (the job was cancelled while it ran), lost (its lease
was gone, or the worker stopped before it finished: it is delivered again).

The logger does not propagate to `nobroker`: a busy worker would otherwise
print a line per job where it prints one per failure today. Whoever wants
the records attaches a handler to `nobroker.jobs`; with none, nothing is
built at all.
"""

from __future__ import annotations

import logging
from typing import Final

from ..errors import NobrokerError
from ..models import Job, JobState
from ..queue import Queue

__all__ = ["JOB_LOG", "log_job"]

JOB_LOG: Final = logging.getLogger("nobroker.jobs")
JOB_LOG.propagate = False

# The Worker's counters, as outcomes; "lost" may turn out to be "cancelled".
_OUTCOMES: Final = {"succeeded": "succeeded", "retried": "retried", "dead_lettered": "dead",
                    "snoozed": "snoozed", "lost": "lost"}
_LEVELS: Final = {"retried": logging.WARNING, "lost": logging.WARNING,
                  "dead": logging.ERROR}


def log_job(queue: Queue, job: Job, task: str | None, counter: str, seconds: float) -> None:
    """Log one run of `job` that ended as the worker's `counter` says."""
    if not JOB_LOG.hasHandlers():
        return
    outcome = _OUTCOMES.get(counter, "lost")
    if outcome == "lost" and _cancelled(queue, job):
        outcome = "cancelled"
    level = _LEVELS.get(outcome, logging.INFO)
    if not JOB_LOG.isEnabledFor(level):
        return
    duration_ms = round(seconds * 1000.0, 3)
    JOB_LOG.log(level, "job %s %s in %g ms", job.id, outcome, duration_ms,
                extra={"job_id": job.id, "queue": queue.name, "task": task,
                       "attempt": job.attempts, "outcome": outcome,
                       "duration_ms": duration_ms})


def _cancelled(queue: Queue, job: Job) -> bool:
    try:
        return queue.get(job.id).state is JobState.CANCELLED
    except NobrokerError:
        return False
