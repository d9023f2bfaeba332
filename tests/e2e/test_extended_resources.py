"""KEP-5004 end to end with the real processes: extended resources backed by DRA in a mixed cluster.

The KEP's DeviceClass (``extendedResourceName: example.com/gpu``), ResourceSlice and two Nodes
(``examples/extended-resources/``) are applied as written — the Nodes carry only
``status.capacity`` — and kubelets start on both: ``...-zrw2`` with the gpu.example.com node
plugin (its 8 devices are the KEP's ResourceSlice), ``...-xyz8`` with a device plugin advertising
``example.com/gpu: 2``. Then the KEP's Deployment, as written, and scaled:

* its pod runs on either node; scaled to 10 (all the cluster has), 2 pods run on the device-plugin
  node without any claim and 8 on the DRA node, each with its own special claim (annotation, pod
  controller reference, request ``container-0-request-0``, ``extendedResourceClaimStatus``) that
  the kubelet prepared, handing the container its CDI devices;
* the KEP's ResourceQuota counts both ways of taking a GPU on both keys without charging a special
  claim twice (10/10), and refuses an 11th pod at admission;
* scaled down, the special claims of the removed pods go away and their devices are free: an
  ordinary ResourceClaim takes them on the DRA node (no static split between the two uses);
* a pod asking for 129 devices stays Pending with the claim-limit reason;
* deleting everything leaves no claim, nothing prepared and no quota usage.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from typing import Any

import pytest

from draflow.events.api.core_v1 import Pod, ResourceQuota
from draflow.events.api.resource_v1 import ResourceClaim
from draflow.infra.config import Settings
from draflow.services.dra.extended import EXTENDED_RESOURCE_CLAIM_ANNOTATION
from draflow.services.runtime.controller import Runtime
from tests.e2e.test_demo import _prepared_everywhere
from tests.helpers import wait_for
from tests.paths import ROOT
from tests.processes import Service, node_services, running_system
from tests.shells import manifests

pytestmark = pytest.mark.kep5004

KEP = ROOT / "examples" / "extended-resources"
DRA_NODE = "gke-drabeta-n1-standard-4-2xt4-346fe653-zrw2"
PLUGIN_NODE = "gke-drabeta-n1-standard-4-2xt4-346fe653-xyz8"
GPU = "example.com/gpu"
QUOTA_KEYS = ("requests.example.com/gpu", "gpu.example.com.deviceclass.resource.k8s.io/devices")

SERVICES: tuple[Service, ...] = (
    ("draflow.services.claim_controller", [], "claim-controller: following"),
    ("draflow.services.scheduler", [], None),
    ("draflow.services.workloads", [], "workloads: following"),
    ("draflow.services.garbage_collector", [], "garbage-collector: following"),
    ("draflow.services.quota_reconciler", [], "quota-reconciler: following"),
    *node_services(DRA_NODE, 8),
    (
        "draflow.services.kubelet",
        ["--node", PLUGIN_NODE, "--gpus", "0", "--device-plugin", f"{GPU}=2"],
        f"kubelet {PLUGIN_NODE}: registered",
    ),
)


def _docs(name: str) -> list[dict[str, Any]]:
    return manifests((KEP / name).read_text())


async def _apply_the_keps_objects(probe: Runtime) -> None:
    docs = [*_docs("nodes.yaml"), *_docs("deviceclass.yaml"), *_docs("resourceslice-runnable.yaml")]
    for result in await probe.api.apply([*docs, *_docs("quota.yaml")]):
        assert result.error is None, result.error
    await wait_for(lambda: probe.get("Node", "", DRA_NODE) is not None, 10, "the KEP's Nodes")
    node = probe.get("Node", "", PLUGIN_NODE)
    assert str(node.status.capacity[GPU]) == "2" and not node.status.allocatable  # as written


@pytest.fixture
async def kep_cluster(settings: Settings) -> AsyncIterator[Runtime]:
    """The apiserver, the KEP's objects as written, then the other services and both kubelets."""
    async with running_system(settings, SERVICES, before=_apply_the_keps_objects) as (probe, _):
        yield probe


def _demo_pods(probe: Runtime) -> list[Pod]:
    pods = [p for p in probe.items("Pod", "default") if p.metadata.labels.get("app") == "demo"]
    return sorted(pods, key=lambda p: p.metadata.name)


def _special_claims(probe: Runtime) -> dict[str, ResourceClaim]:
    return {
        c.metadata.name: c
        for c in probe.items("ResourceClaim", "default")
        if c.metadata.annotations.get(EXTENDED_RESOURCE_CLAIM_ANNOTATION) == "true"
    }


def _running(probe: Runtime, n: int) -> Any:
    def check() -> bool | list[str]:
        pods = [p for p in _demo_pods(probe) if not p.metadata.deletion_timestamp]
        ok = len(pods) == n and all(p.status.phase == "Running" for p in pods)
        return ok or [f"{p.metadata.name} {p.status.phase} {p.spec.node_name}" for p in pods]

    return check


def _used(probe: Runtime) -> dict[str, str]:
    quota = probe.get("ResourceQuota", "default", "gpu")
    assert isinstance(quota, ResourceQuota)
    return {k: str(quota.status.used.get(k)) for k in QUOTA_KEYS}


def _quota_used(probe: Runtime, n: str) -> Any:
    """A ``wait_for`` check: both keys of the class show ``n`` used (a list of what they show)."""

    def check() -> bool | list[str]:
        used = _used(probe)
        return used == dict.fromkeys(QUOTA_KEYS, n) or [f"{k}={v}" for k, v in used.items()]

    return check


def _cdi_ids(settings: Settings, events: list[Any]) -> dict[str, list[str]]:
    for env in events:
        if env.type == "PodResourcesPrepared":
            return {c.container: list(c.cdi_ids) for c in env.data.containers}
    return {}


def _device(claim: ResourceClaim) -> str:
    assert claim.status.allocation is not None
    (result,) = claim.status.allocation.devices.results
    return result.device


def _check_special_claim(pod: Pod, claims: dict[str, ResourceClaim]) -> ResourceClaim:
    status = pod.status.extended_resource_claim_status
    assert status is not None, pod.metadata.name
    claim = claims[status.resource_claim_name]
    meta = claim.metadata
    assert meta.generate_name == f"{pod.metadata.name}-extended-resources-"
    assert meta.name.startswith(meta.generate_name)
    (owner,) = meta.owner_references
    assert (owner.kind, owner.name, owner.uid, owner.controller) == (
        "Pod",
        pod.metadata.name,
        pod.metadata.uid,
        True,
    )
    (req,) = claim.spec.devices.requests
    assert req.name == "container-0-request-0" and req.exactly is not None
    assert (req.exactly.device_class_name, req.exactly.allocation_mode, req.exactly.count) == (
        "gpu.example.com",
        "ExactCount",
        1,
    )
    (mapping,) = status.request_mappings
    assert (mapping.container_name, mapping.resource_name, mapping.request_name) == (
        "demo",
        GPU,
        "container-0-request-0",
    )
    assert claim.status.allocation is not None
    (result,) = claim.status.allocation.devices.results
    assert (result.driver, result.pool, result.request) == (
        "gpu.example.com",
        DRA_NODE,
        "container-0-request-0",
    )
    assert [r.uid for r in claim.status.reserved_for] == [pod.metadata.uid]
    return claim


async def _apply(probe: Runtime, docs: list[dict[str, Any]]) -> None:
    for result in await probe.api.apply(docs):
        assert result.error is None, result.error


def _scaled(replicas: int) -> list[dict[str, Any]]:
    (dep,) = copy.deepcopy(_docs("deployment.yaml"))
    dep["spec"]["replicas"] = replicas
    return [dep]


def _leftovers(settings: Settings) -> list[str]:
    """Claim-specific CDI specs and non-empty kubelet checkpoints (device-plugin devices too)."""
    return _prepared_everywhere(settings)


@pytest.mark.upstream_e2e("must run pods with extended resource on dra nodes and device plugin nodes")
async def test_kep_deployment_mixed_nodes_quota_and_cleanup(kep_cluster: Runtime, settings: Settings) -> None:
    """Upstream: ``It("must run pods with extended resource on dra nodes and device plugin
    nodes")`` — pods asking for the same extended resource run on a node whose device plugin
    advertises it (no special claim) and on a DRA node (a special claim per pod, CDI devices);
    here the KEP's Deployment scaled over both, with the quota and the clean-up after it."""
    probe = kep_cluster
    # The KEP's Deployment as written: one pod, on either node.
    await _apply(probe, _docs("deployment.yaml"))
    await wait_for(_running(probe, 1), 90, "the KEP's pod Running")
    (first,) = _demo_pods(probe)
    assert first.spec.node_name in (DRA_NODE, PLUGIN_NODE)

    # Scaled to everything the cluster has: 2 device-plugin GPUs + 8 DRA GPUs.
    await _apply(probe, _scaled(10))
    await wait_for(_running(probe, 10), 120, "10 pods Running")
    pods = _demo_pods(probe)
    by_node = {n: [p for p in pods if p.spec.node_name == n] for n in (DRA_NODE, PLUGIN_NODE)}
    assert (len(by_node[DRA_NODE]), len(by_node[PLUGIN_NODE])) == (8, 2)
    claims = _special_claims(probe)
    for pod in by_node[PLUGIN_NODE]:  # device plugin: NodeResourcesFit, no claim
        assert pod.status.extended_resource_claim_status is None
    devices = set()
    for pod in by_node[DRA_NODE]:
        claim = _check_special_claim(pod, claims)
        assert claim.status.allocation is not None
        devices.add(claim.status.allocation.devices.results[0].device)
        events = await probe.events.events(probe.events.subject("Pod", "default", pod.metadata.name))
        ids = _cdi_ids(settings, events)
        # the container's own device (the driver's common id + the claim's device id)
        assert list(ids) == ["demo"] and len(ids["demo"]) == 2, ids
        assert ids["demo"][1].startswith(f"k8s.gpu.example.com/gpu={claim.metadata.uid}-")
    assert len(claims) == 8 and devices == {f"gpu-{i}" for i in range(8)}

    # Quota: both keys of the class count every GPU once, whichever way it was taken.
    await wait_for(_quota_used(probe, "10"), 30, "quota used 10/10")
    (result,) = await probe.api.apply(_docs("one-more.yaml"))  # the README's eleventh GPU
    assert result.error is not None and result.error.code == 403, result.error
    assert result.error.message == (
        'pods "one-more" is forbidden: exceeded quota: gpu, requested: '
        "gpu.example.com.deviceclass.resource.k8s.io/devices=1,requests.example.com/gpu=1, used: "
        "gpu.example.com.deviceclass.resource.k8s.io/devices=10,requests.example.com/gpu=10, limited: "
        "gpu.example.com.deviceclass.resource.k8s.io/devices=10,requests.example.com/gpu=10"
    ), result.error.message
    assert probe.get("Pod", "default", "one-more") is None

    # Scaled down: the removed pods' special claims go, their devices serve an ordinary claim.
    await _apply(probe, _scaled(3))
    await wait_for(_running(probe, 3), 90, "3 pods Running")

    def claims_follow_pods() -> bool | list[str]:
        # the removed pods must be gone, not just terminating (they still hold their devices)
        pods = {p.metadata.uid for p in _demo_pods(probe)}
        claims = _special_claims(probe)
        owners = {c.metadata.owner_references[0].uid for c in claims.values()}
        return (
            len(pods) == 3
            and owners <= pods
            and len(claims) == sum(1 for p in _demo_pods(probe) if p.spec.node_name == DRA_NODE)
        ) or [*sorted(claims), f"{len(pods)} demo pods"]

    await wait_for(claims_follow_pods, 60, "special claims of removed pods deleted")
    on_dra = sum(1 for p in _demo_pods(probe) if p.spec.node_name == DRA_NODE)
    free = 8 - on_dra
    ordinary = [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "rest", "namespace": "default"},
            "spec": {
                "devices": {
                    "requests": [
                        {"name": "gpus", "exactly": {"deviceClassName": "gpu.example.com", "count": free}}
                    ]
                }
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "rest", "namespace": "default"},
            "spec": {
                "containers": [
                    {"name": "c", "image": "busybox", "resources": {"claims": [{"name": "gpus"}]}}
                ],
                "resourceClaims": [{"name": "gpus", "resourceClaimName": "rest"}],
            },
        },
    ]
    await _apply(probe, ordinary)

    def rest_running() -> bool | list[str]:
        pod = probe.get("Pod", "default", "rest")
        return (pod is not None and pod.status.phase == "Running") or [f"{pod and pod.status}"]

    await wait_for(rest_running, 60, "the ordinary claim's pod Running")
    rest = probe.get("ResourceClaim", "default", "rest")
    assert rest.status.allocation is not None, (free, probe.get("Pod", "default", "rest"))
    taken = {r.device for r in rest.status.allocation.devices.results}
    special = {_device(c) for c in _special_claims(probe).values()}
    assert len(taken) == free and not taken & special and taken | special == {f"gpu-{i}" for i in range(8)}
    expected = str(3 + free)
    await wait_for(_quota_used(probe, expected), 30, f"quota used {expected}")

    # Deleting everything frees every device, claim and quota unit.
    for result in await probe.api.delete(
        [("Deployment", "default", "demo"), ("Pod", "default", "rest"), ("ResourceClaim", "default", "rest")]
    ):
        assert result.error is None, result.error

    def all_gone() -> bool | list[str]:
        left = [p.metadata.name for p in probe.items("Pod", "default")]
        left += [c.metadata.name for c in probe.items("ResourceClaim", "default")]
        return (left + _leftovers(settings)) or True

    await wait_for(all_gone, 90, "nothing left")
    await wait_for(_quota_used(probe, "0"), 30, "quota used 0")


async def test_129_devices_stay_pending_with_the_claim_limit(kep_cluster: Runtime) -> None:
    probe = kep_cluster
    await _apply(
        probe,
        [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "big"}},
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "big", "namespace": "big"},
                "spec": {
                    "containers": [{"name": "c", "image": "busybox", "resources": {"limits": {GPU: 129}}}]
                },
            },
        ],
    )

    def refused() -> bool | list[str]:
        pod = probe.get("Pod", "big", "big")
        conds = [c for c in pod.status.conditions if c.type == "PodScheduled"] if pod else []
        refused = bool(conds and conds[0].status == "False" and "claim limit" in conds[0].message)
        return refused or [repr(conds)]

    await wait_for(refused, 30, "PodScheduled=False with the claim limit")
    pod = probe.get("Pod", "big", "big")
    (cond,) = [c for c in pod.status.conditions if c.type == "PodScheduled"]
    assert cond.message == (
        'running "DynamicResources" filter plugin: '
        "pod big/big: extended resources backed by DRA: number of requested devices 129 "
        "exceeds the claim limit of 32"
    )
    # A pod the scheduler places after the refusal proves it went on past the big pod (and its
    # binding requeues the big pod once more): the big pod is still not placed, no claim is left.
    await _apply(
        probe,
        [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "after"}},
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "after", "namespace": "after"},
                "spec": {
                    "containers": [{"name": "c", "image": "busybox", "resources": {"limits": {GPU: 1}}}]
                },
            },
        ],
    )

    def after_running() -> bool | list[str]:
        pod = probe.get("Pod", "after", "after")
        return (pod is not None and pod.status.phase == "Running") or [f"{pod and pod.status}"]

    await wait_for(after_running, 60, "a pod scheduled after the refusal Running")
    pod = probe.get("Pod", "big", "big")
    assert pod.status.phase == "Pending" and not pod.spec.node_name
    assert probe.items("ResourceClaim", "big") == []
