"""Replays emit no live-looking spans: ``tracing.suppressed()`` turns every span helper off.

Run in a child process: it installs a real SDK tracer provider (with an in-memory exporter), which
is process-global."""

from __future__ import annotations

import subprocess
import sys

from tests.paths import ROOT

SCRIPT = """
import asyncio
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from infra import tracing

exporter = InMemorySpanExporter()
provider = tracing.setup_tracing("replayer", exporter=exporter)

async def work(tag):
    with tracing.span(f"saga {tag}") as s:
        with tracing.producer_span(f"append {tag}", {}) as tp:
            with tracing.consumer_span(f"handle {tag}", None, tp, {"messaging.destination.name": "x"}):
                return s is not None, bool(tp), tracing.current_traceparent() != ""

live = asyncio.run(work("live"))
with tracing.suppressed():
    quiet = asyncio.run(work("replayed"))
    inner = tracing.enabled()
after = tracing.enabled()
provider.force_flush()
names = sorted(s.name for s in exporter.get_finished_spans())
consumer = [s for s in exporter.get_finished_spans() if s.name == "handle live"][0]
print(live, quiet, inner, after, names, consumer.attributes["messaging.system"],
      consumer.attributes["messaging.operation"])
"""


def test_suppressed_blocks_emit_no_spans_and_no_traceparents() -> None:
    r = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == (
        "(True, True, True) (False, False, False) False True "
        "['append live', 'handle live', 'saga live'] nats process"
    )
