"""The ``otlp`` service and ``draflow trace``: spans from real OTLP exporters in two processes."""

from __future__ import annotations

import json
import signal
import socket
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from draflow.infra.config import Settings
from draflow.infra.natsd import free_port
from draflow.services.cli.trace import trace_ids_from_log
from tests.helpers import wait_until
from tests.processes import Proc, draflow

TRACE_SERVICES = "tests.trace_services"


def _request_with_one_span(service: str) -> ExportTraceServiceRequest:
    req = ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    attr = rs.resource.attributes.add()
    attr.key, attr.value.string_value = "service.name", service
    sp = rs.scope_spans.add().spans.add()
    sp.trace_id, sp.span_id, sp.name = bytes(range(16)), bytes(range(8)), "op"
    sp.start_time_unix_nano, sp.end_time_unix_nano = 1_700_000_000_000_000_000, 1_700_000_000_001_000_000
    return req


def _read_all(sock: socket.socket) -> bytes:
    out = b""
    while chunk := sock.recv(65536):
        out += chunk
    sock.close()
    return out


class Receiver:
    """The ``otlp`` service as a process on free ports (OTLP/HTTP + query API, and OTLP/gRPC)."""

    def __init__(self, settings: Settings, port: int = 0, grpc_port: int = 0) -> None:
        self.port, self.grpc_port = port or free_port(), grpc_port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.worker = Proc(settings, "draflow.services.otlp", [], self.env())
        self.worker.expect("LISTENING", timeout_s=20)

    def env(self) -> dict[str, str]:
        return {
            "DRAFLOW_OTLP_ADDR": f"127.0.0.1:{self.port}",
            "DRAFLOW_OTLP_GRPC_ADDR": f"127.0.0.1:{self.grpc_port}",
        }

    def get(self, path: str) -> dict:
        with urllib.request.urlopen(self.url + path, timeout=5) as resp:
            return json.load(resp)

    def post(self, body: bytes, ctype: str) -> tuple[int, bytes]:
        req = urllib.request.Request(self.url + "/v1/traces", data=body, headers={"Content-Type": ctype})
        try:
            with urllib.request.urlopen(req, timeout=5) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def stop(self) -> int:
        self.worker.proc.send_signal(signal.SIGTERM)
        return self.worker.wait(timeout_s=10)


@pytest.fixture
def receiver(settings: Settings) -> Iterator[Receiver]:
    r = Receiver(settings)
    try:
        yield r
    finally:
        if r.worker.proc.poll() is None:
            r.stop()


def _pod_trace_ready(receiver: Receiver) -> bool:
    data = receiver.get("/api/traces?tag=k8s.pod.name:web&tag=k8s.namespace.name:default")["data"]
    return len(data) == 1 and len(data[0]["spans"]) == 7


def test_pod_flow_across_two_processes(settings: Settings, receiver: Receiver) -> None:
    env = {
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
        "OTEL_BSP_SCHEDULE_DELAY": "50",
        "DRAFLOW_LOG_LEVEL": "WARNING",
    }
    starter = Proc(settings, TRACE_SERVICES, ["starter"], env)
    binder = Proc(settings, TRACE_SERVICES, ["binder"], env)
    binder.expect("BOUND")
    starter.expect("STARTED")
    wait_until(lambda: _pod_trace_ready(receiver), timeout_s=15)
    for w in (binder, starter):
        w.proc.send_signal(signal.SIGTERM)
        assert w.wait(timeout_s=10) == 0

    assert receiver.get("/api/services")["data"] == ["binder", "starter"]
    query = "/api/traces?service=starter&tags=" + urllib.parse.quote('{"k8s.pod.name": "web"}')
    (trace,) = receiver.get(query)["data"]
    assert receiver.get(f"/api/traces/{trace['traceID']}")["data"][0]["traceID"] == trace["traceID"]

    # the text waterfall: one trace, children indented under their parents, the failed span marked
    r = draflow(settings, "trace", "pod", "web", "-n", "default", "--query-url", receiver.url)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith(f"trace {trace['traceID']}  ") and "2 services (binder, starter)" in lines[0]
    assert "1 error(s)" in lines[0]
    col = lines[1].index("OPERATION")
    ops = [ln[col:] for ln in lines[2:]]
    assert ops[0] == "saga PodScheduling"
    assert "  append Saga [producer]" in ops and "  append Pod [producer]" in ops
    assert "    handle PodBound [consumer]" in ops, ops
    assert "      prepare devices  ERROR: device gpu-3 busy" in ops, ops
    assert ops.count("      append Pod [producer]") == 1  # PodStarted, appended while handling PodBound
    assert ops[-1] == "        handle PodStarted [consumer]"

    # Jaeger's upload format
    r = draflow(settings, "trace", "pod", "web", "-o", "jaeger", "--query-url", receiver.url)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    (jt,) = doc["data"]
    assert set(jt) >= {"traceID", "spans", "processes"}
    assert {p["serviceName"] for p in jt["processes"].values()} == {"binder", "starter"}
    spans = {s["spanID"]: s for s in jt["spans"]}
    for s in jt["spans"]:
        assert set(s) >= {
            "traceID",
            "spanID",
            "operationName",
            "references",
            "startTime",
            "duration",
            "tags",
            "logs",
            "processID",
        }
        assert s["processID"] in jt["processes"] and s["traceID"] == jt["traceID"]
        assert len(str(s["startTime"])) == 16, "microseconds since the epoch"
        for ref in s["references"]:
            assert ref["refType"] == "CHILD_OF" and ref["spanID"] in spans
    handle = next(s for s in jt["spans"] if s["operationName"] == "handle PodBound")
    parent = spans[handle["references"][0]["spanID"]]
    assert parent["operationName"] == "append Pod"
    assert jt["processes"][parent["processID"]]["serviceName"] == "binder"
    assert jt["processes"][handle["processID"]]["serviceName"] == "starter"

    r = draflow(settings, "trace", "id", trace["traceID"], "--query-url", receiver.url)
    assert r.returncode == 0 and r.stdout.splitlines() == lines, r.stderr
    r = draflow(settings, "trace", "id", "0" * 32, "--query-url", receiver.url, "--wait", "0")
    assert r.returncode == 1
    assert r.stderr.startswith(f"error: trace {'0' * 32}: not found in {receiver.url} (--query-url)")

    # the log alone leads to the trace too (traceparents of the pod's events and of its saga)
    assert trace_ids_from_log(settings, "default", "web") == {trace["traceID"]}
    r = draflow(settings, "trace", "pod", "nobody", "--query-url", receiver.url)
    assert r.returncode == 1 and r.stderr.startswith("error: no traces for pod default/nobody"), r.stderr
    assert receiver.stop() == 0


def test_otlp_json_bad_bodies_and_restart(settings: Settings, receiver: Receiver) -> None:
    trace_id, span_id = "5b8efff798038103d269b633813fc60c", "eee19b7ec3c1b174"
    body = {
        "resourceSpans": [
            {
                "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "curl"}}]},
                "scopeSpans": [
                    {
                        "scope": {"name": "manual"},
                        "spans": [
                            {
                                "traceId": trace_id,
                                "spanId": span_id,
                                "name": "hello",
                                "kind": 2,
                                "startTimeUnixNano": "1700000000000000000",
                                "endTimeUnixNano": "1700000000250000000",
                                "attributes": [
                                    {"key": "draflow.saga.id", "value": {"stringValue": "s-1"}},
                                    {"key": "attempt", "value": {"intValue": "3"}},
                                ],
                                "events": [{"timeUnixNano": "1700000000100000000", "name": "retry"}],
                            }
                        ],
                    }
                ],
            }
        ]
    }
    status, answer = receiver.post(json.dumps(body).encode(), "application/json")
    assert (status, answer) == (200, b"{}")
    # a chunked protobuf body behind "Expect: 100-continue" (what curl and some SDKs send)
    sock = socket.create_connection(("127.0.0.1", receiver.port), timeout=5)
    proto = _request_with_one_span("chunked").SerializeToString()
    sock.sendall(
        b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
        b"Expect: 100-continue\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    )
    assert sock.recv(100).startswith(b"HTTP/1.1 100 Continue")
    half = len(proto) // 2
    for part in (proto[:half], proto[half:]):
        sock.sendall(f"{len(part):x}\r\n".encode() + part + b"\r\n")
    sock.sendall(b"0\r\n\r\n")
    assert _read_all(sock).startswith(b"HTTP/1.1 200 OK")
    assert receiver.get("/api/traces?service=chunked")["data"][0]["spans"][0]["operationName"] == "op"
    status, answer = receiver.post(b"\xff\x00garbage", "application/x-protobuf")
    assert status == 400 and b"not an OTLP/protobuf trace request" in answer
    status, _ = receiver.post(b"{", "application/json")
    assert status == 400

    # spans survive a restart (SQLite under DRAFLOW_DATA_DIR)
    assert receiver.stop() == 0
    again = Receiver(settings)
    try:
        (t,) = again.get("/api/traces?tag=draflow.saga.id:s-1")["data"]
        (s,) = t["spans"]
        assert (t["traceID"], s["spanID"], s["startTime"], s["duration"]) == (
            trace_id,
            span_id,
            1700000000000000,
            250000,
        )
        tags = {x["key"]: x for x in s["tags"]}
        assert tags["attempt"] == {"key": "attempt", "type": "int64", "value": 3}
        assert tags["span.kind"]["value"] == "server"
        assert s["logs"] == [
            {"timestamp": 1700000000100000, "fields": [{"key": "event", "type": "string", "value": "retry"}]}
        ]
        assert again.get("/api/traces?tag=draflow.saga.id:nope")["data"] == []
        # a second receiver on a busy port steps aside and still stops cleanly
        busy = Proc(settings, "draflow.services.otlp", [], again.env(), merge_stderr=True)
        busy.expect(f"127.0.0.1:{again.port} is in use", anywhere=True, timeout_s=20)
        busy.expect(f"127.0.0.1:{again.grpc_port} is in use", anywhere=True, timeout_s=20)
        busy.proc.send_signal(signal.SIGTERM)
        assert busy.wait(timeout_s=10) == 0
    finally:
        again.stop()
