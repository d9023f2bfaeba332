"""The span store on a real SQLite file: queries by service and attributes, retention by trace."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from draflow.services.otlp.model import SpanRecord
from draflow.services.otlp.store import SpanStore, TraceQuery


def _span(
    trace: int, span: int, start_s: int, service: str = "scheduler", attrs: dict[str, Any] | None = None
) -> SpanRecord:
    return SpanRecord(
        trace_id=f"{trace:032x}",
        span_id=f"{span:016x}",
        name=f"op{span}",
        service=service,
        start_ns=start_s * 10**9,
        end_ns=start_s * 10**9 + 1000,
        attributes=attrs or {},
    )


def test_queries_and_retention(tmp_path: Path) -> None:
    store = SpanStore(tmp_path / "spans.sqlite", max_spans=4)
    store.add([_span(1, 1, 100, attrs={"k8s.pod.name": "a"}), _span(1, 2, 101, "kubelet")])
    store.add([_span(2, 3, 200, attrs={"k8s.pod.name": "b", "attempt": 2}), _span(2, 4, 201)])
    assert store.find(TraceQuery(tags={"k8s.pod.name": "a"})) == [f"{1:032x}"]
    assert store.find(TraceQuery(service="kubelet", tags={"k8s.pod.name": "a"})) == [f"{1:032x}"]
    assert store.find(TraceQuery(service="kubelet", tags={"k8s.pod.name": "b"})) == []
    assert store.find(TraceQuery(tags={"attempt": "2"})) == [f"{2:032x}"]
    assert store.find(TraceQuery()) == [f"{2:032x}", f"{1:032x}"]  # newest first
    assert store.find(TraceQuery(start_us=150 * 10**6)) == [f"{2:032x}"]
    assert store.services() == ["kubelet", "scheduler"]

    store.add([_span(3, 5, 300, attrs={"k8s.pod.name": "c"})])  # 5 spans > 4: the oldest trace goes
    assert store.count() == 3
    assert store.trace(f"{1:032x}") == [] and store.find(TraceQuery(tags={"k8s.pod.name": "a"})) == []
    assert [s.span_id for s in store.trace(f"{2:032x}")] == [f"{3:016x}", f"{4:016x}"]
    store.add([_span(3, 5, 300, attrs={"k8s.pod.name": "c"})])  # re-exported: replaced, not doubled
    assert store.count() == 3
    store.close()

    again = SpanStore(tmp_path / "spans.sqlite")  # the file outlives the process
    assert again.find(TraceQuery(tags={"k8s.pod.name": "c"})) == [f"{3:032x}"]
    again.close()
