"""OpenTelemetry tracing: producer spans per append, consumer spans per handled event.

Tracing is on when ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``..._TRACES_ENDPOINT``) is set, exporting
over OTLP/HTTP with a batch processor; otherwise nothing is set up and the hot paths skip span work
entirely. The W3C ``traceparent`` travels in the NATS headers (lower-case, as written by the W3C
propagator) and in the envelope; it is read back case-insensitively, from the headers first and the
envelope second, so a parent span in one service has its child in the next across the NATS hop.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace import Span, SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

__all__ = [
    "SpanKind",
    "consumer_span",
    "current_traceparent",
    "enabled",
    "extract",
    "inject_headers",
    "producer_span",
    "server_span",
    "setup_tracing",
    "shutdown_tracing",
    "span",
    "suppressed",
    "within",
]

_propagator = TraceContextTextMapPropagator()
_provider: TracerProvider | None = None
_tracer: trace.Tracer = trace.get_tracer("draflow")


# True inside ``suppressed()``: replays, imports and verify-replay re-run code paths that would
# otherwise emit live-looking spans for events that happened long ago
_suppress: ContextVar[bool] = ContextVar("draflow_tracing_suppressed", default=False)


def enabled() -> bool:
    return _provider is not None and not _suppress.get()


@contextmanager
def suppressed() -> Iterator[None]:
    """No span is started (and no traceparent injected) inside this block, in this context."""
    token = _suppress.set(True)
    try:
        yield
    finally:
        _suppress.reset(token)


def setup_tracing(service_name: str, exporter: SpanExporter | None = None) -> TracerProvider | None:
    """Install an SDK tracer provider for this process if an OTLP endpoint (or ``exporter``) is given."""
    global _provider, _tracer
    endpoint = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    if exporter is None and not endpoint:
        return None
    if _provider is None:
        _provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
        trace.set_tracer_provider(_provider)
        _tracer = _provider.get_tracer("draflow")
    if exporter is None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter()
    # batch export (OTEL_BSP_* variables tune it); shutdown_tracing() flushes what is pending
    _provider.add_span_processor(BatchSpanProcessor(exporter))
    return _provider


def shutdown_tracing(timeout_ms: int = 3000) -> None:
    """Flush pending spans (called on SIGTERM: honcho kills after 5 s, so stay well below)."""
    if _provider is not None:
        _provider.force_flush(timeout_ms)


def current_traceparent() -> str:
    if not enabled():
        return ""
    carrier: dict[str, str] = {}
    _propagator.inject(carrier)
    return carrier.get("traceparent", "")


def inject_headers() -> dict[str, str] | None:
    """NATS headers carrying the current span to a request's handler (None when off or no span)."""
    tp = current_traceparent()
    return {"traceparent": tp} if tp else None


class _LowerGetter:
    def get(self, carrier: Mapping[str, str], key: str) -> list[str] | None:
        value = carrier.get(key.lower())
        return [value] if value is not None else None

    def keys(self, carrier: Mapping[str, str]) -> list[str]:
        return list(carrier)


_getter = _LowerGetter()


def extract(headers: Mapping[str, str] | None, traceparent: str = "") -> otel_context.Context:
    """The remote parent context from headers (any case) or, failing that, an envelope field."""
    carrier: dict[str, str] = {}
    if headers:
        for k, v in headers.items():
            lk = k.lower()
            if lk in ("traceparent", "tracestate"):
                carrier[lk] = v
    if "traceparent" not in carrier and traceparent:
        carrier["traceparent"] = traceparent
    return _propagator.extract(carrier, getter=_getter)  # type: ignore[arg-type]


@contextmanager
def producer_span(name: str, attributes: dict[str, Any]) -> Iterator[str]:
    """A PRODUCER span around an append; yields the traceparent to inject (empty when off)."""
    if not enabled():
        yield ""
        return
    with _tracer.start_as_current_span(name, kind=SpanKind.PRODUCER, attributes=attributes):
        yield current_traceparent()


# OpenTelemetry messaging conventions for every consumer span (callers add the destination)
_CONSUMER_DEFAULTS: dict[str, Any] = {
    "messaging.system": "nats",
    "messaging.operation": "process",
    "messaging.operation.type": "process",
    "messaging.operation.name": "process",
}


@contextmanager
def consumer_span(
    name: str, headers: Mapping[str, str] | None, traceparent: str, attributes: dict[str, Any]
) -> Iterator[Span | None]:
    """A CONSUMER span whose parent is the producer's span, carried in the message."""
    if not enabled():
        yield None
        return
    ctx = extract(headers, traceparent)
    attrs = {**_CONSUMER_DEFAULTS, **attributes}
    with _tracer.start_as_current_span(name, context=ctx, kind=SpanKind.CONSUMER, attributes=attrs) as s:
        yield s


@contextmanager
def server_span(
    name: str, headers: Mapping[str, str] | None, attributes: dict[str, Any]
) -> Iterator[Span | None]:
    """A SERVER span for one API request whose caller sent its span (a controller creating a pod's
    claim joins the pod's trace). An untraced request gets none: the CLI applying a file of many
    pods must leave each pod's append the root of that pod's own trace, not one trace for all."""
    if not enabled() or not headers or not any(k.lower() == "traceparent" for k in headers):
        yield None
        return
    ctx = extract(headers)
    with _tracer.start_as_current_span(name, context=ctx, kind=SpanKind.SERVER, attributes=attributes) as s:
        yield s


@contextmanager
def span(
    name: str, traceparent: str = "", attributes: dict[str, Any] | None = None
) -> Iterator[Span | None]:
    """An INTERNAL span; with ``traceparent`` it joins that trace (sagas resume their own trace)."""
    if not enabled():
        yield None
        return
    ctx = extract(None, traceparent) if traceparent else None
    with _tracer.start_as_current_span(name, context=ctx, attributes=attributes or {}) as s:
        yield s


@contextmanager
def within(traceparent: str) -> Iterator[None]:
    """Make ``traceparent`` the current parent without a span of its own: appends made inside join
    that trace (a saga's own events join the saga's trace instead of each starting a new one)."""
    if not enabled() or not traceparent:
        yield
        return
    token = otel_context.attach(extract(None, traceparent))
    try:
        yield
    finally:
        otel_context.detach(token)
