"""Prefetch and coalesced acks (`Worker(prefetch=K)`, off by default).

Without it, a slot that finishes a job acks it and leases its next one in one
write (`Queue.ack_and_lease`): a write and an fsync per job. With it:

- the dispatcher keeps up to `concurrency + K` jobs leased: the slots' and
  K more waiting in the inbox, and leases again only once K have room (or
  the inbox is empty), so a lease record carries up to K jobs (under
  weights over n queues, `_ahead` stands for K: n x (concurrency + K) held,
  rounds.py);
- a slot whose job succeeded hands it to the *acker* thread and takes its
  next job from the inbox at once; the acker writes every job handed to it
  meanwhile in one write and one fsync, so while one batch's fsync runs,
  the next batch gathers; once the acks make room for K more jobs (or the
  slots run dry), that write leases them too (`Queue.ack_many_and_lease`;
  over several queues, or with a cap, a round of leases, rounds.py, with
  each queue's acks in its lease's write), so the inbox is refilled
  without a write of its own. A job is acked only after its
  handler returned, as before: a crash before the ack redelivers it;
- prefetched jobs are flights like running ones: heartbeated, counted
  against caps, abandoned at a forced stop. On a graceful stop, those no
  slot has started are given back untried (`Queue.snooze`, no attempt
  counted, their last error kept) before the in-flight ones are drained.

What is not coalesced settles as before, in its slot: a task's result (an
ack with a result is a write of its own), a failure, a snooze.

`ack_delay` (seconds; 0, the default: none): the acker, handed a job, waits
up to that long for more before it writes, while the slots have jobs waiting
(once the inbox runs dry it writes at once: that write leases the next
jobs). Beside one slot that finishes a 2 ms job at a time, the acker
otherwise writes every two or three jobs, and each write is an fsync and a
few GIL hand-offs with the busy slot; 20 ms made the batches about three
times larger and cut the queue's CPU per job by about a fifth (fsync CPU by
half). What it costs: a finished job's ack, and its result, land up to that
much later, and a crash meanwhile runs it again (at-least-once, as before).

`prefetch="auto"` (the default under weights, opt-in otherwise): K follows
the recent job durations, so that the inbox holds about what the slots will
reach within `AUTO_HORIZON` (concurrency x horizon / the mean duration, at
most `AUTO_CAP`): none for long jobs, which another worker could start
sooner, up to the cap for short ones, where the queue's writes are the
limit. It starts at 0 and follows a moving mean of each job's run time
(`_observe`). While K is 0 the slots ack and lease as without prefetch; the
acker is there for when it is not.

Rules: the acker holds no job's lease beyond its ack; a batch whose ack_many
finds one lease gone (NotLeasedError writes nothing, leases nothing) is
acked job by job, so the others still count as succeeded; the acker and
the dispatcher count the leases they are sending (`_sending`), so that
together they never hold more than `concurrency + K` jobs; after a stop
request the acker leases nothing, and what it admitted meanwhile is given
back with the rest.
"""

from __future__ import annotations

from .. import validation
from ..errors import NobrokerError, NotLeasedError
from ..models import Job
from .joblog import log_job
from .rounds import LeaseRounds
from .shared import PASSING, Flight, log

AUTO_HORIZON = 0.1  # seconds of the slots' work that "auto" keeps leased ahead
AUTO_CAP = 16  # the most "auto" prefetches, however short the jobs
_AUTO_WEIGHT = 0.2  # the newest duration's share of the moving mean


def prefetch_option(prefetch: int | str | None, weighted: bool = False) -> tuple[int, bool]:
    """Worker(prefetch=...): (K to start with, whether it is "auto"). None, the default,
    is "auto" under weights, where most picks switch queue and a lease per job would
    cost an ack's write to one queue and a lease's to another; 0 otherwise."""
    if prefetch is None:
        prefetch = "auto" if weighted else 0
    if prefetch == "auto":
        return 0, True
    return validation.integer("prefetch", prefetch, 0), False


def checked_ack_delay(ack_delay: float, prefetch: int, auto: bool,
                      visibility_timeout: float) -> float:
    """Worker(ack_delay=...): seconds, with prefetch, well inside the visibility timeout
    (no heartbeat renews a lease while its ack waits); ValueError if not."""
    seconds = validation.seconds("ack_delay", ack_delay)
    if seconds and not (prefetch or auto):
        raise ValueError("ack_delay batches the acks of prefetch=K; it needs prefetch > 0")
    if seconds > visibility_timeout / 10:
        raise ValueError(f"ack_delay must be at most a tenth of the visibility timeout "
                         f"({visibility_timeout:g} s), not {seconds:g}")
    return seconds


class Prefetching(LeaseRounds):
    """The acker thread and the prefetched jobs' give-back; part of the Worker."""

    _to_ack: list[Flight]  # succeeded, waiting for the acker (_cond)
    _acker_idle: bool  # the acker waits for work (_cond)
    _sending: int  # jobs being leased by the dispatcher or the acker (_cond)
    ack_delay: float  # how long a finished job may wait for others to share its write
    _auto: bool  # prefetch="auto": K follows the job durations (_observe)
    _mean_run: float | None = None  # "auto": moving mean of the run times, s (_cond)

    def _observe(self, seconds: float) -> None:
        """prefetch="auto": a job ran `seconds`; size K to what the slots reach
        within AUTO_HORIZON at the mean duration (under _cond)."""
        mean = self._mean_run
        mean = seconds if mean is None else mean + _AUTO_WEIGHT * (seconds - mean)
        self._mean_run = mean
        reach = self.concurrency * AUTO_HORIZON / max(mean, 1e-6)
        self.prefetch = min(AUTO_CAP, int(reach))

    def _prefetch_text(self, joiner: str) -> str:
        """", prefetch 16", ", prefetch=auto" or "" for the start line and repr."""
        if self._auto:
            return f", prefetch{joiner}auto"
        return f", prefetch{joiner}{self.prefetch}" if self.prefetch else ""

    def _defer_ack(self, flight: Flight) -> None:
        """A slot's job succeeded: the acker acks it with the others (under _cond)."""
        self._to_ack.append(flight)
        if self._acker_idle:
            self._acking.notify()

    def _ack_loop(self) -> None:
        """The acker thread: ack what the slots hand over, a batch per write, until
        the worker closes and nothing is left."""
        while True:
            with self._cond:
                while not self._to_ack and not self._closing:
                    self._acker_idle = True
                    self._acking.wait()
                self._acker_idle = False
                if self.ack_delay:
                    self._gather()
                batch, self._to_ack = self._to_ack, []
                if not batch:
                    return
            by_queue: dict[int, list[Flight]] = {}
            for flight in batch:
                by_queue.setdefault(flight.queue_index, []).append(flight)
            if self._one_queue:
                for index, flights in by_queue.items():
                    self._ack_and_refill(index, flights)
            else:
                self._ack_round(by_queue)

    def _ack_and_refill(self, index: int, flights: list[Flight]) -> None:
        """One queue's acks in one write, leasing the inbox's next jobs in it."""
        with self._cond:
            want = self._room_after(len(flights))
        try:
            counters, leased = self._ack_batch(index, flights, want)
        except BaseException:  # the worker stops (dispatcher._guarded)
            with self._cond:  # the lease it reserved was never sent
                self._sending -= want
                self._reserved -= want
            for flight in flights:
                self._drop(flight)
            raise
        with self._cond:
            admitted = self._admit(leased, index, into_inbox=True)
        self._settled({index: (flights, counters)}, want, admitted)

    def _ack_round(self, by_queue: dict[int, list[Flight]]) -> None:
        """Over several queues: a round of leases (rounds.py) in which each queue whose
        jobs are acked here acks them in its lease's write; the others' acks follow,
        one write per queue."""
        with self._cond:
            want = self._room_after(sum(len(f) for f in by_queue.values()))
        done: dict[int, tuple[list[Flight], list[str]]] = {}
        admitted: list[Flight] = []

        def send(index: int, count: int) -> list[Job]:
            flights = None if index in done else by_queue.get(index)
            if flights is None:  # no acks for it, or acked in an earlier pass
                return self._lease_from(index, count)
            counters, leased = self._ack_batch(index, flights, count)
            done[index] = (flights, counters)
            return leased

        try:
            if want:
                self._lease_round(want, send, admitted,
                                  {index: len(f) for index, f in by_queue.items()})
            for index, flights in by_queue.items():
                if index not in done:
                    done[index] = (flights, self._ack_batch(index, flights, 0)[0])
        except BaseException:  # the worker stops (dispatcher._guarded)
            with self._cond:
                self._sending -= want
                self._reserved -= want - len(admitted)
                self._count_settled(done)  # the queues acked before the failure
            for index, flights in by_queue.items():
                if index not in done:
                    for flight in flights:
                        self._drop(flight)
            raise
        self._settled(done, want, admitted)

    def _settled(self, done: dict[int, tuple[list[Flight], list[str]]], want: int,
                 admitted: list[Flight]) -> None:
        """Count and log the acked jobs; `want` leases were reserved, `admitted` came."""
        now = self._clock()
        with self._cond:
            self._sending -= want
            self._reserved -= want - len(admitted)
            self._count_settled(done)
            self._last_busy = now
            stopping = self._stop_reason is not None
            self._wake_dispatcher()
        for index, (flights, counters) in done.items():
            for flight, counter in zip(flights, counters, strict=True):
                log_job(self.queues[index], flight.job, flight.task, counter,
                        now - flight.began)
        if admitted and stopping:  # a stop came while leasing: these go back too
            self._give_back()

    def _count_settled(self, done: dict[int, tuple[list[Flight], list[str]]]) -> None:
        """Count the acked jobs and let their flights go (under _cond)."""
        for flights, counters in done.values():
            for flight, counter in zip(flights, counters, strict=True):
                if flight.abandoned:  # counted and logged by the shutdown
                    continue
                self._counts[counter] += 1
                self._flights.discard(flight)

    def _gather(self) -> None:
        """`ack_delay`: let more finished jobs join the batch, for at most that long,
        while the slots have work waiting (under _cond)."""
        deadline = self._clock() + self.ack_delay
        while (self._inbox and not self._closing and self._stop_reason is None
               and len(self._to_ack) < self.concurrency + self._ahead):
            left = deadline - self._clock()
            if left <= 0:
                return
            self._acking.wait(left)

    def _wake_dispatcher(self) -> None:
        """After a batch: wake the dispatcher (and the drain) unless all it would do is
        wait again, because the slots still have work and there is no room for K
        more; beside a slot burning CPU, each such wake-up cost a GIL hand-off (the
        dispatcher looks again every TICK anyway; under _cond)."""
        free = self.concurrency + self._ahead - len(self._flights) - self._sending
        if (self._inbox and free < self._ahead and self._flights
                and self._stop_reason is None):
            return
        self._cond.notify_all()

    def _room_after(self, acking: int) -> int:
        """How many jobs the acker leases with an ack of `acking` jobs: the room the
        acks make, up to `concurrency + K` held, and K at a time while the slots have
        work, as the dispatcher leases (reserved here; under _cond)."""
        if self._stop_reason is not None or self._closing:
            return 0
        room = self.concurrency + self._ahead + acking - len(self._flights) - self._sending
        if self._inbox and room < self._ahead:
            return 0  # a small lease in every ack's write costs more than it saves
        want = self._reserve(room) if room > 0 else 0
        self._sending += want
        return want

    def _ack_batch(self, index: int, flights: list[Flight],
                   want: int) -> tuple[list[str], list[Job]]:
        """Ack the jobs of one queue in one write, leasing `want` more in it; each
        one's counter, and the jobs leased."""
        queue = self.queues[index]
        jobs = [f.job for f in flights]
        try:
            if want:
                leased = queue.ack_many_and_lease(jobs, want,
                                                  visibility_timeout=self.visibility_timeout)
            else:
                leased = []
                queue.ack_many(jobs)
            return ["succeeded"] * len(flights), leased
        except NotLeasedError:  # nothing was written: one by one, to find which
            return [self._ack_one(index, f.job) for f in flights], []
        except PASSING as exc:
            return [self._ack_failed(f.job, exc) for f in flights], []
        except NobrokerError as exc:
            self._fail(exc)
            return ["lost"] * len(flights), []

    def _ack_one(self, index: int, job: Job) -> str:
        try:
            self.queues[index].ack(job)
            return "succeeded"
        except NotLeasedError as exc:
            log.warning("job %s (attempt %d): lease lost before it could be acked (%s); "
                        "whoever holds it now will settle it", job.id, job.attempts,
                        exc.reason)
        except PASSING as exc:
            return self._ack_failed(job, exc)
        except NobrokerError as exc:
            self._fail(exc)
        return "lost"

    def _ack_failed(self, job: Job, exc: Exception) -> str:
        log.error("job %s (attempt %d) could not be acked: %s; it will be delivered again "
                  "when its lease runs out", job.id, job.attempts, exc)
        return "lost"

    def _give_back(self) -> None:
        """Graceful stop: the prefetched jobs no slot started go back untried."""
        with self._cond:
            waiting = list(self._inbox)
            self._inbox.clear()
        self._hand_back(waiting)
        if waiting:
            log.info("gave back %d prefetched job(s) untried", len(waiting))

    def _hand_back(self, waiting: list[Flight]) -> None:
        """Give leased jobs no slot started back untried (a snooze: no attempt counted,
        their last error kept), rather than let them wait out the shutdown and then
        their leases."""
        with self._cond:
            waiting = [f for f in waiting if f in self._flights and not f.abandoned]
            for flight in waiting:
                self._flights.discard(flight)
            self._cond.notify_all()
        for flight in waiting:
            job = flight.job
            try:
                self.queues[flight.queue_index].snooze(job, 0.0, error=job.last_error)
            except NobrokerError as exc:  # its lease runs out instead (an attempt counted)
                log.warning("job %s: could not give the leased job back (%s); it will "
                            "be delivered again when its lease runs out", job.id, exc)
