"""Spans as the store keeps them, decoded from OTLP requests (protobuf or OTLP/JSON bodies).

OTLP/JSON differs from protobuf's canonical JSON mapping in one way that matters: trace and span
ids are hex strings, not base64. They are rewritten before the JSON is parsed into the protobuf
message, so both encodings go through one decoder.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import msgspec
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

__all__ = ["BadRequest", "SpanEvent", "SpanLink", "SpanRecord", "decode_request", "spans_of"]

KIND_NAMES = {0: "unspecified", 1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}
STATUS_ERROR = 2


class BadRequest(ValueError):
    """The body is not an OTLP trace export request."""


class SpanEvent(msgspec.Struct, frozen=True, kw_only=True):
    time_ns: int
    name: str
    attributes: dict[str, Any] = {}


class SpanLink(msgspec.Struct, frozen=True, kw_only=True):
    trace_id: str
    span_id: str


class SpanRecord(msgspec.Struct, frozen=True, kw_only=True):
    trace_id: str  # 32 hex digits
    span_id: str  # 16 hex digits
    parent_id: str = ""  # "" for a root span
    name: str
    kind: int = 0
    start_ns: int
    end_ns: int
    status_code: int = 0  # 0 unset, 1 ok, 2 error
    status_message: str = ""
    service: str = ""
    attributes: dict[str, Any] = {}
    events: list[SpanEvent] = []
    links: list[SpanLink] = []
    resource: dict[str, Any] = {}
    scope: str = ""

    @property
    def error(self) -> bool:
        return self.status_code == STATUS_ERROR


def any_value(v: AnyValue) -> Any:
    which = v.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [any_value(x) for x in v.array_value.values]
    if which == "kvlist_value":
        return attributes(v.kvlist_value.values)
    if which == "bytes_value":
        return v.bytes_value.hex()
    return getattr(v, which)


def attributes(kvs: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in kvs:
        assert isinstance(kv, KeyValue)
        out[kv.key] = any_value(kv.value)
    return out


def _hex_to_b64(value: Any) -> Any:
    if isinstance(value, str) and value:
        try:
            return base64.b64encode(bytes.fromhex(value)).decode()
        except ValueError:
            raise BadRequest(f"id {value!r}: not hex") from None
    return value


def _fix_ids(obj: Any) -> None:
    if isinstance(obj, dict):
        for key in ("traceId", "spanId", "parentSpanId"):
            if key in obj:
                obj[key] = _hex_to_b64(obj[key])
        for v in obj.values():
            _fix_ids(v)
    elif isinstance(obj, list):
        for v in obj:
            _fix_ids(v)


def decode_request(body: bytes, content_type: str) -> ExportTraceServiceRequest:
    req = ExportTraceServiceRequest()
    if content_type.split(";")[0].strip().lower() == "application/json":
        try:
            doc = json.loads(body)
            _fix_ids(doc)
            json_format.ParseDict(doc, req, ignore_unknown_fields=True)
        except (ValueError, json_format.ParseError) as exc:
            raise BadRequest(f"not an OTLP/JSON trace request: {exc}") from None
        return req
    try:
        req.ParseFromString(body)
    except DecodeError as exc:
        raise BadRequest(f"not an OTLP/protobuf trace request: {exc}") from None
    return req


def spans_of(req: ExportTraceServiceRequest) -> list[SpanRecord]:
    out: list[SpanRecord] = []
    for rs in req.resource_spans:
        resource = attributes(rs.resource.attributes)
        service = str(resource.get("service.name") or "unknown_service")
        for ss in rs.scope_spans:
            for sp in ss.spans:
                if len(sp.trace_id) != 16 or len(sp.span_id) != 8:
                    raise BadRequest(f"span {sp.name!r}: trace id must be 16 bytes and span id 8 bytes")
                out.append(
                    SpanRecord(
                        trace_id=sp.trace_id.hex(),
                        span_id=sp.span_id.hex(),
                        parent_id=sp.parent_span_id.hex(),
                        name=sp.name,
                        kind=int(sp.kind),
                        start_ns=int(sp.start_time_unix_nano),
                        end_ns=int(sp.end_time_unix_nano),
                        status_code=int(sp.status.code),
                        status_message=sp.status.message,
                        service=service,
                        attributes=attributes(sp.attributes),
                        events=[
                            SpanEvent(
                                time_ns=int(e.time_unix_nano),
                                name=e.name,
                                attributes=attributes(e.attributes),
                            )
                            for e in sp.events
                        ],
                        links=[
                            SpanLink(trace_id=ln.trace_id.hex(), span_id=ln.span_id.hex()) for ln in sp.links
                        ],
                        resource=resource,
                        scope=ss.scope.name,
                    )
                )
    return out
