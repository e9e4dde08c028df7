"""nobroker.otel.instrument(): a producer span at enqueue, a consumer span around each run,
linked by the W3C trace context kept in the job's metadata; read back with the SDK's
in-memory exporter. Needs opentelemetry-sdk (requirements-otel.txt): `python make.py
test-otel` installs it into .dev/otel-venv and runs this module; without it the module
is skipped, and tests/run.py says so loudly.
"""

from __future__ import annotations

import asyncio
import importlib.util
import tempfile
import unittest
from typing import Any

from harness.support import TempDirTestCase

from nobroker import JobState, Queue, Retry, Worker
from nobroker.tasks import current_job

HAVE_SDK = (importlib.util.find_spec("opentelemetry") is not None
            and importlib.util.find_spec("opentelemetry.sdk") is not None)
SKIP_REASON = ("OpenTelemetry suite skipped: opentelemetry-sdk is not installed "
               "(run `python make.py test-otel`)")


@unittest.skipUnless(HAVE_SDK, SKIP_REASON)
class TracingContract:
    """The spans on one backend; a TestCase supplies location()."""

    def location(self) -> str:
        raise NotImplementedError

    def setUp(self) -> None:
        super().setUp()  # type: ignore[misc]
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
            InMemorySpanExporter,
        )

        import nobroker.otel

        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        nobroker.otel.instrument(tracer_provider=self.provider)
        self.addCleanup(nobroker.otel.uninstrument)  # type: ignore[attr-defined]
        self.q = Queue(self.location(), backoff=None)
        self.addCleanup(self.q.close)  # type: ignore[attr-defined]

    def spans(self, kind: str) -> list[Any]:
        from opentelemetry.trace import SpanKind
        wanted = {"producer": SpanKind.PRODUCER, "consumer": SpanKind.CONSUMER,
                  "internal": SpanKind.INTERNAL}[kind]
        return [s for s in self.exporter.get_finished_spans() if s.kind == wanted]

    def run_worker(self, jobs: int) -> None:
        Worker(self.q, max_jobs=jobs, handle_signals=False, idle_timeout=30).run()

    def test_the_consumer_span_is_a_child_of_the_producer_span(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]

        @self.q.task(name="resize")
        def resize(width: int) -> int:
            from opentelemetry import trace
            with trace.get_tracer("app", tracer_provider=self.provider).start_as_current_span(
                    "inside the task"):
                pass
            return width

        result = resize.delay(640)
        job = self.q.get(result.id)
        t.assertEqual(job.payload, {"task": "resize", "args": [640], "kwargs": {}},
                      "the payload is the caller's: the context is in the metadata")
        t.assertTrue(job.meta["otel"]["traceparent"].startswith("00-"))
        self.run_worker(1)
        (producer,) = self.spans("producer")
        (consumer,) = self.spans("consumer")
        (inner,) = self.spans("internal")
        t.assertEqual(producer.name, f"send {self.q.name}")
        t.assertEqual(consumer.name, f"process {self.q.name}")
        t.assertEqual(consumer.context.trace_id, producer.context.trace_id)
        t.assertEqual(consumer.parent.span_id, producer.context.span_id, "a child, not a link")
        t.assertEqual(inner.parent.span_id, consumer.context.span_id, "the task's spans nest")
        t.assertEqual(job.meta["otel"]["traceparent"].split("-")[2],
                      format(producer.context.span_id, "016x"))
        for span, operation in ((producer, "send"), (consumer, "process")):
            expected = {"messaging.system": "nobroker",
                        "messaging.destination.name": self.q.name,
                        "messaging.operation.type": operation,
                        "messaging.operation.name": operation, "messaging.message.id": result.id}
            t.assertEqual({key: span.attributes.get(key) for key in expected}, expected)
        t.assertEqual(consumer.attributes["messaging.nobroker.message.attempt"], 1)
        t.assertNotIn("messaging.nobroker.message.attempt", producer.attributes)

    def test_each_attempt_is_a_consumer_span_and_a_failure_sets_error(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        from opentelemetry.trace import StatusCode

        @self.q.task(name="flaky")
        def flaky() -> str:
            job = current_job()
            assert job is not None
            if job.attempts == 1:
                raise Retry("not yet", delay=0)
            return "ok"

        result = flaky.delay()
        self.run_worker(2)
        t.assertEqual(self.q.get(result.id).state, JobState.DONE)
        (producer,) = self.spans("producer")
        first, second = sorted(self.spans("consumer"),
                               key=lambda s: s.attributes["messaging.nobroker.message.attempt"])
        t.assertEqual([first.attributes["messaging.nobroker.message.attempt"],
                       second.attributes["messaging.nobroker.message.attempt"]], [1, 2])
        t.assertEqual({first.parent.span_id, second.parent.span_id},
                      {producer.context.span_id})
        t.assertEqual(first.status.status_code, StatusCode.ERROR)
        t.assertEqual([e.name for e in first.events], ["exception"])
        t.assertNotEqual(second.status.status_code, StatusCode.ERROR)

    def test_a_coroutine_runs_inside_its_consumer_span(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]

        @self.q.task(name="fetch")
        async def fetch() -> None:
            from opentelemetry import trace
            await asyncio.sleep(0)
            with trace.get_tracer("app", tracer_provider=self.provider).start_as_current_span(
                    "awaited"):
                await asyncio.sleep(0)

        fetch.delay()
        self.run_worker(1)
        (consumer,) = self.spans("consumer")
        (inner,) = self.spans("internal")
        t.assertEqual(inner.parent.span_id, consumer.context.span_id)
        t.assertGreaterEqual(consumer.end_time, inner.end_time, "the span covers the await")

    def test_the_callers_metadata_is_kept_beside_the_context(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        job = self.q.enqueue({"n": 1}, meta={"tenant": "acme"})
        t.assertEqual(set(job.meta), {"tenant", "otel"})
        t.assertEqual(self.q.get(job.id).meta["tenant"], "acme")

    def test_uninstrument_stops_tracing(self) -> None:
        t: unittest.TestCase = self  # type: ignore[assignment]
        import nobroker.otel

        nobroker.otel.uninstrument()
        job = self.q.enqueue({"n": 1})
        t.assertEqual(job.meta, {})
        self.q.ack(self.q.lease_one())  # type: ignore[arg-type]
        t.assertEqual(self.exporter.get_finished_spans(), ())


class FileTracingTest(TracingContract, TempDirTestCase):
    def location(self) -> str:
        return str(self.tmp / "q")


class MemoryTracingTest(TracingContract, unittest.TestCase):
    def location(self) -> str:
        return f"memory://{self.id()}"


class NotInstrumentedTest(unittest.TestCase):
    def test_nobroker_never_imports_opentelemetry_until_instrument_is_called(self) -> None:
        import subprocess
        import sys

        from harness.support import SRC
        code = ("import sys, nobroker, nobroker.worker, nobroker.tasks, nobroker.otel\n"
                "q = nobroker.Queue(sys.argv[1]); q.enqueue(1)\n"
                "assert not any(m.startswith('opentelemetry') for m in sys.modules)\n")
        with tempfile.TemporaryDirectory() as where:
            done = subprocess.run([sys.executable, "-c", code, where], capture_output=True,
                                  text=True, env={"PYTHONPATH": str(SRC)}, timeout=60)
        self.assertEqual(done.returncode, 0, done.stderr)


if __name__ == "__main__":
    unittest.main()
