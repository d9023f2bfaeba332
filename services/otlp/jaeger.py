"""Spans in Jaeger's JSON shape: what Jaeger's query API returns and its UI's "upload" accepts.

``{"data": [{"traceID", "spans": [...], "processes": {"p1": {"serviceName", "tags"}}}]}``; span
times are microseconds since the epoch, the parent is a ``CHILD_OF`` reference, OTel's span kind
and status become the ``span.kind``, ``otel.status_code`` and ``error`` tags, span events become
``logs``. Conversion is pure (no I/O), shared by the service and the CLI.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from draflow.services.otlp.model import KIND_NAMES, STATUS_ERROR, SpanRecord

__all__ = ["jaeger_tag", "jaeger_trace"]


def jaeger_tag(key: str, value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"key": key, "type": "bool", "value": value}
    if isinstance(value, int):
        return {"key": key, "type": "int64", "value": value}
    if isinstance(value, float):
        return {"key": key, "type": "float64", "value": value}
    if isinstance(value, str):
        return {"key": key, "type": "string", "value": value}
    return {"key": key, "type": "string", "value": json.dumps(value, sort_keys=True)}


def _span_tags(s: SpanRecord) -> list[dict[str, Any]]:
    tags = [jaeger_tag(k, v) for k, v in sorted(s.attributes.items())]
    if s.kind not in (0, 1):
        tags.append(jaeger_tag("span.kind", KIND_NAMES.get(s.kind, "unspecified")))
    if s.scope:
        tags.append(jaeger_tag("otel.scope.name", s.scope))
    if s.status_code:
        tags.append(jaeger_tag("otel.status_code", "ERROR" if s.error else "OK"))
    if s.status_message:
        tags.append(jaeger_tag("otel.status_description", s.status_message))
    if s.status_code == STATUS_ERROR:
        tags.append(jaeger_tag("error", True))
    return tags


def jaeger_trace(spans: Sequence[SpanRecord]) -> dict[str, Any]:
    """One trace (all spans share a trace id) as Jaeger's JSON trace object."""
    processes: dict[str, dict[str, Any]] = {}
    by_process: dict[str, str] = {}
    out_spans: list[dict[str, Any]] = []
    for s in sorted(spans, key=lambda x: (x.start_ns, x.span_id)):
        resource_key = json.dumps([s.service, sorted(s.resource.items())], sort_keys=True, default=str)
        pid = by_process.get(resource_key)
        if pid is None:
            pid = by_process[resource_key] = f"p{len(by_process) + 1}"
            processes[pid] = {
                "serviceName": s.service,
                "tags": [jaeger_tag(k, v) for k, v in sorted(s.resource.items()) if k != "service.name"],
            }
        refs = [{"refType": "CHILD_OF", "traceID": s.trace_id, "spanID": s.parent_id}] if s.parent_id else []
        refs += [{"refType": "FOLLOWS_FROM", "traceID": ln.trace_id, "spanID": ln.span_id} for ln in s.links]
        out_spans.append(
            {
                "traceID": s.trace_id,
                "spanID": s.span_id,
                "operationName": s.name,
                "references": refs,
                "startTime": s.start_ns // 1000,
                "duration": max(0, s.end_ns - s.start_ns) // 1000,
                "tags": _span_tags(s),
                "logs": [
                    {
                        "timestamp": e.time_ns // 1000,
                        "fields": [jaeger_tag("event", e.name)]
                        + [jaeger_tag(k, v) for k, v in sorted(e.attributes.items())],
                    }
                    for e in s.events
                ],
                "processID": pid,
                "warnings": None,
            }
        )
    trace_id = spans[0].trace_id if spans else ""
    return {"traceID": trace_id, "spans": out_spans, "processes": processes, "warnings": None}
