"""The Worker: runs a handler over a queue's jobs until it is told to stop.

One queue, or several (`Worker([high, default, low])`: by priority, or by
weights, with per-queue caps; see leasing.py and picking.py).

What it owns: the loop that leases jobs, calls `handler(job)` and settles
each job -- returning acks it; raising nacks it with "Type: message" as its
`last_error`, so the queue retries it after its backoff or dead-letters it
after `max_attempts` -- and the two duties that make that loop safe to leave
running: lease heartbeats and a graceful shutdown.

Threads, and who does what:
- the *dispatcher* is the thread that called `run()`. It leases jobs when a
  slot is free, idles in `_wait_for_work` (the only place the worker waits
  for work) when none is ready, and decides when to stop;
- `concurrency` *slot* threads call the handler. A slot that finishes a job
  acks it and leases the next one in the same write (`Queue.ack_and_lease`:
  one fsync per job) for as long as jobs are ready; with `prefetch=K`, K
  more jobs wait leased in the inbox, and an *acker* thread acks the
  slots' finished jobs in batches (prefetch.py);
- one *heartbeat* thread extends every in-flight lease each third of the
  visibility timeout, so a slow but healthy handler is never delivered
  twice: two heartbeats in a row can fail before a lease runs out. A
  heartbeat that finds its lease gone (fenced: it expired and the job went
  to someone else) stops treating the job as its own: it is logged and the
  handler's outcome is never acked or nacked.

Handlers run in threads, which suits I/O-bound work. CPU-bound work wants
processes: `pool="process"` runs each slot's calls in a child process of its
own (children.py), or run several `nobroker work` processes on one queue; the
queue's file lock makes that safe. `async def` handlers and tasks run on
one event loop per Worker, the slot thread waiting on each coroutine, so at
most `concurrency` run at once.

Without a handler, `Worker(q)` runs the tasks registered on `q`
(nobroker.tasks): each job's payload names its task; a task's return value
is acked as the job's result; a payload naming a task this worker does not
know is nacked with "unknown task 'NAME'" like any failure (retried after
its backoff, so a newer worker of a rolling deploy may still take it, and
dead-lettered after `max_attempts`). Periodic tasks get a *scheduler*
thread that enqueues their ticks (tasks/scheduler.py).

Time limits (`timeout=` on a task or the Worker): a call over its limit is
nacked with "TimeoutError: exceeded N s". In a child process it is killed;
a coroutine is cancelled; a thread cannot be killed, so it is abandoned and
runs on detached. A child that dies nacks its job naming the signal, and
the next call gets a fresh child.

A paused queue (`Queue.pause()`) leases nothing: the dispatcher waits on
the wake-up channel, which a resume pokes, and looks at least every
`poll_interval`.

Stopping, in this order: stop leasing; let in-flight handlers finish and be
settled, for at most `shutdown_timeout` seconds after the stop request; stop
heartbeats last. `max_jobs` and `idle_timeout` stop the same way. Python
cannot kill a thread, so a handler still running at the deadline is
*abandoned*: its heartbeats stop, this worker never settles it, and its job
is delivered again (counting an attempt) once its lease runs out. Slot
threads are daemons, so an abandoned handler does not keep the process
alive. A second SIGINT/SIGTERM skips the wait entirely; the in-flight jobs
come back the same way. A thread of the worker's own that raises (a bug, or
a backend raising what it should not) stops it the same way, loudly: the
traceback is logged, `run()` raises WorkerCrashedError, and the job that
thread held comes back when its lease runs out.

Rules: signal handlers only set flags and wake the dispatcher; no queue call
is ever made while holding the worker's condition; the library prints
nothing -- it logs to the `nobroker` logger, one line per failed job.

The package, a module per duty, each a part of the one `Worker` class:

    dispatcher.py  Worker: its options, run(), stop(), stats; the dispatcher
                   loop, the drain and the stop order
    slots.py       the slot threads: what a job calls (its plan), running it
                   (pool.py), settling it: ack with its result, or nack
    children.py    pool="process": a child process per slot, and its loop
    leasing.py     every lease, from one queue or several, and the idle wait
    prefetch.py    prefetch=K: the acker thread (acks in batches), and giving
                   the prefetched jobs back on a graceful stop
    rounds.py      prefetch over several queues: rounds of leases, a write
                   per queue asked, in the picking order
    picking.py     which of several queues next: priority, weights, caps
    waiting.py     an idle wait over several queues' wake-up channels
    joblog.py      the `nobroker.jobs` logger: one record per job run
    heartbeat.py   the heartbeat thread: lease extension, fencing, killing a
                   child whose lease is gone
    signals.py     SIGINT/SIGTERM: flags only
    shared.py      what the threads share under one condition, WorkerStats
"""

from __future__ import annotations

from .dispatcher import DEFAULT_SHUTDOWN_TIMEOUT, POOLS, Worker
from .pool import describe_error
from .shared import Handler, WorkerStats

__all__ = ["Worker", "WorkerStats", "Handler", "DEFAULT_SHUTDOWN_TIMEOUT", "POOLS",
           "describe_error"]
