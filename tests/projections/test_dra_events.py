"""The DRA domain events fold into claims and pods as upstream controllers would write them."""

from __future__ import annotations

import pytest

from draflow.events.api.core_v1 import Pod, PodResourceClaimStatus
from draflow.events.api.resource_v1 import ResourceClaim
from draflow.events.codec import decode, encode, make_envelope
from draflow.events.dra import (
    DELETE_PROTECTION_FINALIZER,
    ClaimAllocated,
    ClaimDeallocated,
    ClaimReservationsReleased,
    ClaimReserved,
    PodBound,
    PodClaimStatusesRecorded,
    PodFailed,
    PodStarted,
    PodSucceeded,
    PodUnschedulable,
)
from draflow.projections.objects import fold
from tests.builders import make_allocation, make_claim, make_pod, pod_ref

pytestmark = pytest.mark.kep4381


def _claim_fold(claim: ResourceClaim | None, *events: object) -> ResourceClaim | None:
    seq = 10
    for ev in events:
        seq += 1
        claim = fold(claim, type(ev).type_name(), ev, seq)  # type: ignore[attr-defined]
    return claim


def _pod_fold(pod: Pod | None, *events: object) -> Pod | None:
    seq = 10
    for ev in events:
        seq += 1
        pod = fold(pod, type(ev).type_name(), ev, seq)  # type: ignore[attr-defined]
    return pod


def test_claim_allocate_reserve_release_deallocate() -> None:
    alloc = make_allocation(("gpu", "gpu-0"))
    claim = _claim_fold(
        make_claim("c"),
        ClaimAllocated(allocation=alloc, node_name="node-1", pod_uid="uid-p"),
        ClaimReserved(consumer=pod_ref("p")),
        ClaimReserved(consumer=pod_ref("p")),
        ClaimReserved(consumer=pod_ref("q")),
    )
    assert claim is not None
    assert claim.status.allocation == alloc
    assert claim.metadata.finalizers == (DELETE_PROTECTION_FINALIZER,)
    assert [r.uid for r in claim.status.reserved_for] == ["uid-p", "uid-q"]
    assert claim.metadata.resource_version == "14"
    claim = _claim_fold(claim, ClaimReservationsReleased(uids=("uid-p", "uid-q")))
    assert claim is not None and claim.status.reserved_for == ()
    claim = _claim_fold(claim, ClaimDeallocated(reason="Unreserve"))
    assert claim is not None
    assert claim.status.allocation is None
    assert claim.metadata.finalizers == ()
    assert _claim_fold(None, ClaimDeallocated(reason="x")) is None


def test_claim_deallocated_with_its_released_consumers_folds_as_the_old_pair() -> None:
    """One fact instead of ``ClaimReservationsReleased`` + ``ClaimDeallocated`` in a batch: the
    same claim either way (logs written before fold as they did)."""
    alloc = make_allocation(("gpu", "gpu-0"))
    reserved = _claim_fold(
        make_claim("c"),
        ClaimAllocated(allocation=alloc, node_name="node-1", consumer=pod_ref("p")),
        ClaimReserved(consumer=pod_ref("q")),
    )
    one = _claim_fold(reserved, ClaimDeallocated(reason="NoConsumers", released=("uid-p", "uid-q")))
    pair = _claim_fold(
        reserved,
        ClaimReservationsReleased(uids=("uid-p", "uid-q")),
        ClaimDeallocated(reason="NoConsumers"),
    )
    assert one is not None and pair is not None
    assert one.status == pair.status and one.metadata.finalizers == pair.metadata.finalizers == ()
    assert one.status.reserved_for == () and one.status.allocation is None


def test_pod_lifecycle_conditions() -> None:
    pod = _pod_fold(
        make_pod("p"),
        PodUnschedulable(message="0/1 nodes are available: 1 cannot allocate all claims.", at="t0"),
    )
    assert pod is not None
    (cond,) = pod.status.conditions
    assert (cond.type, cond.status, cond.reason) == ("PodScheduled", "False", "Unschedulable")
    assert cond.message.startswith("0/1 nodes")
    pod = _pod_fold(
        pod,
        PodClaimStatusesRecorded(statuses=(PodResourceClaimStatus(name="gpu", resource_claim_name="p-gpu"),)),
        PodBound(node_name="node-1", at="t1"),
        PodStarted(at="t2", pod_ip="10.0.0.1"),
    )
    assert pod is not None
    assert pod.spec.node_name == "node-1"
    assert pod.status.resource_claim_statuses[0].resource_claim_name == "p-gpu"
    conds = {c.type: c for c in pod.status.conditions}
    assert conds["PodScheduled"].status == "True" and conds["PodScheduled"].last_transition_time == "t1"
    assert conds["Ready"].status == "True" and pod.status.phase == "Running"
    assert pod.status.start_time == "t2"
    failed = _pod_fold(pod, PodFailed(reason="UnexpectedAdmissionError", message="boom", at="t3"))
    assert failed is not None and failed.status.phase == "Failed"
    assert failed.status.reason == "UnexpectedAdmissionError"
    done = _pod_fold(pod, PodSucceeded(at="t3"))
    assert done is not None and done.status.phase == "Succeeded"
    assert {c.type: c.status for c in done.status.conditions}["Ready"] == "False"


def test_events_roundtrip_through_the_codec() -> None:
    ev = ClaimAllocated(allocation=make_allocation(("gpu", "gpu-0")), node_name="n", pod_uid="u")
    env = make_envelope(ev, id="e1", subject="draflow.ev.ResourceClaim.default.c", actor="scheduler")
    back = decode(encode(env))
    assert back.data == ev


def test_claim_allocated_with_its_consumer_is_allocation_and_reservation_in_one_fact() -> None:
    """PreBind's one append: the allocation and the pod in ``reservedFor`` (idempotent per uid);
    an allocation written before ``consumer`` existed, with its ``ClaimReserved``, folds the same."""
    alloc = make_allocation(("gpu", "gpu-0"))
    one = _claim_fold(
        make_claim("c"),
        ClaimAllocated(allocation=alloc, node_name="node-1", pod_uid="uid-p", consumer=pod_ref("p")),
    )
    two = _claim_fold(
        make_claim("c"),
        ClaimAllocated(allocation=alloc, node_name="node-1", pod_uid="uid-p"),
        ClaimReserved(consumer=pod_ref("p")),
    )
    assert one is not None and two is not None
    assert one.status == two.status and one.metadata.finalizers == two.metadata.finalizers
    assert [r.uid for r in one.status.reserved_for] == ["uid-p"]
    already = _claim_fold(
        make_claim("c", reserved_for=[pod_ref("p")]),
        ClaimAllocated(allocation=alloc, consumer=pod_ref("p")),
    )
    assert already is not None and [r.uid for r in already.status.reserved_for] == ["uid-p"]
