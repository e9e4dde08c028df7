"""An `atomic=True` task's run: its call and its ack in one database transaction.

The backend opens the transaction (backend.Transactions.atomic, PostgreSQL),
or the application does, where it gave the queue an opener
(transactions.atomic_in: nobroker_work gives Django's `transaction.atomic()`);
the task runs in it, in the slot's own thread (whatever the pool: the
connection cannot cross to a child process or another thread), with
`current_job().connection` the connection it is on; the ack is written in
it and the commit makes both durable, or neither. So a worker killed before
the commit leaves the task's writes undone and the job leased (delivered
again when its lease runs out, to run again from scratch), and killed after
it leaves both done. A raising task's writes are rolled back and the job is
nacked as any other's. A fenced ack (the lease was lost: expired and taken
by another, or cancelled) rolls the task's writes back: NotLeasedError, and
the job counts as lost. The task's time limit is not enforced here: a
transaction cannot be left to a thread abandoned at its limit (a statement
timeout on the connection bounds its queries, if the task wants one).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..codec import encode_payload
from ..errors import NobrokerError, NotLeasedError
from ..queue import Queue
from ..tasks import RunningJob, call_as
from ..transactions import opener_of, transactional, with_connection
from .pool import Outcome
from .shared import PASSING, log

__all__ = ["run_atomic"]


class _RolledBack(Exception):
    """The task failed: leave the transaction, rolling its writes back."""


def run_atomic(queue: Queue, running: RunningJob, target: Callable[..., Any],
               args: tuple[Any, ...], kwargs: dict[str, Any],
               result_ttl: float | None) -> Outcome:
    """Run the call and write its ack in one transaction; an Outcome that is `settled`
    ("succeeded", "lost") unless the call failed (then the caller nacks it)."""
    backend = transactional(queue.backend, "atomic=True")
    job = running.job
    opener = opener_of(queue)  # the application's transaction (Django's), if it gave one
    failed = Outcome()
    try:
        with (opener() if opener is not None else backend.atomic()) as connection:
            try:
                result = call_as(running.around(with_connection(job, connection)), target,
                                 args, kwargs)
                text = encode_payload(result, "result")
            except BaseException as exc:  # whatever a task raises is its job's failure
                failed = Outcome.failed(exc)
                raise _RolledBack from None
            running.flush()  # its last progress report, before the ack ends its lease
            backend.ack_in(connection, job, text, result_ttl, joined=opener is not None)
    except _RolledBack:
        return failed
    except NotLeasedError as exc:
        log.warning("job %s (attempt %d): lease lost before its atomic ack (%s); its "
                    "writes were rolled back", job.id, job.attempts, exc.reason)
        return Outcome(settled="lost")
    except (*PASSING, NobrokerError) as exc:  # the commit's outcome is the database's
        log.error("job %s (attempt %d): its atomic transaction failed: %s; if it did not "
                  "commit, it will be delivered again when its lease runs out", job.id,
                  job.attempts, exc)
        return Outcome(settled="lost")
    return Outcome(result=result, settled="succeeded")
