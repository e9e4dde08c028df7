"""OpenTelemetry tracing for nobroker: `nobroker.otel.instrument()`.

Install the API with `pip install "nobroker[otel]"` (and an SDK and exporter of
your choice). Only this package imports opentelemetry, and only when
`instrument()` is called; the rest of nobroker never imports this package.
How the spans are made, linked and named: spans.py, and docs/FLOW.md.
"""

from __future__ import annotations

from .spans import CONTEXT_KEY, SYSTEM, instrument, uninstrument

__all__ = ["instrument", "uninstrument", "CONTEXT_KEY", "SYSTEM"]
