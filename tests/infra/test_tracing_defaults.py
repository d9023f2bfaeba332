"""Tracing out of the box: services export to their system's receiver with nothing set (over
OTLP/HTTP, or OTLP/gRPC on request), ``draflow trace`` reads from it and waits for spans still in a
batch, and every way of finding nothing is explained. Real processes, real OTLP exporters."""

from __future__ import annotations

import json
import logging
import signal
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from functools import partial
from http.server import BaseHTTPRequestHandler, SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc import TraceServiceStub

from draflow.infra.config import Settings
from draflow.infra.natsd import free_port
from tests.helpers import free_port_offset, wait_until
from tests.infra.test_tracing import Collector
from tests.processes import Proc, draflow
from tests.services.otlp.test_trace import Receiver, _pod_trace_ready

TRACE_SERVICES = "tests.trace_services"


class OffsetReceiver(Receiver):
    """The ``otlp`` service with only ``DRAFLOW_PORT_OFFSET`` set, as the Procfile starts it."""

    def __init__(self, settings: Settings) -> None:
        self.offset = free_port_offset(metrics_slots=1)
        super().__init__(settings, 4318 + self.offset, 4317 + self.offset)

    def env(self) -> dict[str, str]:
        return {"DRAFLOW_PORT_OFFSET": str(self.offset)}


@pytest.fixture
def receiver(settings: Settings) -> Iterator[OffsetReceiver]:
    r = OffsetReceiver(settings)
    try:
        yield r
    finally:
        if r.worker.proc.poll() is None:
            assert r.stop() == 0


def _tracing(**env: str) -> dict[str, str]:
    """A traced service's environment (the test suite turns tracing off by default)."""
    return {"OTEL_TRACES_EXPORTER": "otlp", "DRAFLOW_LOG_LEVEL": "WARNING", **env}


def _stop(*workers: Proc) -> None:
    for w in workers:
        w.proc.send_signal(signal.SIGTERM)
    for w in workers:
        assert w.wait(timeout_s=10) == 0


def test_right_after_the_flow_trace_waits_for_the_batch(settings: Settings, receiver: OffsetReceiver) -> None:
    """Nothing but the offset set: the services find the receiver, the CLI finds it too, and the
    CLI run at once (spans still held for up to 3 s by the batch processor) waits for them."""
    env = _tracing(DRAFLOW_PORT_OFFSET=str(receiver.offset), OTEL_BSP_SCHEDULE_DELAY="3000")
    binder = Proc(settings, TRACE_SERVICES, ["binder"], env)
    binder.expect("BOUND")
    r = draflow(settings, "trace", "pod", "web", **env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("trace ") and "saga PodScheduling" in r.stdout, r.stdout
    _stop(binder)


def test_otlp_grpc_export_lands_in_the_same_store(settings: Settings, receiver: OffsetReceiver) -> None:
    """``OTEL_EXPORTER_OTLP_PROTOCOL=grpc``: the real OTLP/gRPC exporter sends to the receiver's
    gRPC port (4317 plus the offset), and the spans are found as if sent over HTTP."""
    env = _tracing(
        DRAFLOW_PORT_OFFSET=str(receiver.offset),
        OTEL_EXPORTER_OTLP_PROTOCOL="grpc",
        OTEL_BSP_SCHEDULE_DELAY="50",
    )
    starter = Proc(settings, TRACE_SERVICES, ["starter"], env)
    binder = Proc(settings, TRACE_SERVICES, ["binder"], env)
    binder.expect("BOUND")
    starter.expect("STARTED")
    wait_until(lambda: _pod_trace_ready(receiver), timeout_s=15)
    _stop(binder, starter)
    assert receiver.get("/api/services")["data"] == ["binder", "starter"]
    # a malformed request is refused with gRPC's INVALID_ARGUMENT and stores nothing
    bad = ExportTraceServiceRequest()
    span = bad.resource_spans.add().scope_spans.add().spans.add()
    span.trace_id, span.span_id, span.name = b"short", bytes(8), "bad"
    with grpc.insecure_channel(f"127.0.0.1:{receiver.grpc_port}") as channel:
        with pytest.raises(grpc.RpcError) as refused:
            TraceServiceStub(channel).Export(bad, timeout=5)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "trace id must be 16 bytes" in str(refused.value.details())
    assert receiver.get("/api/traces?tag=k8s.pod.name:web")["data"][0]["spans"]


def test_an_unreachable_receiver_does_not_hold_the_stop(settings: Settings) -> None:
    """Spans still queued at SIGTERM (a long batch delay) meet a receiver that is not there: the
    exporter would retry for 10 s, honcho kills at 5; the stop waits at most 2 s for it."""
    nowhere = f"http://127.0.0.1:{free_port()}"
    env = _tracing(OTEL_EXPORTER_OTLP_ENDPOINT=nowhere, OTEL_BSP_SCHEDULE_DELAY="60000")
    starter = Proc(settings, TRACE_SERVICES, ["starter"], env, merge_stderr=True)
    binder = Proc(settings, TRACE_SERVICES, ["binder"], env, merge_stderr=True)
    binder.expect("BOUND")
    starter.expect("STARTED")
    start = time.monotonic()
    for w in (binder, starter):
        w.proc.send_signal(signal.SIGTERM)
    codes = [w.wait(timeout_s=20) for w in (binder, starter)]
    took = time.monotonic() - start
    rest = ["\n".join(w.lines.queue) for w in (binder, starter)]  # what they printed after the marker
    assert codes == [0, 0], rest
    assert took < 4.5, (took, rest)
    for out in rest:
        assert out.count("traces: cannot export spans to") == 1, out
        assert f"{nowhere}/v1/traces" in out and "OTEL_EXPORTER_OTLP_ENDPOINT" in out
        assert "Traceback" not in out


def test_an_outage_is_reported_once_and_its_end_too(caplog: pytest.LogCaptureFixture) -> None:
    """The real OTLP/HTTP exporter behind the reporting wrapper: three failed batches, one report
    (and at most one line of the exporter's own); a receiver that comes up is noticed once."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import SpanExportResult

    from draflow.infra.tracing import _EXPORTER_LOGGERS, ExportTarget, _ReportingExporter

    port = free_port()
    url = f"http://127.0.0.1:{port}/v1/traces"
    target = ExportTarget("http/protobuf", url, "test")
    exporter = _ReportingExporter(OTLPSpanExporter(endpoint=url, timeout=0.3), target)
    for name in _EXPORTER_LOGGERS:
        logging.getLogger(name).addFilter(exporter)
    span = TracerProvider().get_tracer("t").start_span("s")
    span.end()
    spans: list[ReadableSpan] = [span]  # type: ignore[list-item]  # the SDK's Span is one
    try:
        with caplog.at_level(logging.WARNING):
            assert [exporter.export(spans) for _ in range(3)] == [SpanExportResult.FAILURE] * 3
            reports = [r.getMessage() for r in caplog.records if "cannot export spans" in r.getMessage()]
            assert len(reports) == 1 and url in reports[0], reports
            own = [r for r in caplog.records if r.name in _EXPORTER_LOGGERS]
            assert len(own) <= 1, [r.getMessage() for r in own]
            collector = Collector(port)
            try:
                assert exporter.export(spans) is SpanExportResult.SUCCESS
            finally:
                collector.close()
            assert [r.getMessage() for r in caplog.records][-1] == f"traces: exporting to {url} again"
    finally:
        for name in _EXPORTER_LOGGERS:
            logging.getLogger(name).removeFilter(exporter)
        exporter.shutdown()


class _Jaeger(BaseHTTPRequestHandler):
    """In front of a real receiver, what Jaeger's query service adds: a search needs a service."""

    upstream = ""

    def do_GET(self) -> None:
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
        if self.path.startswith("/api/traces?") and "service" not in query:
            status, body = (
                400,
                json.dumps(
                    {"data": None, "errors": [{"code": 400, "msg": "parameter 'service' is required"}]}
                ).encode(),
            )
        else:
            try:
                with urllib.request.urlopen(self.upstream + self.path, timeout=5) as resp:
                    status, body = resp.status, resp.read()
            except urllib.error.HTTPError as exc:
                status, body = exc.code, exc.read()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def _serve(server: ThreadingHTTPServer) -> str:
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}"


def test_why_nothing_was_found(settings: Settings, receiver: OffsetReceiver, tmp_path: Path) -> None:
    offset = {"DRAFLOW_PORT_OFFSET": str(receiver.offset)}
    # no receiver at the URL
    r = draflow(settings, "trace", "pod", "web", "--query-url", f"http://127.0.0.1:{free_port()}")
    assert r.returncode == 1 and "cannot reach the trace store at http://127.0.0.1:" in r.stderr, r.stderr
    assert "(--query-url)" in r.stderr and "DRAFLOW_TRACE_QUERY_URL" in r.stderr
    # an HTTP server that is no query API (a Jaeger's OTLP port, a typo): said so, not "no traces"
    other = ThreadingHTTPServer(("127.0.0.1", 0), partial(SimpleHTTPRequestHandler, directory=str(tmp_path)))
    url = _serve(other)
    try:
        r = draflow(settings, "trace", "pod", "web", DRAFLOW_TRACE_QUERY_URL=url)
        assert r.returncode == 1, r.stderr
        assert f"{url} (DRAFLOW_TRACE_QUERY_URL) does not answer Jaeger's query API" in r.stderr, r.stderr
        assert "HTTP 404" in r.stderr and "16686" in r.stderr
    finally:
        other.shutdown()
        other.server_close()
    # the pod is not in the log
    r = draflow(settings, "trace", "pod", "web", **offset)
    assert r.returncode == 1 and "the pod has no events in the log" in r.stderr, r.stderr

    # the services were not tracing: the pod's events carry no traceparent
    binder = Proc(settings, TRACE_SERVICES, ["binder"], {"OTEL_TRACES_EXPORTER": "none"})
    binder.expect("BOUND")
    _stop(binder)
    r = draflow(settings, "trace", "pod", "web", "--wait", "0", **offset)
    assert r.returncode == 1 and "events in the log carry no trace context" in r.stderr, r.stderr


def test_spans_exported_elsewhere(settings: Settings, receiver: OffsetReceiver) -> None:
    collector = Collector()  # the services export here, the CLI reads the receiver
    try:
        binder = Proc(
            settings,
            TRACE_SERVICES,
            ["binder"],
            _tracing(OTEL_EXPORTER_OTLP_ENDPOINT=collector.url, OTEL_BSP_SCHEDULE_DELAY="50"),
        )
        binder.expect("BOUND")
        _stop(binder)
        assert collector.find(name="saga PodScheduling")
    finally:
        collector.close()
    start = time.monotonic()
    r = draflow(settings, "trace", "pod", "web", "--wait", "1", DRAFLOW_PORT_OFFSET=str(receiver.offset))
    assert r.returncode == 1, r.stderr
    assert time.monotonic() - start >= 1.0, "waited for the batch before giving up"
    assert "after waiting 1s: the pod's events name trace(s)" in r.stderr, r.stderr
    assert "OTEL_EXPORTER_OTLP_ENDPOINT and this command's DRAFLOW_TRACE_QUERY_URL" in r.stderr


def test_a_jaeger_that_searches_one_service_at_a_time(settings: Settings, receiver: OffsetReceiver) -> None:
    """Jaeger's query service refuses a search without ``service``: the CLI searches service by
    service (``--no-log``: the search is the only way to the trace here)."""
    binder = Proc(
        settings,
        TRACE_SERVICES,
        ["binder"],
        _tracing(DRAFLOW_PORT_OFFSET=str(receiver.offset), OTEL_BSP_SCHEDULE_DELAY="50"),
    )
    binder.expect("BOUND")
    _stop(binder)
    wait_until(lambda: bool(receiver.get("/api/traces?tag=k8s.pod.name:web")["data"]), timeout_s=10)
    jaeger = ThreadingHTTPServer(("127.0.0.1", 0), type("J", (_Jaeger,), {"upstream": receiver.url}))
    url = _serve(jaeger)
    try:
        r = draflow(settings, "trace", "pod", "web", "--no-log", "--query-url", url + "/api/traces")
        assert r.returncode == 0, r.stderr
        assert "saga PodScheduling" in r.stdout
    finally:
        jaeger.shutdown()
        jaeger.server_close()


def test_ctrl_c_with_exporters_still_connected_prints_no_traceback(settings: Settings) -> None:
    """Every service keeps an OTLP/HTTP connection open to the receiver; a Ctrl-C must end them
    without the ``CancelledError`` traceback per connection Python 3.11's streams would log."""
    port, grpc_port = free_port(), free_port()
    env = {"DRAFLOW_OTLP_ADDR": f"127.0.0.1:{port}", "DRAFLOW_OTLP_GRPC_ADDR": f"127.0.0.1:{grpc_port}"}
    otlp = Proc(settings, "draflow.services.otlp", [], env, merge_stderr=True)
    otlp.expect("LISTENING", anywhere=True, timeout_s=20)
    clients = []
    for _ in range(5):  # what five services' exporters look like between two batches
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        sock.sendall(b"GET /api/services HTTP/1.1\r\nHost: x\r\n\r\n")
        assert sock.recv(4096).startswith(b"HTTP/1.1 200 OK")
        clients.append(sock)
    try:
        otlp.proc.send_signal(signal.SIGINT)
        assert otlp.wait(timeout_s=10) == 0
    finally:
        for sock in clients:
            sock.close()
    printed = "\n".join(otlp.lines.queue)
    assert "Traceback" not in printed and "CancelledError" not in printed, printed
