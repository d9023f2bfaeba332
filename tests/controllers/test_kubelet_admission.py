"""Kubelet admission: a bound pod may only use claims reserved for it, owned by it, allocated."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec

from events.api.core_v1 import PodExtendedResourceClaimStatus
from services.dra.claimactions import RemoveReservedFor
from services.kubelet import (
    Admit,
    Reject,
    admit,
    failed_status,
    node_object,
    release_reservations,
    running_status,
)
from tests.builders import make_allocation, make_claim, make_pod

ALLOC = make_allocation(("gpu", "gpu-0"))
PREFIX = "Failed to prepare dynamic resources: "


def test_pod_without_claims_is_admitted() -> None:
    assert admit(make_pod(node="n1"), []) == Admit(claims=())


def test_reserved_allocated_claims_are_admitted_in_spec_order() -> None:
    pod = make_pod("p", claims={"a": "shared"}, template_claims={"b": "t"}, statuses={"b": "gen"}, node="n1")
    shared = make_claim("shared", allocation=ALLOC, reserved_for=["p"])
    gen = make_claim("gen", allocation=ALLOC, reserved_for=["p"], owner_pod=pod)
    result = admit(pod, [gen, shared], registered_drivers={"gpu.example.com"})
    assert isinstance(result, Admit)
    assert [c.metadata.name for c in result.claims] == ["shared", "gen"]
    assert isinstance(admit(pod, {"shared": shared, "gen": gen}), Admit)


def test_claim_not_reserved_for_the_pod_is_rejected_with_upstream_message() -> None:
    pod = make_pod("p", claims={"gpu": "c"}, node="n1")
    claim = make_claim("c", allocation=ALLOC, reserved_for=["other"])
    assert admit(pod, [claim]) == Reject(
        reason="FailedPrepareDynamicResources",
        message=PREFIX + "pod p (uid-p) is not allowed to use ResourceClaim c (uid-c)",
    )


def test_template_claim_must_exist_be_recorded_and_be_owned() -> None:
    pod = make_pod("p", template_claims={"gpu": "t"}, node="n1")
    not_created = admit(pod, [])
    assert isinstance(not_created, Reject)
    assert not_created.message == PREFIX + 'pod "default/p": ResourceClaim not created yet'

    recorded = make_pod("p", template_claims={"gpu": "t"}, statuses={"gpu": "gen"}, node="n1")
    missing = admit(recorded, [])
    assert isinstance(missing, Reject) and 'resourceclaims.resource.k8s.io "gen" not found' in missing.message

    foreign = make_claim("gen", allocation=ALLOC, reserved_for=["p"])
    not_owned = admit(recorded, [foreign])
    assert isinstance(not_owned, Reject)
    assert not_owned.message == PREFIX + (
        "ResourceClaim default/gen was not created for pod default/p (pod is not owner)"
    )


def test_unneeded_template_claim_is_skipped() -> None:
    pod = make_pod("p", template_claims={"gpu": "t"}, statuses={"gpu": None}, node="n1")
    assert admit(pod, []) == Admit(claims=())


def test_unallocated_claim_and_unregistered_driver_are_rejected() -> None:
    pod = make_pod("p", claims={"gpu": "c"}, node="n1")
    unallocated = make_claim("c", reserved_for=["p"])
    result = admit(pod, [unallocated])
    assert isinstance(result, Reject) and result.message.endswith("ResourceClaim c: not allocated")
    allocated = make_claim("c", allocation=ALLOC, reserved_for=["p"])
    unregistered = admit(pod, [allocated], registered_drivers=set())
    assert isinstance(unregistered, Reject)
    assert "DRA driver gpu.example.com is not registered" in unregistered.message


def test_claims_of_other_namespaces_do_not_count() -> None:
    pod = make_pod("p", claims={"gpu": "c"}, node="n1")
    elsewhere = make_claim("c", namespace="other", allocation=ALLOC, reserved_for=["p"])
    assert isinstance(admit(pod, [elsewhere]), Reject)


def test_extended_resource_claim_is_checked_too() -> None:
    pod = make_pod("p", node="n1")
    status = msgspec.structs.replace(
        pod.status, extended_resource_claim_status=PodExtendedResourceClaimStatus(resource_claim_name="ext")
    )
    pod = msgspec.structs.replace(pod, status=status)
    ext = make_claim("ext", allocation=ALLOC, reserved_for=["p"])
    result = admit(pod, [ext])
    assert isinstance(result, Admit) and [c.metadata.name for c in result.claims] == ["ext"]
    assert isinstance(admit(pod, [make_claim("ext", allocation=ALLOC)]), Reject)


def test_release_reservations_after_unprepare() -> None:
    pod = make_pod("p", claims={"a": "c1", "b": "c2"}, node="n1")
    c1 = make_claim("c1", allocation=ALLOC, reserved_for=["p", "q"])
    c2 = make_claim("c2", allocation=ALLOC, reserved_for=["q"])
    assert release_reservations(pod, [c1, c2]) == [
        RemoveReservedFor(namespace="default", claim_name="c1", claim_uid="uid-c1", uids=("uid-p",))
    ]


def test_node_and_pod_status_builders() -> None:
    now = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
    node = node_object("n1", now)
    assert node.metadata.labels["kubernetes.io/hostname"] == "n1"
    assert node.status.conditions[0].type == "Ready" and node.status.conditions[0].status == "True"
    pod = make_pod("p", node="n1")
    running = running_status(pod, now)
    assert running.phase == "Running" and running.start_time == "2026-03-01T12:00:00Z"
    assert running.container_statuses[0]["state"]["running"]["startedAt"] == "2026-03-01T12:00:00Z"
    again = running_status(msgspec.structs.replace(pod, status=running), datetime(2026, 3, 1, 13, tzinfo=UTC))
    assert again.start_time == "2026-03-01T12:00:00Z"
    failed = failed_status(pod, "FailedPrepareDynamicResources", "nope")
    assert (failed.phase, failed.reason, failed.message) == (
        "Failed",
        "FailedPrepareDynamicResources",
        "nope",
    )
