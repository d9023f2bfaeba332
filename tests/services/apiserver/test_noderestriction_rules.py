"""NodeRestriction's rules, pure (an object index, no bus): what node-2 may and may not do.

The end-to-end refusals on an authenticated server are in tests/security/test_noderestriction.py;
here every branch of the rules, Kubernetes' messages included.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from draflow.events.api.classic_v1alpha1 import ResourceClaim as ClassicClaim
from draflow.events.api.classic_v1alpha1 import ResourceClaimStatus as ClassicStatus
from draflow.events.api.meta import ObjectMeta, OwnerReference
from draflow.events.api.resource_v1 import ResourcePool, ResourceSlice, ResourceSliceSpec
from draflow.events.dra import (
    ClaimDeallocated,
    ClaimReservationsReleased,
    PodBound,
    PodResourcesPrepared,
    PodStarted,
)
from draflow.events.node import LeaseRenewed
from draflow.events.objects import object_applied, status_updated
from draflow.projections.objects import ObjectIndex
from draflow.services.apiserver.noderestriction import NodeRestriction, decode_events
from draflow.services.runtime.protocol import (
    AppendEventsRequest,
    ApplyItem,
    ApplyRequest,
    DeleteItem,
    DeleteRequest,
    FinalizeRequest,
    StatusError,
    StatusRequest,
)
from tests.builders import make_allocation, make_claim, make_pod


def index_with(*objs: Any) -> ObjectIndex:
    index = ObjectIndex()
    for seq, obj in enumerate(objs, start=1):
        ev = object_applied(obj)
        index.apply(obj.KIND, obj.metadata.namespace, obj.metadata.name, type(ev).type_name(), ev, seq)
    return index


MINE = make_pod("mine", node_name="node-2")
THEIRS = make_pod("theirs", node_name="node-1")
CLAIM = make_claim("gpu", reserved_for=["mine", "theirs"])
LAST = make_claim("last", reserved_for=["mine"])
CLASSIC = ClassicClaim(
    metadata=msgspec.structs.replace(make_claim("classic").metadata),
    status=ClassicStatus(
        phase="Allocated",
        reserved_for=(
            OwnerReference(api_version="v1", kind="Pod", name="mine", uid="uid-mine"),
            OwnerReference(api_version="v1", kind="Pod", name="theirs", uid="uid-theirs"),
        ),
    ),
)
RULES = NodeRestriction(index_with(MINE, THEIRS, CLAIM, LAST, CLASSIC))


def refused(verb: str, req: Any) -> str:
    with pytest.raises(StatusError) as info:
        RULES.admit("node-2", verb, req)
    assert info.value.status.code == 403, info.value.status
    return info.value.status.message


def append(kind: str, name: str, *events: Any) -> AppendEventsRequest:
    return AppendEventsRequest(
        kind=kind,
        name=name,
        namespace="" if kind == "Node" else "default",
        events=[msgspec.to_builtins(e) for e in events],
    )


def test_reads_and_events_are_open() -> None:
    for verb in ("get", "list", "event"):
        RULES.admit("node-2", verb, None)


def test_pod_facts_only_for_its_own_pods() -> None:
    RULES.admit("node-2", "append", append("Pod", "mine", PodStarted(at="now")))
    assert refused("append", append("Pod", "theirs", PodStarted(at="now"))) == (
        'pods "theirs" is forbidden: node "node-2" can only update pod status for pods with '
        "spec.nodeName set to itself"
    )
    assert "cannot prepare resources for node" in refused(
        "append", append("Pod", "mine", PodResourcesPrepared(node_name="node-1"))
    )
    assert 'cannot update resource "pods"' in refused(
        "append", append("Pod", "mine", PodBound(node_name="node-2"))
    )


def test_claims_only_its_pods_reservations_and_the_last_one_deallocates() -> None:
    RULES.admit(
        "node-2", "append", append("ResourceClaim", "gpu", ClaimReservationsReleased(uids=("uid-mine",)))
    )
    assert "can only release reservations of pods bound to itself" in refused(
        "append", append("ResourceClaim", "gpu", ClaimReservationsReleased(uids=("uid-theirs",)))
    )
    # releasing its pod leaves theirs: no deallocation
    assert "by releasing its last reservation" in refused(
        "append",
        append("ResourceClaim", "gpu", ClaimReservationsReleased(uids=("uid-mine",)), ClaimDeallocated()),
    )
    RULES.admit(
        "node-2",
        "append",
        append("ResourceClaim", "last", ClaimReservationsReleased(uids=("uid-mine",)), ClaimDeallocated()),
    )
    assert "by releasing its last reservation" in refused(
        "append", append("ResourceClaim", "last", ClaimDeallocated())
    )
    # the last reservation leaving in the deallocation's own fact (one single append)
    RULES.admit("node-2", "append", append("ResourceClaim", "last", ClaimDeallocated(released=("uid-mine",))))
    assert "by releasing its last reservation" in refused(
        "append", append("ResourceClaim", "gpu", ClaimDeallocated(released=("uid-mine",)))
    )
    assert "can only release reservations of pods bound to itself" in refused(
        "append", append("ResourceClaim", "gpu", ClaimDeallocated(released=("uid-mine", "uid-theirs")))
    )


def test_classic_claims_only_drop_its_pods() -> None:
    mine_dropped = msgspec.structs.replace(CLASSIC.status, reserved_for=CLASSIC.status.reserved_for[1:])
    RULES.admit(
        "node-2",
        "append",
        append("ClassicResourceClaim", "classic", status_updated("ClassicResourceClaim", mine_dropped)),
    )
    theirs_dropped = msgspec.structs.replace(CLASSIC.status, reserved_for=CLASSIC.status.reserved_for[:1])
    assert "release reservations of pods bound to itself" in refused(
        "append",
        append("ClassicResourceClaim", "classic", status_updated("ClassicResourceClaim", theirs_dropped)),
    )
    other_change = msgspec.structs.replace(mine_dropped, phase="Pending")
    assert "cannot update" in refused(
        "append",
        append("ClassicResourceClaim", "classic", status_updated("ClassicResourceClaim", other_change)),
    )


def test_its_lease_and_node_only() -> None:
    lease = AppendEventsRequest(
        kind="Lease",
        name="node-2",
        namespace="kube-node-lease",
        events=[msgspec.to_builtins(LeaseRenewed(renew_time="now"))],
    )
    RULES.admit("node-2", "append", lease)
    other = msgspec.structs.replace(lease, name="node-1")
    assert "same name as the requesting node" in refused("append", other)
    RULES.admit("node-2", "status", StatusRequest(kind="Node", name="node-2", status={}))
    assert refused("status", StatusRequest(kind="Node", name="node-1", status={})) == (
        'nodes "node-1" is forbidden: node "node-2" is not allowed to modify node "node-1"'
    )
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1"}}
    assert "not allowed to modify node" in refused("apply", ApplyRequest(items=[ApplyItem(manifest=node)]))
    assert 'cannot update resource "deployments" in API group "apps"' in refused(
        "apply",
        ApplyRequest(
            items=[
                ApplyItem(
                    manifest={
                        "apiVersion": "apps/v1",
                        "kind": "Deployment",
                        "metadata": {"name": "d", "namespace": "default"},
                    }
                )
            ]
        ),
    )
    with pytest.raises(StatusError, match="each item must be an object"):
        RULES.admit("node-2", "apply", ApplyRequest(items=[ApplyItem(manifest=["not", "an", "object"])]))


def test_deletes_finalizers_and_status_of_pods() -> None:
    RULES.admit(
        "node-2", "delete", DeleteRequest(items=[DeleteItem(kind="Pod", name="mine", namespace="default")])
    )
    RULES.admit("node-2", "delete", DeleteRequest(items=[DeleteItem(kind="Node", name="node-2")]))
    assert "can only delete pods" in refused(
        "delete", DeleteRequest(items=[DeleteItem(kind="Pod", name="theirs", namespace="default")])
    )
    assert "cannot delete resource" in refused(
        "delete", DeleteRequest(items=[DeleteItem(kind="ResourceClaim", name="gpu", namespace="default")])
    )
    RULES.admit("node-2", "finalize", FinalizeRequest(kind="Pod", name="mine", namespace="default"))
    assert "can only update pods" in refused(
        "finalize", FinalizeRequest(kind="Pod", name="theirs", namespace="default")
    )
    assert "cannot update resource" in refused(
        "finalize",
        FinalizeRequest(
            kind="ResourceClaim",
            name="gpu",
            namespace="default",
            remove=["resource.kubernetes.io/delete-protection"],
        ),
    )
    assert "cannot update resource" in refused(
        "status", StatusRequest(kind="Deployment", name="d", status={})
    )


def test_unknown_events_and_verbs() -> None:
    with pytest.raises(StatusError, match="unknown event type"):
        decode_events([{"type": "NoSuchThing"}])
    with pytest.raises(StatusError, match="invalid PodStarted"):
        decode_events([{"type": "PodStarted", "at": 5}])
    with pytest.raises(StatusError, match="no events"):
        RULES.admit("node-2", "append", append("Pod", "mine"))
    with pytest.raises(StatusError, match="unknown verb"):
        RULES.admit("node-2", "scale", None)


def test_a_node_plugin_reports_the_status_of_its_own_devices_only() -> None:
    """KEP-4817 through the node's API: ``status.devices`` entries of devices whose pool is on the
    node; nothing else of the claim's status, no device of another node."""

    def slice_on(node: str) -> ResourceSlice:
        return ResourceSlice(
            metadata=ObjectMeta(name=f"{node}-gpu"),
            spec=ResourceSliceSpec(driver="gpu.example.com", node_name=node, pool=ResourcePool(name=node)),
        )

    alloc = make_allocation(("a", "gpu-0"), pool="node-2")
    remote = make_allocation(("a", "gpu-0"), pool="node-1")
    claim = make_claim("shared", allocation=alloc, reserved_for=["mine"])
    elsewhere = make_claim("remote", allocation=remote, reserved_for=["theirs"])
    rules = NodeRestriction(
        index_with(MINE, THEIRS, claim, elsewhere, slice_on("node-1"), slice_on("node-2"))
    )
    ready = {"type": "Ready", "status": "True", "reason": "Up", "lastTransitionTime": "2026-03-01T12:00:00Z"}
    entry = {"driver": "gpu.example.com", "pool": "node-2", "device": "gpu-0", "conditions": [ready]}
    status = {**msgspec.to_builtins(claim.status), "devices": [entry]}
    rules.admit(
        "node-2",
        "status",
        StatusRequest(kind="ResourceClaim", name="shared", namespace="default", status=status),
    )

    def refused_here(node: str, name: str, st: dict[str, Any]) -> str:
        with pytest.raises(StatusError) as info:
            rules.admit(
                node, "status", StatusRequest(kind="ResourceClaim", name=name, namespace="default", status=st)
            )
        assert info.value.status.code == 403
        return info.value.status.message

    # the same device from another node's credential
    assert refused_here("node-1", "shared", status) == (
        'resourceclaims.resource.k8s.io "shared" is forbidden: node "node-1" can only update the status of '
        "devices on itself, not gpu.example.com/node-2/gpu-0"
    )
    other = {**msgspec.to_builtins(elsewhere.status), "devices": [{**entry, "pool": "node-1"}]}
    assert "not gpu.example.com/node-1/gpu-0" in refused_here("node-2", "remote", other)
    # anything else of the status: no
    unreserved = {**status, "reservedFor": []}
    assert refused_here("node-2", "shared", unreserved).endswith(
        'node "node-2" can only update status.devices of a ResourceClaim'
    )


class _NoScan(ObjectIndex):
    """Fails a lookup that lists a whole kind: a kubelet's write would then cost in proportion to
    the cluster's pods or slices."""

    def items(self, kind: str, namespace: str | None = None) -> list[Any]:
        raise AssertionError(f"scanned every {kind}")

    def values(self, kind: str) -> Any:
        raise AssertionError(f"scanned every {kind}")


def test_a_kubelets_release_and_device_status_look_up_its_own_pods_and_slices_by_key() -> None:
    """The rules read the node's pods and slices from secondary indexes of the object cache,
    kept current after the rules were built (a pod bound later, a pod moved off the node)."""
    index = _NoScan()
    others: list[Any] = [make_pod(f"p{i}", node_name=f"node-{i % 7 + 3}") for i in range(50)]
    for seq, obj in enumerate([*others, CLAIM], start=1):
        ev = object_applied(obj)
        index.apply(obj.KIND, obj.metadata.namespace, obj.metadata.name, type(ev).type_name(), ev, seq)
    rules = NodeRestriction(index)
    release = append("ResourceClaim", "gpu", ClaimReservationsReleased(uids=("uid-mine",)))
    with pytest.raises(StatusError):
        rules.admit("node-2", "append", release)  # pod "mine" is not in the index yet
    ev = object_applied(MINE)
    index.apply("Pod", "default", "mine", type(ev).type_name(), ev, 100)
    rules.admit("node-2", "append", release)
    moved = msgspec.structs.replace(MINE, spec=msgspec.structs.replace(MINE.spec, node_name="node-1"))
    ev = object_applied(moved)
    index.apply("Pod", "default", "mine", type(ev).type_name(), ev, 101)
    with pytest.raises(StatusError):
        rules.admit("node-2", "append", release)
    slc = ResourceSlice(
        metadata=ObjectMeta(name="node-2-gpu"),
        spec=ResourceSliceSpec(
            driver="gpu.example.com", node_name="node-2", pool=ResourcePool(name="node-2")
        ),
    )
    ev = object_applied(slc)
    index.apply("ResourceSlice", "", "node-2-gpu", type(ev).type_name(), ev, 102)
    claim = make_claim("shared", allocation=make_allocation(("a", "gpu-0"), pool="node-2"))
    ev = object_applied(claim)
    index.apply("ResourceClaim", "default", "shared", type(ev).type_name(), ev, 103)
    entry = {"driver": "gpu.example.com", "pool": "node-2", "device": "gpu-0"}
    status = {**msgspec.to_builtins(claim.status), "devices": [entry]}
    rules.admit(
        "node-2",
        "status",
        StatusRequest(kind="ResourceClaim", name="shared", namespace="default", status=status),
    )
