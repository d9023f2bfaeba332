"""``draflow trace`` knows when a trace is still being exported: every event in the log names the
span that appended it, so spans the log names but the store lacks are counted, and the text output
says ``INCOMPLETE`` instead of printing a partial tree silently (issue 26). Pure: Jaeger-shaped
dicts, no store."""

from __future__ import annotations

from typing import Any

import pytest

from draflow.services.cli.trace import LogTraces, _print, unexported, waterfall

TID = "a" * 32
OTHER = "b" * 32


def span(sid: str, parent: str = "", follows: str = "", **tags: Any) -> dict[str, Any]:
    refs = [{"refType": "CHILD_OF", "traceID": TID, "spanID": parent}] if parent else []
    refs += [{"refType": "FOLLOWS_FROM", "traceID": follows, "spanID": "c" * 16}] if follows else []
    return {
        "traceID": TID,
        "spanID": sid,
        "operationName": f"op {sid}",
        "references": refs,
        "startTime": 1_000_000,
        "duration": 10,
        "tags": [{"key": k.replace("_", "."), "type": "string", "value": v} for k, v in tags.items()],
        "processID": "p1",
    }


def trace(*spans: dict[str, Any]) -> dict[str, Any]:
    return {"traceID": TID, "spans": list(spans), "processes": {"p1": {"serviceName": "svc"}}}


def logged(*span_ids: str) -> LogTraces:
    out = LogTraces(events=len(span_ids))
    for sid in span_ids:
        out.add(f"00-{TID}-{sid}-01")
    out.add("not-a-traceparent")
    return out


def test_spans_the_log_names_but_the_store_lacks_are_counted() -> None:
    stored = [trace(span("1" * 16), span("2" * 16, parent="1" * 16))]
    assert unexported(stored, logged("1" * 16, "2" * 16)) == 0
    assert unexported(stored, logged("1" * 16, "2" * 16, "3" * 16, "4" * 16)) == 2
    assert unexported([], logged("1" * 16)) == 1
    assert unexported(stored, None) == 0  # the log could not be read: nothing to compare


def test_an_incomplete_trace_says_so_first(capsys: pytest.CaptureFixture[str]) -> None:
    assert _print([trace(span("1" * 16))], "text", pending=8) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "INCOMPLETE: 8 span(s) the log names are still being exported (see the note)"
    assert out[1].startswith(f"trace {TID}  1 spans")
    _print([trace(span("1" * 16))], "text")
    assert capsys.readouterr().out.startswith(f"trace {TID}")


def test_the_waterfall_shows_links_and_attempt_reasons() -> None:
    lines = waterfall(
        trace(
            span("1" * 16, follows=OTHER),
            span(
                "2" * 16,
                parent="1" * 16,
                draflow_scheduling_result="Unschedulable",
                draflow_scheduling_message="0/1 nodes are available: 1 cannot allocate all claims.",
            ),
        )
    )
    assert lines[2].endswith(f"op {'1' * 16}  (follows trace {OTHER})")
    assert lines[3].endswith(
        f"  op {'2' * 16}  Unschedulable: 0/1 nodes are available: 1 cannot allocate all claims."
    )
