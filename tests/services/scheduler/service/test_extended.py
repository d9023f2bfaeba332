"""The scheduler service with extended resources backed by DRA, on a real nats-server and apiserver.

* NVIDIA's extended-resource examples (``demo/specs/extended-resources``, verbatim, with the Helm
  chart's DeviceClasses): scheduled the way their comments say — a generated claim with request
  ``container-0-request-0`` of the mapped class, allocated on the node, and the pod's
  ``extendedResourceClaimStatus``. (``tests/e2e/test_nvidia_examples.py`` runs them on kubelets
  with the simulated gpu.nvidia.com driver.)
* The PodScheduling saga's compensation: a pod whose bind fails after PreBind gets its special
  claim deleted and its status entry cleared.
* PostFilter: a special claim left over from an earlier attempt is deleted and the pod is then
  scheduled with a new one.
* Quota: a full ``count/resourceclaims.resource.k8s.io`` refuses the special claim at PreBind.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from draflow.events.api.codec import encode_object
from draflow.events.api.core_v1 import Pod
from draflow.events.api.meta import ObjectMeta, OwnerReference
from draflow.events.api.resource_v1 import (
    DeviceClaim,
    DeviceRequest,
    ExactDeviceRequest,
    ResourceClaim,
    ResourceClaimSpec,
)
from draflow.events.objects import deletion_requested
from draflow.sagas.engine import SagaStatus
from draflow.services.dra.extended import EXTENDED_RESOURCE_CLAIM_ANNOTATION
from draflow.services.runtime.protocol import StatusError
from draflow.services.scheduler.framework import Reserved
from draflow.services.scheduler.sagas.pod_scheduling import POD_SCHEDULING, PodSchedulingInput
from tests.builders import make_class, make_container, make_device, make_node, make_pod, make_slice
from tests.builders.manifests import REALWORLD
from tests.helpers import assert_eventually
from tests.services.scheduler.service.conftest import Cluster
from tests.shells import manifests

pytestmark = pytest.mark.kep5004

NVIDIA = REALWORLD / "NVIDIA__k8s-dra-driver-gpu"
GPU = "example.com/gpu"


def _nvidia_slice(node: str) -> dict[str, Any]:
    """What the NVIDIA driver publishes for a node with 2 full GPUs and 2 MIG 1g.12gb devices
    (attributes as its docs list them; only those the classes' selectors read)."""

    def dev(name: str, kind: str, profile: str | None = None) -> dict[str, Any]:
        attrs: dict[str, Any] = {"type": {"string": kind}}
        if profile:
            attrs["profile"] = {"string": profile}
        return {"name": name, "attributes": attrs}

    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-gpu.nvidia.com"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                dev("gpu-0", "gpu"),
                dev("gpu-1", "gpu"),
                dev("gpu-2-mig-1g12gb-0", "mig", "1g.12gb"),
                dev("gpu-2-mig-1g12gb-1", "mig", "1g.12gb"),
            ],
        },
    }


async def _bound(cluster: Cluster, ns: str, name: str) -> Pod:
    async def check() -> Pod:
        pod = await cluster.api.get_object("Pod", name, namespace=ns)
        assert isinstance(pod, Pod), pod
        assert pod.spec.node_name, pod.status.conditions
        assert pod.status.extended_resource_claim_status is not None
        return pod

    pod: Pod = await assert_eventually(check, timeout_s=15)
    return pod


async def _get_claim(cluster: Cluster, ns: str, name: str) -> ResourceClaim:
    claim = await cluster.api.get_object("ResourceClaim", name, namespace=ns)
    assert isinstance(claim, ResourceClaim)
    return claim


async def _absent(cluster: Cluster, ns: str, name: str) -> bool:
    try:
        await cluster.api.get_object("ResourceClaim", name, namespace=ns)
    except StatusError as exc:
        return exc.status.code == 404
    return False


async def test_nvidia_extended_resource_examples(cluster: Cluster) -> None:
    docs = manifests(
        (
            NVIDIA / "deployments__helm__dra-driver-nvidia-gpu__templates__deviceclasses.rendered.yaml"
        ).read_text()
    )
    docs += [encode_object(make_node("worker-node-1")), _nvidia_slice("worker-node-1")]
    for f in (
        "demo__specs__extended-resources__gpu-full.yaml",
        "demo__specs__extended-resources__mig-1g-12gb.yaml",
    ):
        docs += manifests((NVIDIA / f).read_text())
    results = await cluster.api.apply(docs)
    assert [r.error for r in results if r.error is not None] == []
    await cluster.start()
    for ns, name, cls, prefix in (
        ("extended-resource-gpu-full", "gpu-full-pod", "gpu.nvidia.com", "gpu-"),
        (
            "extended-resource-mig-1g12gb",
            "mig-1g12gb-pod",
            "mig-1g-12gb.gpu.nvidia.com",
            "gpu-2-mig-1g12gb-",
        ),
    ):
        pod = await _bound(cluster, ns, name)
        assert pod.spec.node_name == "worker-node-1"
        status = pod.status.extended_resource_claim_status
        assert status is not None
        (mapping,) = status.request_mappings
        assert (mapping.container_name, mapping.request_name) == ("cuda-container", "container-0-request-0")
        claim = await _get_claim(cluster, ns, status.resource_claim_name)
        meta = claim.metadata
        assert meta.annotations == {EXTENDED_RESOURCE_CLAIM_ANNOTATION: "true"}
        assert meta.generate_name == f"{name}-extended-resources-" and meta.name.startswith(
            meta.generate_name
        )
        (owner,) = meta.owner_references
        assert (owner.api_version, owner.kind, owner.name, owner.controller) == ("v1", "Pod", name, True)
        (req,) = claim.spec.devices.requests
        assert req.name == "container-0-request-0" and req.exactly is not None
        assert (req.exactly.allocation_mode, req.exactly.count, req.exactly.device_class_name) == (
            "ExactCount",
            1,
            cls,
        )
        alloc = claim.status.allocation
        assert alloc is not None
        (result,) = alloc.devices.results
        assert (result.driver, result.pool, result.request) == (
            "gpu.nvidia.com",
            "worker-node-1",
            "container-0-request-0",
        )
        assert result.device.startswith(prefix)
        # the mig example's comment: the allocation is pinned to the node by metadata.name
        assert alloc.node_selector is not None
        (term,) = alloc.node_selector.node_selector_terms
        (field,) = term.match_fields
        assert (field.key, field.operator, tuple(field.values)) == ("metadata.name", "In", ("worker-node-1",))
        assert [r.uid for r in claim.status.reserved_for] == [pod.metadata.uid]


async def _gpu_cluster(cluster: Cluster) -> None:
    await cluster.apply(
        make_class("gpu.example.com", selectors=(), extended_resource_name=GPU),
        make_node("node-0"),
        make_slice("node-0", [make_device(f"gpu-{i}") for i in range(4)], driver="gpu.example.com"),
    )


def _gpu_pod(name: str, n: int, finalizers: tuple[str, ...] = ()) -> Pod:

    c = make_container("main", limits={GPU: n})
    p = make_pod(name, containers=(c,))
    meta = msgspec.structs.replace(p.metadata, uid="", finalizers=finalizers)
    return msgspec.structs.replace(p, metadata=meta)


async def test_failed_bind_deletes_the_special_claim_and_clears_the_status(cluster: Cluster) -> None:
    await _gpu_cluster(cluster)
    # a finalizer keeps the pod while it is being deleted: bind then refuses it, after PreBind
    await cluster.apply(_gpu_pod("doomed", 2, finalizers=("example.com/hold",)))
    svc = await cluster.make()
    await svc.start()  # the snapshot only: this test drives the saga itself
    pod = await cluster.get_pod("doomed")
    result = svc.core.schedule(pod)
    assert isinstance(result, Reserved) and result.extended is not None
    plan = PodSchedulingInput.of(result)
    assert plan.extended_claim is not None
    claim_name = plan.extended_claim.metadata.name
    subject = cluster.store.subject("Pod", "default", "doomed")
    await cluster.store.append(
        subject, deletion_requested("Pod", "2025-01-01T00:00:00Z"), expected_last_seq=None
    )
    await svc.snapshot.wait_position(await cluster.store.stream_last_seq())

    state = await svc.engine.start(POD_SCHEDULING, "ps-doomed", plan)
    assert state.status is SagaStatus.COMPENSATED, state
    types = [
        e.type
        for e in await cluster.store.events(cluster.store.subject("ResourceClaim", "default", claim_name))
    ]
    assert types == ["ResourceClaimApplied", "ClaimAllocated", "ResourceClaimDeleted"]
    pod_types = [e.type for e in await cluster.store.events(subject)]
    assert pod_types.count("PodExtendedResourceClaimStatusRecorded") == 2  # recorded, then cleared
    after = await cluster.get_pod("doomed")
    assert after.status.extended_resource_claim_status is None and not after.spec.node_name
    assert await _absent(cluster, "default", claim_name)
    # the devices are free again in the scheduler's books
    assert svc.core.cluster.special_claims == {} and not svc.core.cluster.assumed.claims
    # compensations are idempotent: running the saga again changes nothing
    again = await svc.engine.run("ps-doomed")
    assert again.status is SagaStatus.COMPENSATED and again.version == state.version
    await svc.snapshot.stop()
    await svc.store.close()


async def test_stale_special_claim_is_deleted_and_the_pod_scheduled_anew(cluster: Cluster) -> None:
    await _gpu_cluster(cluster)
    await cluster.apply(_gpu_pod("retry", 1))
    pod = await cluster.get_pod("retry")
    stale = ResourceClaim(
        metadata=ObjectMeta(
            name="retry-extended-resources-stale",
            namespace="default",
            generate_name="retry-extended-resources-",
            annotations={EXTENDED_RESOURCE_CLAIM_ANNOTATION: "true"},
            owner_references=(
                OwnerReference(
                    api_version="v1", kind="Pod", name="retry", uid=pod.metadata.uid, controller=True
                ),
            ),
        ),
        spec=ResourceClaimSpec(
            devices=DeviceClaim(
                requests=(
                    DeviceRequest(
                        name="container-0-request-0",
                        exactly=ExactDeviceRequest(device_class_name="gpu.example.com", count=1),
                    ),
                )
            )
        ),
    )
    await cluster.apply(stale)
    await cluster.start()
    bound = await _bound(cluster, "default", "retry")
    status = bound.status.extended_resource_claim_status
    assert status is not None and status.resource_claim_name != "retry-extended-resources-stale"
    assert await _absent(cluster, "default", "retry-extended-resources-stale")
    fresh = await _get_claim(cluster, "default", status.resource_claim_name)
    assert fresh.status.allocation is not None


async def test_saga_decided_by_one_instance_completes_in_another(cluster: Cluster) -> None:
    """A restarted or second scheduler resumes a PodScheduling saga with a special claim: it
    assumes the claim's devices from the saga input (the claim does not exist yet) and carries
    the decision out as made, name and uid included."""
    await _gpu_cluster(cluster)
    await cluster.apply(_gpu_pod("moved", 3))
    deciding = await cluster.make("scheduler-a")
    await deciding.start()
    result = deciding.core.schedule(await cluster.get_pod("moved"))
    assert isinstance(result, Reserved) and result.extended is not None
    plan = PodSchedulingInput.of(result)
    await deciding.snapshot.stop()
    await deciding.store.close()

    other = await cluster.make("scheduler-b")
    await other.start()
    state = await other.engine.start(POD_SCHEDULING, "ps-moved", plan)
    assert state.status is SagaStatus.COMPLETED, state
    pod = await _bound(cluster, "default", "moved")
    status = pod.status.extended_resource_claim_status
    assert plan.extended_claim is not None and status is not None
    assert status.resource_claim_name == plan.extended_claim.metadata.name
    claim = await _get_claim(cluster, "default", status.resource_claim_name)
    assert claim.metadata.uid == plan.extended_claim.metadata.uid
    (binding,) = plan.claims
    assert claim.status.allocation == binding.allocation
    # running the finished saga again appends nothing
    again = await other.engine.run("ps-moved")
    assert again.version == state.version
    await other.snapshot.stop()
    await other.store.close()


async def test_quota_on_claim_count_refuses_the_special_claim_until_a_claim_goes(cluster: Cluster) -> None:
    """Upstream creates the special claim through the API server, so ResourceQuota's
    ``count/resourceclaims.resource.k8s.io`` can refuse it at PreBind: the saga compensates, the pod
    gets a Warning and backs off, and it is scheduled once a claim is deleted."""
    await _gpu_cluster(cluster)
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "claims", "namespace": "default"},
        "spec": {"hard": {"count/resourceclaims.resource.k8s.io": "1"}},
    }
    user_claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "mine", "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "g", "exactly": {"deviceClassName": "gpu.example.com"}}]}},
    }
    results = await cluster.api.apply([quota, user_claim])
    assert [r.error for r in results] == [None, None]
    await cluster.apply(_gpu_pod("over", 1))
    svc = await cluster.start()

    async def refused() -> bool:
        assert svc.outcomes["compensated"] >= 1, svc.outcomes
        events, _ = await cluster.api.list("Event", namespace="default")
        messages = [e["message"] for e in events if e["reason"] == "FailedScheduling"]
        assert any(
            m.startswith('running PreBind plugin "DynamicResources": ')
            and "exceeded quota: claims, requested: count/resourceclaims.resource.k8s.io=1" in m
            for m in messages
        ), messages
        return True

    await assert_eventually(refused, timeout_s=15)
    pod = await cluster.get_pod("over")
    assert not pod.spec.node_name and pod.status.extended_resource_claim_status is None
    claims, _ = await cluster.api.list("ResourceClaim", namespace="default")
    assert [c["metadata"]["name"] for c in claims] == ["mine"]  # nothing created, nothing leaked

    (deleted,) = await cluster.api.delete([("ResourceClaim", "default", "mine")])
    assert deleted.error is None
    await _bound(cluster, "default", "over")
