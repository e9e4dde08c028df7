"""The slot threads: each runs one job at a time and settles it.

A slot takes a leased job from the inbox, works out what it calls (its
*plan*: the handler, or the registered task its payload names), runs it
where the pool says (pool.py: a thread, a child process, the event loop)
under its time limit (and its named lock, for a task with `lock=`), and
settles it: returning acks it, with the task's result; raising nacks it
with "Type: message" (after the delay a `Retry` names, or the queue's
backoff); a `Snooze`, or a lock another run holds, snoozes it (not an
attempt). A slot that finishes a job acks it and leases the next in the
same write (`Queue.ack_and_lease`) for as long as jobs are ready. A job
whose lease a heartbeat found gone, or that the worker abandoned, is never
settled here.
"""

from __future__ import annotations

import inspect
import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import NobrokerError, NotLeasedError, SerializationError, TaskLockedError
from ..models import Job, JobState
from ..queue import Queue
from ..tasks import RunningJob, call_as, step_call
from .atomic import run_atomic
from .children import ChildProcess
from .joblog import log_job
from .pool import Outcome, describe_error, job_to_json, run_in_thread
from .prefetch import Prefetching
from .shared import PASSING, Flight, log


@dataclass(frozen=True, slots=True)
class Plan:
    """What to call for one job, and how (from the handler, or the task it names)."""

    target: Callable[..., Any] | None
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] | None = None
    timeout: float | None = None
    keep: bool = False  # ack the return value as the job's result (tasks only)
    result_ttl: float | None = None
    spec: str = ""  # module:qualname, for a child process
    refused: str | None = None  # the job cannot run here: this is its last_error
    lock: str | None = None  # the named lock each run holds (a task's lock=)
    name: str | None = None  # the task's name, or the handler's (for the job log)
    atomic: bool = False  # run and ack in one transaction (atomic.py)


class Slots(Prefetching):
    """The slot threads' part of the Worker (a slot leases its next job: Leasing;
    with prefetch, hands its succeeded job to the acker: Prefetching, a Leasing)."""

    def _slot_loop(self, number: int) -> None:
        child = self._children[number] if self._children else None
        if child is not None:
            try:
                child.start()  # now, so the first job does not wait for the interpreter
            except OSError as exc:
                log.error("could not start a child process: %s; trying again per job", exc)
        while True:
            with self._cond:
                while not self._inbox and not self._closing:
                    self._arrivals.wait()
                if not self._inbox:
                    return
                flight: Flight | None = self._inbox.popleft()
                if self.prefetch and not self._inbox:
                    self._cond.notify_all()  # the dispatcher: time to prefetch again
                    if self.ack_delay:
                        self._acking.notify()  # a gathering acker: write now, it leases
            while flight is not None:
                current = flight
                found: list[Flight] = []  # the next job, if the ack leased one
                try:
                    flight = self._work_on(current, child, found)
                except BaseException:  # a bug, or a backend raising what it should not
                    self._drop(current)
                    try:  # what no slot will start now goes back at once, untried
                        self._hand_back(found + self._orphans())
                    except Exception:  # the first failure stops the worker; these come
                        log.exception("could not give jobs back")  # back after their leases
                    raise  # the worker stops (dispatcher._guarded)

    def _orphans(self) -> list[Flight]:
        """A slot that raised: stop the worker; if it was the last slot alive, the jobs
        waiting in the inbox, which no slot will start now."""
        with self._cond:
            self._request_stop("error", deadline=True)
            self._live_slots -= 1
            if self._live_slots:
                return []
            orphans = list(self._inbox)
            self._inbox.clear()
            return orphans

    def _work_on(self, flight: Flight, child: ChildProcess | None,
                 found: list[Flight]) -> Flight | None:
        """Run the handler on one job and settle it; returns the next job, if its ack
        leased one (also in `found`, until this slot starts it)."""
        job = flight.job
        queue = self.queues[flight.queue_index]
        plan = self._plan(job, flight.queue_index)
        began = self._clock()
        with self._cond:
            flight.child, flight.began, flight.task = child, began, plan.name
        if queue.hooks is not None:
            queue.hooks.fire("started", job)
        outcome = self._run(job, queue, plan, child)
        error = outcome.error_text
        chain = False
        with self._cond:
            self._counts["timed_out"] += outcome.timed_out
            self._counts["crashed"] += outcome.crashed and not flight.lost
            if self._auto:
                self._observe(self._clock() - began)
            if flight.abandoned:
                gave_up = True
            else:
                gave_up = False
                flight.settling = True
                if self.prefetch:
                    if error is None and not flight.lost and not plan.keep \
                            and outcome.settled is None:
                        self._defer_ack(flight)  # acked in a batch by the acker
                        return None
                else:
                    chain = (error is None and not flight.lost and self._stop_reason is None
                             and self._reserve(1) == 1)
        if gave_up:
            log.info("job %s finished after the worker stopped; not acked", job.id)
            return None  # logged as lost when it was abandoned
        counter = "lost" if flight.lost else self._settle(flight, outcome, plan, chain, found)
        log_job(queue, job, plan.name, counter, self._clock() - began)
        with self._cond:
            if chain and not found:
                self._reserved -= 1
            self._counts[counter] += 1
            self._flights.discard(flight)
            nxt = found[0] if found else None
            self._last_busy = self._clock()
            # A slot that chained into its next job changed nothing the others wait
            # for (the dispatcher for a free slot, the drain for no flights; the
            # heartbeat looks again on its own, see Heartbeats). Waking them all for
            # every job cost two thread switches per job.
            if nxt is None:
                self._cond.notify_all()
        return nxt

    def run_here(self, job: Job) -> str:
        """Run one job leased from this worker's first queue in the calling thread and
        settle it, as a slot would, with no thread started (nobroker.testing's eager
        mode and drain): returns how it ended, "succeeded", "retried",
        "dead_lettered", "snoozed" or "lost". Raises the queue's error if the queue
        became unusable."""
        queue = self.queues[0]
        flight = Flight(job, renew_at=self._clock(), settling=True)
        plan = self._plan(job, 0)
        began = self._clock()
        if queue.hooks is not None:
            queue.hooks.fire("started", job)
        outcome = self._run(job, queue, plan, None)
        counter = self._settle(flight, outcome, plan, False, [])
        log_job(queue, job, plan.name, counter, self._clock() - began)
        with self._cond:
            self._counts["timed_out"] += outcome.timed_out
            self._counts[counter] += 1
            fatal = self._fatal
        if fatal is not None:
            raise fatal
        return counter

    def end_here(self) -> None:
        """End what run_here started: the event loop of async tasks, if one ran."""
        self._loop.close()

    def _settle(self, flight: Flight, outcome: Outcome, plan: Plan, chain: bool,
                found: list[Flight]) -> str:
        """Ack (and, with `chain`, lease the next job into `found`), nack or snooze;
        returns the outcome's counter."""
        job = flight.job
        queue = self.queues[flight.queue_index]
        text = outcome.error_text
        verb = "acked" if text is None else "nacked"
        if outcome.settled is not None:  # an atomic task's run acked it, or lost it
            if outcome.settled == "succeeded" and queue.hooks is not None:
                queue.hooks.fire("succeeded", job)
            return outcome.settled
        try:
            if text is None:
                options = self._ack_options(plan, outcome.result)
                try:
                    if chain:
                        self._lease_after(flight, lambda: queue.ack(job, **options),
                                          lambda: queue.ack_and_lease(
                                              job, visibility_timeout=self.visibility_timeout,
                                              **options), found)
                    else:
                        queue.ack(job, **options)
                    return "succeeded"
                except SerializationError as exc:  # the result is not JSON: the task failed
                    text = describe_error(exc)
                    verb = "nacked"
            if outcome.snooze_delay is not None:  # not an attempt (a held lock, Snooze)
                verb = "snoozed"
                queue.snooze(job, outcome.snooze_delay, error=text)
                log.debug("job %s snoozed for %.3gs, not counted as an attempt: %s", job.id,
                          outcome.snooze_delay, (text or "").replace("\n", "\\n"))
                return "snoozed"
            # The queue's time before the nack: the delay logged is the backoff, not
            # what is left of it.
            nacked_at = getattr(queue, "clock", time.time)()
            after = queue.nack(job, error=text, delay=outcome.retry_delay)
        except NotLeasedError as exc:
            log.warning("job %s (attempt %d): lease lost before it could be %s (%s); "
                        "whoever holds it now will settle it", job.id, job.attempts, verb,
                        exc.reason)
            return "lost"
        except PASSING as exc:
            log.error("job %s (attempt %d) could not be %s: %s; it will be delivered again "
                      "when its lease runs out", job.id, job.attempts, verb, exc)
            return "lost"
        except NobrokerError as exc:
            self._fail(exc)
            return "lost"
        one_line = (text or "").replace("\n", "\\n")
        if after.state is JobState.DEAD:
            log.error("job %s failed on attempt %d of %d: %s; moved to the dead-letter queue",
                      job.id, job.attempts, job.max_attempts, one_line)
            outcome_name = "dead_lettered"
        else:
            log.warning("job %s failed on attempt %d of %d: %s; retrying in %.3gs", job.id,
                        job.attempts, job.max_attempts, one_line,
                        max(0.0, after.available_at - nacked_at))
            outcome_name = "retried"
        if log.isEnabledFor(logging.DEBUG) and outcome.error_text is not None:
            log.debug("job %s traceback:\n%s", job.id, outcome.traceback())
        return outcome_name

    def _ack_options(self, plan: Plan, result: Any) -> dict[str, Any]:
        """The result (and its retention) to ack a task's job with."""
        if not plan.keep:  # a plain handler's return value is not stored
            return {}
        options: dict[str, Any] = {"result": result}
        if plan.result_ttl is not None:
            options["result_ttl"] = plan.result_ttl
        return options

    # -- running one call ---------------------------------------------------

    def _plan(self, job: Job, queue_index: int) -> Plan:
        """What this job calls: the handler, or the registered task its payload names."""
        tasks = self._registries[queue_index]
        if tasks is None:
            return Plan(self.handler, (job,), None, self.timeout, spec=self._handler_spec,
                        name=getattr(self.handler, "__qualname__", None))
        try:  # a workflow step's inputs (its parents' results) are read here
            call = step_call(self.queues[queue_index], job)
        except ValueError as exc:
            return Plan(None, refused=str(exc))
        task = tasks.get(call.name)
        if task is None:
            return Plan(None, refused=f"unknown task {call.name!r}", name=call.name)
        timeout = task.timeout if task.timeout is not None else self.timeout
        return Plan(task.fn, tuple(call.args), call.kwargs, timeout, keep=True,
                    result_ttl=task.result_ttl, spec=task.spec, lock=task.lock,
                    name=call.name, atomic=task.atomic)

    def _run(self, job: Job, queue: Queue, plan: Plan, child: ChildProcess | None) -> Outcome:
        """_execute, with `current_job()` the job's RunningJob, whose last progress
        report is written before the job is settled."""
        running = RunningJob(job, queue.backend)
        try:
            return self._execute(running, queue, plan, child)
        except Exception as exc:  # a bug of ours: fail the job, keep the slot alive
            log.exception("job %s: running it failed inside the worker", job.id)
            return Outcome.failed(exc)
        finally:
            running.flush()

    def _execute(self, job: RunningJob, queue: Queue, plan: Plan,
                 child: ChildProcess | None) -> Outcome:
        """Run the plan's call where the pool says, under its time limit and its named
        lock (a run that finds the lock held fails with TaskLockedError)."""
        if plan.refused is not None or plan.target is None:
            return Outcome(error_text=plan.refused)
        if plan.lock is None:
            return self._call(job, queue, plan, child, None)
        try:
            release = queue.backend.try_lock(plan.lock)
        except NobrokerError as exc:  # could not ask (a broken connection)
            return Outcome.failed(exc)
        if release is None:  # not an attempt: look again after the backoff's first step
            return Outcome(error_text=describe_error(TaskLockedError(plan.lock)),
                           snooze_delay=queue.backoff.delay(1))
        return self._call(job, queue, plan, child, release)

    def _call(self, job: RunningJob, queue: Queue, plan: Plan, child: ChildProcess | None,
              release: Callable[[], None] | None) -> Outcome:
        """Make the call. `release` (of the run's lock) is called once the call really
        ended: here, or by a thread or coroutine that runs on past its time limit."""
        keeper = release  # who calls it: this thread, unless handed over
        try:
            if plan.atomic and plan.target is not None:  # here, in one transaction
                return run_atomic(queue, job, plan.target, plan.args, plan.kwargs or {},
                                  plan.result_ttl)
            if child is not None:  # a child over its limit is dead when call() returns
                handler = self.handler is not None
                request: dict[str, Any] = {"spec": plan.spec, "keep": plan.keep,
                                           "job": job_to_json(job.job), "handler": handler,
                                           "args": [] if handler else plan.args,
                                           "kwargs": plan.kwargs or {}, "queue": queue.name}
                return child.call(request, plan.timeout, lambda progress, meta:
                                  queue.backend.write_notes(job.job, progress, meta))
            target, args, kwargs = plan.target, plan.args, plan.kwargs or {}
            assert target is not None  # _execute returned for a refused plan
            if plan.timeout is not None and not inspect.iscoroutinefunction(target):
                keeper = None  # the thread, detached at the limit, lets go when it ends
                outcome = run_in_thread(lambda: call_as(job, target, args, kwargs),
                                        plan.timeout, f"nobroker-call-{job.id}", after=release)
            else:
                try:
                    outcome = Outcome(result=call_as(job, target, args, kwargs))
                except BaseException as exc:  # whatever a handler raises is its job's failure
                    return Outcome.failed(exc)
            if (outcome.error_text is None and outcome.result is not None
                    and inspect.isawaitable(outcome.result)):
                # call_as made it a coroutine; cancelled at its limit, it may run on a
                # while, so it lets go when it ends
                after, keeper = keeper, None
                return self._loop.run(outcome.result, plan.timeout, after=after)
            return outcome
        finally:
            if keeper is not None:
                keeper()

    def _child_modules(self) -> tuple[str, ...]:
        """The modules a child process imports up front (pool="process")."""
        if self.handler is None:
            specs = [spec_of(task.fn, task.spec) for tasks in self._registries
                     if tasks is not None for task in tasks]
        else:
            specs = [self._handler_spec]
        return tuple(dict.fromkeys(spec.partition(":")[0] for spec in specs))


def spec_of(fn: Callable[..., Any], spec: str | None = None) -> str:
    """How a child process imports `fn`: "module:qualname"; ValueError if it cannot."""
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
    if spec is None:
        spec = f"{module}:{qualname}"
    if not isinstance(module, str) or not isinstance(qualname, str) or "<" in qualname:
        raise ValueError(f"pool='process' imports each handler by name in the child, and "
                         f"{fn!r} cannot be imported (define it at module level)")
    main = sys.modules.get("__main__")
    if module == "__main__" and not getattr(main, "__file__", None):
        raise ValueError(f"pool='process' cannot import {qualname!r} from an interactive "
                         f"__main__; define it in a module")
    return spec

