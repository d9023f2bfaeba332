"""One trace per pod flow across the real services, exported over OTLP to the real ``otlp`` service.

nats-server, the ``otlp`` receiver, the apiserver, claim controller, scheduler, gpu.example.com
driver and one kubelet run as processes with ``OTEL_EXPORTER_OTLP_ENDPOINT`` pointing at the
receiver. The dra-example-driver's basic ResourceClaimTemplate example is applied with the CLI; the
pod's trace must be one connected tree (one root, every other span's parent in the trace) with
spans of at least four services: the apiserver's append of the pod, the claim controller's sync,
the scheduler's PodScheduling saga with its steps, the kubelet starting the pod. Deleting the
namespace is a different trace (the teardown), again with the kubelet in it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from draflow.infra.config import Settings
from draflow.services.cli.trace import trace_ids_from_log
from tests.helpers import wait_until
from tests.paths import ROOT
from tests.processes import GPU_PLUGIN, Proc, draflow_out
from tests.services.otlp.test_trace import Receiver

EXAMPLE = (
    ROOT / "examples" / "dra-example-driver" / "basic-resourceclaimtemplate--basic-resourceclaimtemplate.yaml"
)
NS = "basic-resourceclaimtemplate"
THIRD_GPU_POD = f"""\
apiVersion: v1
kind: Pod
metadata: {{namespace: {NS}, name: pod2}}
spec:
  containers: [{{name: ctr0, image: ubuntu:22.04, resources: {{claims: [{{name: gpu}}]}}}}]
  resourceClaims: [{{name: gpu, resourceClaimTemplateName: single-gpu}}]
"""


@pytest.fixture
def system(settings: Settings) -> Iterator[tuple[Settings, Receiver]]:
    receiver = Receiver(settings)
    env = {
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
        "OTEL_BSP_SCHEDULE_DELAY": "50",
    }
    procs: list[Proc] = []
    try:
        procs.append(Proc(settings, "draflow.services.apiserver", [], env))
        procs[0].expect("apiserver: serving", 60)
        for module, args in (
            ("draflow.services.claim_controller", []),
            ("draflow.services.scheduler", []),
            ("draflow.services.drivers.gpu_example", []),
            ("draflow.services.kubelet", ["--node", "node-1", "--gpus", "2"]),
            (GPU_PLUGIN, ["--node", "node-1", "--gpus", "2"]),
        ):
            procs.append(Proc(settings, module, args, env))
        wait_until(
            lambda: "node-1" in draflow_out(settings, "get", "resourceslices"), timeout_s=60, interval_s=0.3
        )
        yield settings, receiver
    finally:
        for p in reversed(procs):
            p.terminate()
        if receiver.worker.proc.poll() is None:
            receiver.stop()


def _traces(receiver: Receiver, pod: str) -> list[dict[str, Any]]:
    data: list[dict[str, Any]] = receiver.get(
        f"/api/traces?tag=k8s.pod.name:{pod}&tag=k8s.namespace.name:{NS}"
    )["data"]
    return data


def _services(trace: dict[str, Any]) -> set[str]:
    return {trace["processes"][s["processID"]]["serviceName"] for s in trace["spans"]}


def _assert_connected(trace: dict[str, Any]) -> dict[str, Any]:
    spans = {s["spanID"]: s for s in trace["spans"]}
    def parents(s: dict[str, Any]) -> list[dict[str, Any]]:  # links (FOLLOWS_FROM) lead elsewhere
        return [r for r in s["references"] if r["refType"] == "CHILD_OF"]

    roots = [s for s in trace["spans"] if not parents(s)]
    assert len(roots) == 1, [r["operationName"] for r in roots]
    for s in trace["spans"]:
        for ref in parents(s):
            assert ref["spanID"] in spans, s["operationName"]
    return roots[0]


def _ops(trace: dict[str, Any], service: str) -> set[str]:
    return {
        s["operationName"]
        for s in trace["spans"]
        if trace["processes"][s["processID"]]["serviceName"] == service
    }


def test_one_connected_trace_per_pod_flow_and_one_per_teardown(system: tuple[Settings, Receiver]) -> None:
    settings, receiver = system
    draflow_out(settings, "apply", "-f", str(EXAMPLE))
    wait_until(
        lambda: "Running" in draflow_out(settings, "get", "pod", "pod0", "-n", NS),
        timeout_s=60,
        interval_s=0.3,
    )

    def pod_trace() -> dict[str, Any] | None:
        traces = _traces(receiver, "pod0")
        running = [t for t in traces if "kubelet-node-1" in _services(t)]
        return running[0] if len(running) == 1 and len(_services(running[0])) >= 4 else None

    wait_until(lambda: pod_trace() is not None, timeout_s=20, interval_s=0.2)
    time.sleep(0.3)  # the last batches of spans
    trace = pod_trace()
    assert trace is not None
    root = _assert_connected(trace)
    services = _services(trace)
    assert {"apiserver", "claim-controller", "scheduler", "kubelet-node-1"} <= services, services
    # the CLI sends no trace context, so each pod of the file starts its own trace at its append
    assert root["operationName"] == "append Pod", root["operationName"]
    sched = _ops(trace, "scheduler")
    assert {"saga PodScheduling", "step reserve", "step prebind", "step bind"} <= sched, sched
    saga = next(s for s in trace["spans"] if s["operationName"] == "saga PodScheduling")
    tags = {t["key"]: t["value"] for t in saga["tags"]}
    assert tags["k8s.pod.name"] == "pod0" and tags["draflow.saga.type"] == "PodScheduling"
    steps = [s for s in trace["spans"] if s["operationName"].startswith("step ")]
    ids = {s["spanID"]: s for s in trace["spans"]}
    for step in steps:  # saga steps are descendants of the saga span
        parent = step
        while parent["references"] and parent["spanID"] != saga["spanID"]:
            parent = ids[parent["references"][0]["spanID"]]
        assert parent["spanID"] == saga["spanID"], step["operationName"]
    consumer = [
        s for s in trace["spans"] if {"key": "span.kind", "type": "string", "value": "consumer"} in s["tags"]
    ]
    assert consumer, "no consumer spans"
    for s in consumer:
        tags = {t["key"]: t["value"] for t in s["tags"]}
        assert tags["messaging.system"] == "nats" and tags["messaging.operation"] == "process"
        assert tags["messaging.destination.name"].startswith(f"{settings.root}.ev.")

    # a parent covers its children: the saga's span lasts until its last step ends (issue 26)
    saga_end = saga["startTime"] + saga["duration"]
    for step in steps:
        assert saga["startTime"] <= step["startTime"] and step["startTime"] + step["duration"] <= saga_end, (
            step["operationName"]
        )

    # the log leads to this one trace only: the pod's events and every event of its saga carry it
    assert trace_ids_from_log(settings, NS, "pod0") == {trace["traceID"]}

    # requests carry the caller's span: the claim the claim controller creates from the template,
    # and the scheduler's Kubernetes Event at Bind, are the apiserver's children of their spans
    claim = draflow_out(settings, "get", "resourceclaims", "-n", NS, "-o", "name").split()[0].split("/")[-1]
    assert trace_ids_from_log(settings, NS, claim, kind="ResourceClaim") == {trace["traceID"]}
    for verb, caller in (("create", "claim-controller"), ("event", "scheduler")):
        served = [s for s in trace["spans"] if s["operationName"] == f"api {verb}"]
        assert served, f"no api {verb} span"
        parents = {ids[s["references"][0]["spanID"]]["processID"] for s in served}
        assert caller in {trace["processes"][p]["serviceName"] for p in parents}, verb

    # a pod asking for a third GPU (the node has two): each attempt is a span of the pod's own
    # trace, its reason an attribute and a span event
    draflow_out(settings, "apply", "-f", "-", stdin=THIRD_GPU_POD)

    def attempt() -> dict[str, Any] | None:
        for t in _traces(receiver, "pod2"):
            found = [s for s in t["spans"] if s["operationName"] == "scheduling attempt"]
            if found and any(s["operationName"] == "append Pod" for s in t["spans"]):
                return t
        return None

    wait_until(lambda: attempt() is not None, timeout_s=30, interval_s=0.2)
    unschedulable = attempt()
    assert unschedulable is not None
    _assert_connected(unschedulable)
    span = next(s for s in unschedulable["spans"] if s["operationName"] == "scheduling attempt")
    tags = {t["key"]: t["value"] for t in span["tags"]}
    assert tags["draflow.scheduling.result"] == "Unschedulable"
    assert tags["draflow.scheduling.message"].startswith("0/1 nodes are available: "), tags
    (log,) = span["logs"]
    fields = {f["key"]: f["value"] for f in log["fields"]}
    assert fields["event"] == "Unschedulable" and fields["message"] == tags["draflow.scheduling.message"]
    text = draflow_out(settings, "trace", "pod", "pod2", "-n", NS, "--wait", "5", "--query-url", receiver.url)
    assert "scheduling attempt" in text and "Unschedulable: 0/1 nodes are available: " in text, text
    assert not text.startswith("INCOMPLETE"), text

    draflow_out(settings, "delete", "namespace", NS)

    def teardown() -> dict[str, Any] | None:
        others = [t for t in _traces(receiver, "pod0") if t["traceID"] != trace["traceID"]]
        return next((t for t in others if "kubelet-node-1" in _services(t)), None)

    wait_until(lambda: teardown() is not None, timeout_s=30, interval_s=0.2)
    down = teardown()
    assert down is not None
    _assert_connected(down)
    kubelet = _ops(down, "kubelet-node-1")
    assert {"kubelet release pod", "kubelet finish-deletion pod"} <= kubelet, kubelet
    # the delete links to the pod's trace (a FOLLOWS_FROM reference in Jaeger's JSON)
    follows = {r["traceID"] for s in down["spans"] for r in s["references"] if r["refType"] == "FOLLOWS_FROM"}
    assert trace["traceID"] in follows, follows

    # the same run, re-decided by today's code: scheduler, allocator and claim controller agree
    out = draflow_out(settings, "verify-replay")
    assert "every decision matches the log\n" in out and " 0 claims from templates" not in out, out
    assert out.endswith(" events: every invariant holds\n"), out
