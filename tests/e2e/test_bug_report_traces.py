"""A bug report carries its traces (issue 26): ``draflow export`` of a real run includes the spans
of the exported events, ``draflow import`` into a fresh system loads them into that system's trace
store, and ``draflow trace pod`` there shows the pod's flow as on the original system, reading
the store the OTLP endpoint names (no query URL of its own).

System A: nats-server, the ``otlp`` receiver, apiserver, claim controller, scheduler, driver and a
kubelet as processes (``tests.e2e.test_trace_flow``'s fixture). System B: its own stream on the
same nats-server and its own ``otlp`` receiver, no service.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from draflow.infra.config import Settings
from tests.conftest import settings_for
from tests.e2e.test_trace_flow import EXAMPLE, NS, system  # noqa: F401 (the fixture)
from tests.helpers import wait_until
from tests.processes import draflow, draflow_out
from tests.services.otlp.test_trace import Receiver


def _spans(text: str) -> int:
    head = next(line for line in text.splitlines() if line.startswith("trace "))
    return int(head.split()[2])


def test_an_imported_bug_report_has_its_traces(
    system: tuple[Settings, Receiver],  # noqa: F811
    nats_server: Any,
    tmp_path: Path,
) -> None:
    settings, receiver = system
    draflow_out(settings, "apply", "-f", str(EXAMPLE))
    wait_until(
        lambda: "Running" in draflow_out(settings, "get", "pod", "pod0", "-n", NS),
        timeout_s=60,
        interval_s=0.3,
    )
    original = draflow_out(settings, "trace", "pod", "pod0", "-n", NS, "--query-url", receiver.url)
    assert "INCOMPLETE" not in original and "saga PodScheduling" in original, original

    report = tmp_path / "bug.jsonl"
    done = draflow(settings, "export", "-o", str(report), "--query-url", receiver.url)
    assert done.returncode == 0, done.stderr
    header = json.loads(report.read_text().splitlines()[0])
    assert header["draflow_export"] == 2 and header["traces"] >= 2, header
    assert done.stderr.startswith(f"exported {header['count']} events and {header['traces']} traces ("), (
        done.stderr
    )

    other = settings_for(nats_server, tmp_path / "b")
    fresh = Receiver(other)
    try:
        tracing_to_b = {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": fresh.url}
        # before the import system B knows nothing of the pod
        assert fresh.get("/api/traces?tag=k8s.pod.name:pod0")["data"] == []
        done = draflow(other, "import", str(report), **tracing_to_b)
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        assert lines[0] == f"imported {header['count']} events"
        assert lines[1].startswith("imported ") and lines[1].endswith(
            f" spans of {header['traces']} traces into the trace receiver at {fresh.url}/v1/traces"
        ), lines
        # the query URL derives from the OTLP endpoint: B's store, not A's
        done = draflow(other, "trace", "pod", "pod0", "-n", NS, "--wait", "2", **tracing_to_b)
        assert done.returncode == 0, done.stderr
        assert "saga PodScheduling" in done.stdout and "INCOMPLETE" not in done.stdout, done.stdout
        assert _spans(done.stdout) == _spans(original)
        jaeger = draflow(other, "trace", "pod", "pod0", "-n", NS, "-o", "jaeger", **tracing_to_b)
        ops = {s["operationName"] for t in json.loads(jaeger.stdout)["data"] for s in t["spans"]}
        assert {"append Pod", "saga PodScheduling", "step bind", "kubelet start pod"} <= ops, ops

        # --without-traces: the events alone (format 1), as before
        plain = tmp_path / "plain.jsonl"
        done = draflow(settings, "export", "-o", str(plain), "--without-traces")
        assert done.returncode == 0 and done.stderr.startswith("exported ") and " traces" not in done.stderr
        assert json.loads(plain.read_text().splitlines()[0])["draflow_export"] == 1
    finally:
        fresh.stop()
