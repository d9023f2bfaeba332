"""Tracing across processes: spans exported over OTLP/HTTP to a collector run by the test."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from draflow.infra import tracing
from draflow.infra.config import Settings
from draflow.infra.eventstore import EventStore
from tests.helpers import wait_until
from tests.processes import Proc
from tests.widgets import WidgetCreated

SAGA_WORKER = "tests.sagas.saga_worker"
TRACE_SERVICES = "tests.trace_services"


class Collector:
    """A minimal OTLP/HTTP trace receiver: remembers every span with its service name."""

    def __init__(self, port: int = 0) -> None:
        self.spans: list[dict[str, object]] = []
        self.lock = threading.Lock()
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                req = ExportTraceServiceRequest()
                req.ParseFromString(body)
                with collector.lock:
                    for rs in req.resource_spans:
                        service = next(
                            (a.value.string_value for a in rs.resource.attributes if a.key == "service.name"),
                            "",
                        )
                        for ss in rs.scope_spans:
                            for sp in ss.spans:
                                collector.spans.append(
                                    {
                                        "service": service,
                                        "name": sp.name,
                                        "kind": sp.kind,
                                        "trace": sp.trace_id.hex(),
                                        "id": sp.span_id.hex(),
                                        "parent": sp.parent_span_id.hex(),
                                        "start": sp.start_time_unix_nano,
                                        "end": sp.end_time_unix_nano,
                                    }
                                )
                out = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def find(self, **match: object) -> list[dict[str, object]]:
        with self.lock:
            return [s for s in self.spans if all(s[k] == v for k, v in match.items())]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> Collector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@pytest.fixture
def collector() -> Iterator[Collector]:
    with Collector() as c:
        yield c


SPAN_KIND_INTERNAL, SPAN_KIND_PRODUCER, SPAN_KIND_CONSUMER = 1, 4, 5


def _service_env(settings: Settings, collector: Collector, delay_ms: int) -> dict[str, str]:
    return {
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_ENDPOINT": collector.url,
        "OTEL_BSP_SCHEDULE_DELAY": str(delay_ms),
        "DRAFLOW_LOG_LEVEL": "WARNING",
    }


def test_extract_is_case_insensitive() -> None:
    tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    from opentelemetry import trace

    for headers in ({"traceparent": tp}, {"TraceParent": tp}, {"TRACEPARENT": tp}):
        ctx = tracing.extract(headers)
        assert trace.get_current_span(ctx).get_span_context().trace_id == 0x0AF7651916CD43DD8448EB211C80319C
    # no header: the envelope's copy is used
    ctx = tracing.extract({}, tp)
    assert trace.get_current_span(ctx).get_span_context().span_id == 0xB7AD6B7169203331
    assert not tracing.enabled()  # nothing is set up in a process without an OTLP endpoint
    assert tracing.current_traceparent() == ""


async def test_parent_in_one_service_child_in_another(
    event_store: EventStore, settings: Settings, collector: Collector
) -> None:
    # a long batch delay: spans can only reach the collector through the flush on SIGTERM
    env = _service_env(settings, collector, delay_ms=60_000)
    reactor = Proc(settings, TRACE_SERVICES, ["reactor"], env)
    producer = Proc(settings, TRACE_SERVICES, ["producer"], env)
    producer.expect("APPENDED")
    reactor.expect("HANDLED")
    for w in (producer, reactor):
        w.proc.send_signal(signal.SIGTERM)
    assert producer.wait(timeout_s=5) == 0 and reactor.wait(timeout_s=5) == 0
    wait_until(lambda: len(collector.find(service="reactor", kind=SPAN_KIND_PRODUCER)) == 1)

    (root,) = collector.find(service="producer", name="apply widget")
    (send,) = collector.find(service="producer", kind=SPAN_KIND_PRODUCER)
    (handle,) = collector.find(service="reactor", kind=SPAN_KIND_CONSUMER, name="handle WidgetCreated")
    (reply,) = collector.find(service="reactor", kind=SPAN_KIND_PRODUCER)
    assert send["name"] == "append Widget"
    assert send["parent"] == root["id"]
    assert handle["parent"] == send["id"], "the consumer span is the child of the producer span"
    assert reply["parent"] == handle["id"]
    assert root["trace"] == send["trace"] == handle["trace"] == reply["trace"]
    # the traceparent travels in a lower-case NATS header and in the envelope
    first = (await event_store.events(event_store.subject("Widget", "default", "traced")))[0]
    assert isinstance(first.data, WidgetCreated)
    rec = await event_store.last_record(first.subject)
    assert rec is not None
    headers = (rec.headers or b"").decode()
    assert "\r\ntraceparent: " in headers and "Traceparent" not in headers
    assert first.traceparent.split("-")[1] == root["trace"] and first.traceparent.split("-")[2] == send["id"]


async def test_one_trace_per_saga_across_a_crash(
    event_store: EventStore, settings: Settings, collector: Collector
) -> None:
    env = _service_env(settings, collector, delay_ms=50)
    first = Proc(settings, SAGA_WORKER, ["start", "traced-saga"], {**env, "PAUSE_AFTER": "reserve"})
    first.expect("PAUSED after reserve")
    wait_until(lambda: bool(collector.find(service="saga-worker", name="step reserve")))
    assert first.kill() == -signal.SIGKILL
    second = Proc(settings, SAGA_WORKER, ["resume"], env)
    assert second.expect("RESULT") == "RESULT traced-saga Completed"
    assert second.wait() == 0
    steps = [collector.find(service="saga-worker", name=f"step {s}") for s in ("reserve", "charge", "ship")]
    assert all(len(s) == 1 for s in steps), steps
    traces = {s[0]["trace"] for s in steps}
    assert len(traces) == 1, "every step of the saga, in both processes, is in one trace"
    # the first process was killed inside its saga span, which therefore never ended (nor was
    # exported); the second covers what it ran with a "resumed" span, in the same trace, under it
    assert collector.find(service="saga-worker", name="saga Transfer") == []
    (resumed,) = collector.find(service="saga-worker", name="saga Transfer (resumed)")
    assert resumed["trace"] in traces
    # its parent: the span that recorded SagaStarted (the traceparent in the log), under the lost one
    (started,) = [s for s in collector.find(service="saga-worker", id=resumed["parent"])]
    assert started["parent"] == steps[0][0]["parent"]
    assert [s[0]["parent"] for s in steps[1:]] == [resumed["id"], resumed["id"]]


async def test_a_saga_span_covers_its_steps(
    event_store: EventStore, settings: Settings, collector: Collector
) -> None:
    """A saga run in one process: its span starts before and ends after every step (issue 26)."""
    env = _service_env(settings, collector, delay_ms=50)
    proc = Proc(settings, SAGA_WORKER, ["start", "covered-saga"], env)
    assert proc.expect("RESULT") == "RESULT covered-saga Completed"
    assert proc.wait() == 0
    wait_until(lambda: len(collector.find(service="saga-worker", name="saga Transfer")) == 1)
    (saga,) = collector.find(service="saga-worker", name="saga Transfer")
    steps = [
        collector.find(service="saga-worker", name=f"step {s}")[0] for s in ("reserve", "charge", "ship")
    ]
    assert all(s["parent"] == saga["id"] and s["trace"] == saga["trace"] for s in steps)
    start, end = int(str(saga["start"])), int(str(saga["end"]))
    assert all(start <= int(str(s["start"])) and int(str(s["end"])) <= end for s in steps), (saga, steps)
