"""Every domain event that writes an object outside its status is declared in the update strategy.

An apply keeps status, controllers' finalizers and ``strategy.SERVER_SET_FIELDS``; anything else a
domain event writes would be overwritten by the next apply of an unchanged manifest (issue 13:
PodBound's spec.nodeName was). This folds each registered domain reducer onto a full object and
checks what it changed; a reducer added without an entry here fails until it is audited.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from msgspec.structs import replace

from draflow.events.api import classic_v1alpha1 as cv
from draflow.events.api import core_v1 as c1
from draflow.events.api import resource_v1 as r1
from draflow.events.api.codec import decode_object
from draflow.events.api.coordination_v1 import Lease, LeaseSpec
from draflow.events.api.meta import Condition, ObjectMeta, OwnerReference
from draflow.events.dra import (
    DELETE_PROTECTION_FINALIZER,
    ClaimAllocated,
    ClaimDeallocated,
    ClaimReservationsReleased,
    ClaimReserved,
    PodBound,
    PodClaimStatusesRecorded,
    PodExtendedResourceClaimStatusRecorded,
    PodFailed,
    PodStarted,
    PodSucceeded,
    PodUnschedulable,
)
from draflow.events.envelope import Event
from draflow.events.node import (
    LeaseRenewed,
    NodeHeartbeatLost,
    NodeTainted,
    NodeUntainted,
    PodContainerStatusesReported,
    PodDisruptionTargeted,
)
from draflow.events.numeric import (
    NumericClaimAllocated,
    NumericClaimConditionRecorded,
    NumericClaimDeallocated,
    NumericClaimReservationsReleased,
    NumericClaimReserved,
)
from draflow.events.objects import OwnerReferencesRemoved
from draflow.projections.objects import _GENERIC, _REDUCERS, fold
from draflow.services.apiserver.strategy import (
    CONTROLLER_ITEMS,
    SERVER_SET_FIELDS,
    keep_server_set,
    merge_update,
)

_POD = decode_object(
    {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default", "uid": "u1", "labels": {"app": "a"}},
        "spec": {
            "containers": [
                {"name": "c", "image": "busybox", "resources": {"requests": {"example.com/gpu": "1"}}}
            ],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "t"}],
        },
    }
)
_CLAIM = decode_object(
    {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "default", "uid": "u2"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}},
    }
)
assert isinstance(_POD, c1.Pod) and isinstance(_CLAIM, r1.ResourceClaim)
POD: c1.Pod = _POD
CLAIM: r1.ResourceClaim = _CLAIM
ALLOCATION = r1.AllocationResult(
    devices=r1.DeviceAllocationResult(
        results=(r1.DeviceRequestAllocationResult(request="gpu", driver="d", pool="n1", device="gpu-0"),)
    )
)
CONSUMER = r1.ResourceClaimConsumerReference(resource="pods", name="p", uid="u1")
RESERVED = replace(
    CLAIM,
    metadata=replace(CLAIM.metadata, finalizers=(DELETE_PROTECTION_FINALIZER,)),
    status=r1.ResourceClaimStatus(allocation=ALLOCATION, reserved_for=(CONSUMER,)),
)
EXT = c1.PodExtendedResourceClaimStatus(
    request_mappings=(
        c1.ContainerExtendedResourceRequest(
            container_name="c", resource_name="example.com/gpu", request_name="r"
        ),
    ),
    resource_claim_name="p-extended-resources-x",
)

OWNED_CLAIM = replace(
    CLAIM,
    metadata=replace(
        CLAIM.metadata,
        owner_references=(OwnerReference(api_version="v1", kind="Pod", name="p", uid="u1"),),
    ),
)

NODE = c1.Node(metadata=ObjectMeta(name="n1", uid="u3"))
UNREACHABLE = c1.Taint(
    key="node.kubernetes.io/unreachable", effect="NoSchedule", time_added="2025-01-01T00:00:00Z"
)
TAINTED = replace(NODE, spec=replace(NODE.spec, taints=(UNREACHABLE,)))
LEASE = Lease(
    metadata=ObjectMeta(name="n1", namespace="kube-node-lease", uid="u4"),
    spec=LeaseSpec(holder_identity="n1", lease_duration_seconds=40),
)

# KEP-4381: a numeric (classic) claim, before and after its allocation
NUMERIC = cv.ResourceClaim(
    metadata=ObjectMeta(name="n", namespace="default", uid="u5"),
    spec=cv.ResourceClaimSpec(resource_class_name="frob", allocation_mode=cv.DELAYED),
    status=cv.ResourceClaimStatus(phase=cv.PENDING, user_limit=1),
)
NUMERIC_ALLOCATION = cv.NumericAllocation(
    node_name="n1",
    driver_name="frobnicator.example.com",
    api_version="counter.dra.config.k8s.io/v1alpha1",
    kind="Allocation",
    data={"instance": "i", "count": 1},
)
POD_REF = OwnerReference(api_version="v1", kind="Pod", name="p", uid="u1")
NUMERIC_ALLOCATED = fold(
    NUMERIC,
    "NumericClaimAllocated",
    NumericClaimAllocated(allocation=NUMERIC_ALLOCATION, consumer=POD_REF),
    3,
)

# every domain reducer: (the object before, the event)
AUDITED: dict[str, tuple[Any, Event]] = {
    "ClaimAllocated": (CLAIM, ClaimAllocated(allocation=ALLOCATION, node_name="n1", pod_uid="u1")),
    "ClaimReserved": (CLAIM, ClaimReserved(consumer=CONSUMER)),
    "ClaimReservationsReleased": (RESERVED, ClaimReservationsReleased(uids=("u1",))),
    "ClaimDeallocated": (RESERVED, ClaimDeallocated(reason="test")),
    "PodBound": (POD, PodBound(node_name="n1", at="2025-01-01T00:00:00Z")),
    "PodUnschedulable": (POD, PodUnschedulable(message="0/1 nodes are available")),
    "PodClaimStatusesRecorded": (
        POD,
        PodClaimStatusesRecorded(
            statuses=(c1.PodResourceClaimStatus(name="gpu", resource_claim_name="p-gpu"),)
        ),
    ),
    "PodExtendedResourceClaimStatusRecorded": (POD, PodExtendedResourceClaimStatusRecorded(status=EXT)),
    "PodStarted": (POD, PodStarted(at="2025-01-01T00:00:01Z", host_ip="10.0.0.1")),
    "PodFailed": (POD, PodFailed(reason="Error", message="boom")),
    "PodSucceeded": (POD, PodSucceeded()),
    "PodContainerStatusesReported": (POD, PodContainerStatusesReported(container_statuses=({"name": "c"},))),
    "OwnerReferencesRemoved": (OWNED_CLAIM, OwnerReferencesRemoved(owner_uids=("u1",))),
    "NodeTainted": (NODE, NodeTainted(taints=(UNREACHABLE,), reason="NodeStatusUnknown")),
    "NodeUntainted": (TAINTED, NodeUntainted(taints=(UNREACHABLE,), reason="NodeReady")),
    "NodeHeartbeatLost": (
        NODE,
        NodeHeartbeatLost(
            conditions=(c1.NodeCondition(type="Ready", status="Unknown", reason="NodeStatusUnknown"),)
        ),
    ),
    "PodDisruptionTargeted": (POD, PodDisruptionTargeted(reason="DeletionByTaintManager")),
    "LeaseRenewed": (LEASE, LeaseRenewed(renew_time="2025-01-01T00:00:10.000000Z")),
    "NumericClaimAllocated": (
        NUMERIC,
        NumericClaimAllocated(allocation=NUMERIC_ALLOCATION, consumer=POD_REF),
    ),
    "NumericClaimReserved": (
        NUMERIC_ALLOCATED,
        NumericClaimReserved(consumer=OwnerReference(api_version="v1", kind="Pod", name="q", uid="u9")),
    ),
    "NumericClaimReservationsReleased": (NUMERIC_ALLOCATED, NumericClaimReservationsReleased(uids=("u1",))),
    "NumericClaimDeallocated": (NUMERIC_ALLOCATED, NumericClaimDeallocated(reason="test")),
    "NumericClaimConditionRecorded": (
        NUMERIC,
        NumericClaimConditionRecorded(
            condition=Condition(
                type="NumericParameters", status="False", reason="TemplateFailed", message="m"
            )
        ),
    ),
}
# reducers of objects nobody applies (core/v1 Events aggregate into themselves)
# not domain facts: Kubernetes Events, and a custom object's status subresource write (its
# status lives in ``content``, so it has a reducer of its own)
NOT_APPLIED = frozenset({"KubeEventRecorded", "KubeEventDeleted", "CustomObjectStatusUpdated"})


def _domain_reducers() -> set[str]:
    generic = set(_GENERIC.values())
    return {
        name
        for name, fn in _REDUCERS.items()
        if fn not in generic and not fn.__module__.startswith("tests.") and name not in NOT_APPLIED
    }


def _changed(before: Any, after: Any, path: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    """Attribute paths (down to the first non-struct) whose values differ."""
    if before == after:
        return set()
    if isinstance(before, msgspec.Struct) and type(before) is type(after):
        out: set[tuple[str, ...]] = set()
        for f in before.__struct_fields__:
            out |= _changed(getattr(before, f), getattr(after, f), (*path, f))
        return out
    return {path}


def test_every_domain_reducer_is_audited() -> None:
    assert _domain_reducers() == set(AUDITED), (
        "a new reducer: list what it writes outside status in strategy.SERVER_SET_FIELDS, then audit it here"
    )


@pytest.mark.parametrize("event_type", sorted(AUDITED))
def test_domain_events_write_only_status_finalizers_and_server_set_fields(event_type: str) -> None:
    before, event = AUDITED[event_type]
    after = fold(before, event_type, event, 7)
    allowed = {("status",), ("metadata", "finalizers"), ("metadata", "resource_version")}
    # the garbage collector orphans a dependent; an apply whose manifest names no ownerReferences
    # keeps the stored ones (merge_update), so an orphaned object stays orphaned
    allowed.add(("metadata", "owner_references"))
    allowed |= set(SERVER_SET_FIELDS.get(before.KIND, ())) | set(CONTROLLER_ITEMS.get(before.KIND, ()))
    changed = _changed(before, after)
    assert changed, f"{event_type} changed nothing: the sample does not exercise it"
    assert {p for p in changed if not any(p[: len(a)] == a for a in allowed)} == set()


@pytest.mark.parametrize("event_type", sorted(AUDITED))
def test_reapplying_the_manifest_keeps_what_the_event_wrote(event_type: str) -> None:
    """The apiserver's update strategy onto the folded object, with the user's manifest."""
    before, event = AUDITED[event_type]
    after = fold(before, event_type, event, 7)
    manifest = {"Pod": POD, "ResourceClaim": CLAIM, "Node": NODE, "Lease": LEASE, cv.CLAIM_KIND: NUMERIC}[
        before.KIND
    ]
    assert merge_update(after, manifest, raw=manifest) == after


def test_server_set_fields_left_unset_keep_the_stored_value() -> None:
    bound = replace(POD, spec=replace(POD.spec, node_name="n1"))
    assert keep_server_set(bound, POD).spec.node_name == "n1"
    assert keep_server_set(bound, bound).spec.node_name == "n1"
    other = replace(POD, spec=replace(POD.spec, node_name="n2"))
    assert keep_server_set(bound, other).spec.node_name == "n2"  # set: the manifest's (validation refuses it)


def test_controller_taints_survive_an_apply_and_the_authors_taints_are_the_manifests() -> None:
    user = c1.Taint(key="gpu", effect="NoSchedule")
    stored = replace(NODE, spec=replace(NODE.spec, taints=(user, UNREACHABLE)))
    assert keep_server_set(stored, NODE).spec.taints == (UNREACHABLE,)  # the author's taint goes
    other = c1.Taint(key="fpga", effect="NoSchedule")
    with_other = replace(NODE, spec=replace(NODE.spec, taints=(other,)))
    assert keep_server_set(stored, with_other).spec.taints == (other, UNREACHABLE)
    named = replace(NODE, spec=replace(NODE.spec, taints=(replace(UNREACHABLE, value="x"),)))
    assert keep_server_set(stored, named).spec.taints == named.spec.taints  # named: the manifest's
