"""The spans of `nobroker.otel.instrument()` (`pip install "nobroker[otel]"`).

What it does, in every process that calls it (the producers' and the workers'):

- a PRODUCER span, `send QUEUE`, around each `Queue.enqueue` (tasks' `.delay()`
  and `apply_async` go through it). While it is current, the W3C trace context
  (`traceparent`, and `tracestate` when there is one) is written into the job's
  metadata under the key `"otel"`: metadata, never the payload, so the job's
  handler sees the payload it was given. `enqueue_many` writes no context.
- a CONSUMER span, `process QUEUE`, around each run of a task or handler by a
  Worker (a thread, the event loop, an atomic task's transaction; in
  `pool="process"`, where the child has called `instrument()` too). The
  consumer span is a *child* of the producer span (its context is extracted
  from the job's metadata), so one trace shows the enqueue and every attempt
  at the job; a job enqueued without a context starts a trace of its own.
  While it runs, spans the task starts are its children. An exception the
  call raises is recorded on the span and sets its status to ERROR.

Attributes, from the OpenTelemetry messaging conventions: `messaging.system`
("nobroker"), `messaging.destination.name` (the queue), `messaging.operation.type`
and `.name` ("send", "process"), `messaging.message.id` (the job id), and on the
consumer span the attempt, `messaging.nobroker.message.attempt` (a system-specific
attribute, as Pub/Sub's `delivery_attempt`; 1 for the first delivery).

opentelemetry is imported only when `instrument()` is called: importing this
module costs nothing, and the rest of nobroker never imports it.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Iterator
from typing import Any

from ..models import Job
from ..queue import Queue
from ..tasks.running import RunningJob, unwrap_runs, wrap_runs

__all__ = ["instrument", "uninstrument", "CONTEXT_KEY", "SYSTEM"]

CONTEXT_KEY = "otel"  # the job metadata key holding the W3C trace context
SYSTEM = "nobroker"  # messaging.system
_ATTEMPT = "messaging.nobroker.message.attempt"
_lock = threading.Lock()
_installed: dict[str, Any] = {}  # "tracer" and "enqueue" (the original) while instrumented


def instrument(tracer_provider: Any = None) -> None:
    """Trace enqueues and runs in this process (see the module doc); `tracer_provider`:
    the one to use (default: OpenTelemetry's global one). Calling it again changes
    only the provider."""
    from opentelemetry import trace

    with _lock:
        _installed["tracer"] = trace.get_tracer(__name__, tracer_provider=tracer_provider)
        if "enqueue" not in _installed:
            _installed["enqueue"] = original = Queue.enqueue
            Queue.enqueue = _traced_enqueue(original)  # type: ignore[method-assign]
            wrap_runs(_consumer_span)


def uninstrument() -> None:
    """Undo `instrument()`: enqueues and runs are no longer traced."""
    with _lock:
        original = _installed.pop("enqueue", None)
        if original is not None:
            Queue.enqueue = original  # type: ignore[method-assign]
        unwrap_runs(_consumer_span)
        _installed.pop("tracer", None)


def _attributes(operation: str, queue: str | None, job_id: str | None) -> dict[str, Any]:
    found: dict[str, Any] = {"messaging.system": SYSTEM, "messaging.operation.type": operation,
                             "messaging.operation.name": operation}
    if queue is not None:
        found["messaging.destination.name"] = queue
    if job_id is not None:
        found["messaging.message.id"] = job_id
    return found


def _traced_enqueue(original: Any) -> Any:
    @functools.wraps(original)
    def enqueue(self: Queue, payload: Any, **options: Any) -> Job:
        from opentelemetry import propagate, trace

        tracer = _installed.get("tracer")
        if tracer is None:  # uninstrumented meanwhile
            return original(self, payload, **options)  # type: ignore[no-any-return]
        with tracer.start_as_current_span(f"send {self.name}", kind=trace.SpanKind.PRODUCER,
                                          attributes=_attributes("send", self.name, None)) as span:
            carrier: dict[str, str] = {}
            propagate.inject(carrier)
            given = options.get("meta")
            options["meta"] = {**(given or {}), CONTEXT_KEY: carrier} if carrier else given
            job: Job = original(self, payload, **options)
            span.set_attribute("messaging.message.id", job.id)
            return job

    return enqueue


@contextlib.contextmanager
def _consumer_span(job: RunningJob) -> Iterator[None]:
    from opentelemetry import propagate, trace

    tracer = _installed.get("tracer")
    if tracer is None:
        yield
        return
    carrier = job.job.meta.get(CONTEXT_KEY)
    parent = propagate.extract(carrier) if isinstance(carrier, dict) else None
    attributes = _attributes("process", job.queue_name, job.id)
    attributes[_ATTEMPT] = job.attempts
    name = f"process {job.queue_name}" if job.queue_name else "process"
    with tracer.start_as_current_span(name, context=parent, kind=trace.SpanKind.CONSUMER,
                                      attributes=attributes):
        yield
