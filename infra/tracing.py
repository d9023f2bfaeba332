"""OpenTelemetry tracing: producer spans per append, consumer spans per handled event.

Every service exports its spans over OTLP with a batch processor, by default to its own system's
trace receiver (the Procfile's ``otlp`` service, ``http://127.0.0.1:4318`` plus
``DRAFLOW_PORT_OFFSET``), so ``draflow trace`` works right after ``honcho start``. The standard
OpenTelemetry variables steer it: ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``..._TRACES_ENDPOINT``)
points it elsewhere (a real Jaeger), ``OTEL_EXPORTER_OTLP_PROTOCOL=grpc`` switches to OTLP/gRPC
(default port 4317 plus the offset), and ``OTEL_TRACES_EXPORTER=none`` or ``OTEL_SDK_DISABLED=true``
turn tracing off, in which case the hot paths skip span work entirely. An unreachable receiver is
reported once (then again when it answers) instead of once per batch, and never delays a stop.

The W3C ``traceparent`` travels in the NATS headers (lower-case, as written by the W3C propagator)
and in the envelope; it is read back case-insensitively, from the headers first and the envelope
second, so a parent span in one service has its child in the next across the NATS hop.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import Span, SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from draflow.infra.ports import Ports

__all__ = [
    "ExportTarget",
    "SpanKind",
    "consumer_span",
    "current_traceparent",
    "enabled",
    "export_target",
    "extract",
    "inject_headers",
    "links_to",
    "producer_span",
    "server_span",
    "setup_tracing",
    "shutdown_tracing",
    "span",
    "suppressed",
    "within",
]

log = logging.getLogger(__name__)

_propagator = TraceContextTextMapPropagator()
_provider: TracerProvider | None = None
_exporter: _ReportingExporter | None = None
_tracer: trace.Tracer = trace.get_tracer("draflow")

# the OTLP exporters' own loggers: one line per failed batch (several per retry) is quieted to the
# first line of an outage, which _ReportingExporter follows with what to check
_EXPORTER_LOGGERS = (
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    "opentelemetry.exporter.otlp.proto.grpc.exporter",
)


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


@dataclass(frozen=True)
class ExportTarget:
    """Where a process's spans go, and which setting said so (for log lines and errors)."""

    protocol: str  # "http/protobuf" or "grpc"
    url: str  # the full OTLP/HTTP URL (with /v1/traces), or the gRPC endpoint
    source: str  # the variable that set it, or how the default was derived


def export_target(environ: Mapping[str, str] | None = None) -> ExportTarget | None:
    """The standard OpenTelemetry variables resolved; ``None`` when tracing is turned off."""
    env = os.environ if environ is None else environ
    if (env.get("OTEL_SDK_DISABLED") or "").strip().lower() == "true":
        return None
    exporters = {e.strip().lower() for e in (env.get("OTEL_TRACES_EXPORTER") or "otlp").split(",")}
    if "otlp" not in exporters:  # "none" (or an exporter draflow does not ship): no spans
        return None
    protocol = (
        env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL") or ""
    ).strip().lower()
    grpc = protocol == "grpc"
    protocol = "grpc" if grpc else "http/protobuf"  # http/json is not offered by the Python exporter
    if traces_url := (env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or "").strip():
        return ExportTarget(protocol, traces_url, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    if base := (env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or "").strip():
        return ExportTarget(protocol, base if grpc else _signal_url(base), "OTEL_EXPORTER_OTLP_ENDPOINT")
    ports = Ports.from_env(env)
    source = f"default: the Procfile's otlp receiver, port {ports.otlp_grpc if grpc else ports.otlp_http}"
    source += f" with DRAFLOW_PORT_OFFSET={ports.offset}" if ports.offset else ""
    if grpc:
        return ExportTarget(protocol, ports.otlp_grpc_url, source)
    return ExportTarget(protocol, _signal_url(ports.otlp_http_url), source)


def _signal_url(base: str) -> str:
    return base.rstrip("/") + "/v1/traces"


class _ReportingExporter(SpanExporter):
    """The OTLP exporter, reporting an outage once (what it exports to and which variable to set)
    and its end once, instead of a warning per batch; after ``stopping`` it does not wait for a
    receiver it already knows to be down (a stop must not hang on a receiver that went first)."""

    def __init__(self, inner: SpanExporter, target: ExportTarget) -> None:
        self.inner = inner
        self.target = target
        self.down = False
        self.reported = False  # the exporter's own first line of this outage was let through
        self.stopping = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self.down and self.stopping:
            return SpanExportResult.FAILURE
        result = self.inner.export(spans)
        if result is SpanExportResult.SUCCESS:
            if self.down:
                log.warning("traces: exporting to %s again", self.target.url)
            self.down = self.reported = False
        else:
            self.report_down("dropping them until it answers")
        return result

    def report_down(self, what: str) -> None:
        """Say once per outage where spans could not go, which setting chose it, what to check."""
        if self.down:
            return
        self.down = True
        log.warning(
            "traces: cannot export spans to %s (%s; %s): %s. Is the trace receiver running (the "
            "Procfile's otlp service, or your Jaeger)? Set OTEL_EXPORTER_OTLP_ENDPOINT to export "
            "elsewhere, OTEL_TRACES_EXPORTER=none to stop tracing",
            self.target.url, self.target.protocol, self.target.source, what,
        )

    def filter(self, record: logging.LogRecord) -> bool:
        """Logging filter for the OTLP exporter's loggers: its first line of an outage only."""
        if self.down or self.reported:
            return False
        self.reported = True
        return True

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


def _otlp_exporter(target: ExportTarget) -> SpanExporter:
    if target.protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter

        return GrpcExporter(endpoint=target.url)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter

    return HttpExporter(endpoint=target.url)


def setup_tracing(service_name: str, exporter: SpanExporter | None = None) -> TracerProvider | None:
    """Install an SDK tracer provider for this process exporting to ``export_target()`` (or to
    ``exporter``); returns None, and leaves tracing off, when the OTel variables turn it off."""
    global _provider, _tracer, _exporter
    target = None
    if exporter is None:
        target = export_target()
        if target is None:
            return None
    if _provider is None:
        # no exit hook: shutdown_tracing() flushes within a deadline, the SDK's hook could wait 30 s
        _provider = TracerProvider(
            resource=Resource.create({"service.name": service_name}), shutdown_on_exit=False
        )
        trace.set_tracer_provider(_provider)
        _tracer = _provider.get_tracer("draflow")
    if target is not None:
        _exporter = exporter = _ReportingExporter(_otlp_exporter(target), target)
        for name in _EXPORTER_LOGGERS:
            logging.getLogger(name).addFilter(_exporter)
        log.info("%s: spans to %s (%s; %s)", service_name, target.url, target.protocol, target.source)
    assert exporter is not None
    # batch export (OTEL_BSP_* variables tune it); shutdown_tracing() flushes what is pending
    _provider.add_span_processor(BatchSpanProcessor(exporter))
    return _provider


def shutdown_tracing(timeout_ms: int = 2000) -> None:
    """Flush pending spans within ``timeout_ms`` (called on SIGTERM: honcho kills after 5 s).

    The SDK's flush ignores its timeout (an unreachable receiver holds it in the exporter's
    retries for 10 s), so it runs in a thread that is waited for at most that long; then the
    exporter is shut down, which ends its retries."""
    if _provider is None:
        return
    if _exporter is not None:
        _exporter.stopping = True
    flushing = threading.Thread(target=_provider.force_flush, name="draflow-trace-flush", daemon=True)
    flushing.start()
    flushing.join(timeout_ms / 1000)
    if _exporter is not None:
        if flushing.is_alive():
            _exporter.report_down(f"the last spans were not taken within {timeout_ms} ms of the stop")
        _exporter.shutdown()


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


def links_to(traceparents: Sequence[str]) -> list[trace.Link]:
    """OTel links to the spans ``traceparents`` name (a re-apply or delete of a pod linking to the
    trace of its creation); unparsable ones are skipped."""
    out: list[trace.Link] = []
    for tp in traceparents:
        ctx = trace.get_current_span(extract(None, tp)).get_span_context()
        if ctx.is_valid:
            out.append(trace.Link(ctx))
    return out


@contextmanager
def producer_span(name: str, attributes: dict[str, Any], links: Sequence[str] = ()) -> Iterator[str]:
    """A PRODUCER span around an append; yields the traceparent to inject (empty when off).
    ``links``: traceparents of spans in other traces this append follows from."""
    if not enabled():
        yield ""
        return
    with _tracer.start_as_current_span(
        name, kind=SpanKind.PRODUCER, attributes=attributes, links=links_to(links) if links else None
    ):
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
