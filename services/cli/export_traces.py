"""The spans of an exported log: read from the trace store on ``draflow export``, sent to the
receiving system's trace receiver on ``draflow import``, so ``draflow trace pod NAME`` works on an
imported bug report.

Which spans belong to the export: every trace an exported event's ``traceparent`` names, whole
(the trace store's answer for that id). They travel as Jaeger JSON trace objects (what the query
API of the ``otlp`` service and of a real Jaeger return), one per line after the events, and are
sent on import as one OTLP/JSON export request to the OTLP endpoint the services of the receiving
system export to (``OTEL_EXPORTER_OTLP_ENDPOINT``, default the Procfile's ``otlp`` service): the
same place ``draflow trace`` reads by default.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Sequence
from typing import Any

from draflow.events.codec import DecodeError, decode_raw
from draflow.infra import tracing
from draflow.services.cli.main import UserError
from draflow.services.cli.trace_store import TraceStore

__all__ = ["fetch_traces", "otlp_json", "send_traces", "trace_ids"]

_KINDS = {"internal": 1, "server": 2, "client": 3, "producer": 4, "consumer": 5}
# Jaeger tags that carry what OTLP has fields for (kind, status, scope): not span attributes
_FIELD_TAGS = frozenset(
    {"span.kind", "otel.status_code", "otel.status_description", "error", "otel.scope.name"}
)


def trace_ids(payloads: Iterable[bytes]) -> list[str]:
    """Trace ids named by the envelopes' ``traceparent``s, in first-seen order."""
    seen: dict[str, None] = {}
    for data in payloads:
        try:
            tp = decode_raw(data).traceparent
        except DecodeError:
            continue
        parts = tp.split("-")
        if len(parts) == 4 and len(parts[1]) == 32:
            seen.setdefault(parts[1], None)
    return list(seen)


def fetch_traces(
    store: TraceStore, ids: Sequence[str], wait_s: float = 0.0, poll_s: float = 0.5
) -> tuple[list[dict[str, Any]], int]:
    """The traces of ``ids`` the store has (Jaeger JSON) and how many it has not. Traces it lacks
    are asked for again for up to ``wait_s`` (the newest ones may still be on their way: services
    export in batches); those that come are read whole once they do."""
    found: dict[str, list[dict[str, Any]]] = {}
    deadline = time.monotonic() + wait_s
    while True:
        for tid in ids:
            if tid not in found and (traces := store.trace(tid)):
                found[tid] = traces
        if len(found) == len(ids) or time.monotonic() >= deadline:
            break
        time.sleep(poll_s)
    return [t for tid in ids for t in found.get(tid, [])], len(ids) - len(found)


def _value(tag: dict[str, Any]) -> dict[str, Any]:
    v: Any = tag.get("value")
    kind = tag.get("type", "string")
    if kind == "bool":
        return {"boolValue": bool(v)}
    if kind == "int64":
        return {"intValue": str(int(v))}  # OTLP/JSON: 64-bit integers as strings
    if kind == "float64":
        return {"doubleValue": float(v)}
    return {"stringValue": str(v)}


def _attributes(tags: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"key": t["key"], "value": _value(t)} for t in tags if t.get("key") not in _FIELD_TAGS]


def _span(s: dict[str, Any]) -> dict[str, Any]:
    tags = {t["key"]: t.get("value") for t in s.get("tags") or []}
    refs = s.get("references") or []
    parent = next((r["spanID"] for r in refs if r.get("refType") == "CHILD_OF"), "")
    start_ns = int(s["startTime"]) * 1000
    out: dict[str, Any] = {
        "traceId": s["traceID"],
        "spanId": s["spanID"],
        "name": s["operationName"],
        "kind": _KINDS.get(str(tags.get("span.kind", "internal")), 1),
        "startTimeUnixNano": str(start_ns),
        "endTimeUnixNano": str(start_ns + int(s.get("duration") or 0) * 1000),
        "attributes": _attributes(s.get("tags") or []),
        "events": [
            {
                "timeUnixNano": str(int(log["timestamp"]) * 1000),
                "name": str(next((f["value"] for f in log["fields"] if f["key"] == "event"), "")),
                "attributes": _attributes(f for f in log["fields"] if f["key"] != "event"),
            }
            for log in s.get("logs") or []
        ],
        "links": [
            {"traceId": r["traceID"], "spanId": r["spanID"]}
            for r in refs
            if r.get("refType") == "FOLLOWS_FROM"
        ],
    }
    if parent:
        out["parentSpanId"] = parent
    if "otel.status_code" in tags:
        out["status"] = {
            "code": 2 if tags["otel.status_code"] == "ERROR" else 1,
            "message": str(tags.get("otel.status_description") or ""),
        }
    return out


def otlp_json(traces: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Jaeger JSON traces as one OTLP/JSON ``ExportTraceServiceRequest`` (one resource per process)."""
    resources: dict[str, dict[str, Any]] = {}
    for t in traces:
        processes = t.get("processes") or {}
        for s in t.get("spans") or []:
            proc = processes.get(s.get("processID"), {})
            service = str(proc.get("serviceName") or "unknown_service")
            ptags = [{"key": "service.name", "type": "string", "value": service}, *(proc.get("tags") or [])]
            key = json.dumps(ptags, sort_keys=True)
            if key not in resources:
                resources[key] = {
                    "resource": {"attributes": _attributes(ptags)},
                    "scopeSpans": [{"scope": {"name": str(_scope(s) or "draflow")}, "spans": []}],
                }
            resources[key]["scopeSpans"][0]["spans"].append(_span(s))
    return {"resourceSpans": list(resources.values())}


def _scope(s: dict[str, Any]) -> Any:
    return next((t.get("value") for t in s.get("tags") or [] if t.get("key") == "otel.scope.name"), None)


def send_traces(traces: list[dict[str, Any]]) -> tuple[int, str]:
    """POST the spans to this system's OTLP/HTTP endpoint; (spans sent, where)."""
    target = tracing.export_target()
    if target is None:
        raise UserError(
            "the spans were not imported: tracing is off here (OTEL_TRACES_EXPORTER/OTEL_SDK_DISABLED)"
        )
    if target.protocol == "grpc":
        raise UserError(
            f"the spans were not imported: {target.source} selects OTLP/gRPC ({target.url}); import sends "
            "OTLP/HTTP: set OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf and an HTTP endpoint"
        )
    body = json.dumps(otlp_json(traces)).encode()
    count = sum(len(t.get("spans") or []) for t in traces)
    req = urllib.request.Request(target.url, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            resp.read()
    except urllib.error.HTTPError as exc:
        detail = exc.read()[:300].decode(errors="replace")
        raise UserError(
            f"the spans were not imported: {target.url} answered HTTP {exc.code}: {detail}"
        ) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise UserError(
            f"the spans were not imported: cannot reach the trace receiver at {target.url} "
            f"({target.source}): {reason}. Is the otlp service running?"
        ) from None
    return count, target.url
