"""The DRA invariants, rule by rule, on objects built in memory (no I/O)."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from draflow.events.api.core_v1 import ResourceQuotaStatus
from draflow.events.api.resource_v1 import DeviceRequestAllocationResult
from draflow.services.dra.invariants import (
    CLAIM_OF_DELETED_POD,
    DEVICE_ONCE,
    PREPARED_ON_NODE,
    QUOTA_USAGE,
    RESERVED_FOR_GONE_POD,
    RUNNING_POD_CLAIMS,
    State,
    claims_of_gone_pods,
    devices_allocated_twice,
    evaluate,
    pod_claim_findings,
    prepared_mismatches,
    quota_mismatches,
    reservations_of_gone_pods,
    running_pod_claims,
    shareable_devices,
)
from tests.builders import exact, make_allocation, make_claim, make_device, make_pod, make_quota, make_slice

pytestmark = pytest.mark.kep4381


def keyed(*objs: Any) -> dict[tuple[str, str], Any]:
    return {(o.metadata.namespace, o.metadata.name): o for o in objs}


def test_a_device_in_two_claims_is_found_once_naming_both() -> None:
    a = make_claim("a", exact(), allocation=make_allocation("gpu-0"))
    b = make_claim("b", exact(), allocation=make_allocation("gpu-0"))
    c = make_claim("c", exact(), allocation=make_allocation("gpu-1"))
    (found,) = devices_allocated_twice(keyed(a, b, c))
    assert found.rule is DEVICE_ONCE
    assert found.message == (
        "device gpu.example.com/node-1/gpu-0 is allocated to claim default/a and to claim default/b"
    )
    assert found.objects == (("ResourceClaim", "default", "a"), ("ResourceClaim", "default", "b"))


def test_admin_access_shares_and_shareable_devices_may_be_in_several_claims() -> None:
    alloc = make_allocation("gpu-0")
    admin_result = msgspec.structs.replace(alloc.devices.results[0], admin_access=True)
    admin = make_claim(
        "admin",
        exact(),
        allocation=msgspec.structs.replace(
            alloc, devices=msgspec.structs.replace(alloc.devices, results=(admin_result,))
        ),
    )
    plain = make_claim("plain", exact(), allocation=alloc)
    assert devices_allocated_twice(keyed(admin, plain)) == []

    def shared(name: str, share: str) -> object:
        r = DeviceRequestAllocationResult(
            request="gpu", driver="gpu.example.com", pool="node-1", device="nic-0", share_id=share
        )
        devices = msgspec.structs.replace(alloc.devices, results=(r,))
        return make_claim(name, exact(), allocation=msgspec.structs.replace(alloc, devices=devices))

    assert devices_allocated_twice(keyed(shared("s1", "1"), shared("s2", "2"))) == []

    multi = msgspec.structs.replace(make_device("gpu-0"), allow_multiple_allocations=True)
    slices = [make_slice("node-1", [multi, make_device("gpu-1")])]
    assert shareable_devices(slices) == {("gpu.example.com", "node-1", "gpu-0")}
    twice = keyed(plain, make_claim("again", exact(), allocation=alloc))
    assert devices_allocated_twice(twice, shareable_devices(slices)) == []
    assert len(devices_allocated_twice(twice)) == 1


def test_a_running_pod_must_hold_each_claim_allocated_and_reserved() -> None:
    pod = make_pod("p", claims={"gpu": "c"}, phase="Running", node_name="node-1")
    ok = make_claim("c", exact(), allocation=make_allocation("gpu-0"), reserved_for=[pod])
    assert running_pod_claims(keyed(pod), keyed(ok)) == []

    unreserved = make_claim("c", exact(), allocation=make_allocation("gpu-0"))
    deallocated = make_claim("c", exact(), reserved_for=[pod])
    messages = {
        "not reserved for it": unreserved,
        "not allocated": deallocated,
    }
    for why, claim in messages.items():
        (found,) = running_pod_claims(keyed(pod), keyed(claim))
        assert found.rule is RUNNING_POD_CLAIMS and found.key == ("uid-p", "c")
        assert found.message == f"pod default/p is Running on node-1 but its claim c is {why}"
    (missing,) = running_pod_claims(keyed(pod), {})
    assert missing.message.endswith("its claim c does not exist")


def test_pods_not_running_or_terminating_and_classic_claims_are_not_held_to_it() -> None:
    claims = keyed(make_claim("c", exact()))
    pending = make_pod("a", claims={"gpu": "c"})
    terminating = make_pod("b", claims={"gpu": "c"}, phase="Running", node_name="n", deleting=True)
    done = make_pod("d", claims={"gpu": "c"}, phase="Succeeded", node_name="n")
    assert running_pod_claims(keyed(pending, terminating, done), claims) == []
    classic = make_pod("e", claims={"gpu": "c"}, phase="Running", node_name="n")
    assert pod_claim_findings(classic, claims, frozenset({("default", "c")})) == []


def test_a_template_claim_not_recorded_for_a_running_pod_is_named() -> None:
    pod = make_pod("p", template_claims={"gpu": "t"}, phase="Running", node_name="n")
    (found,) = pod_claim_findings(pod, {})
    assert "ResourceClaim not created yet" in found.message
    not_needed = make_pod("q", template_claims={"gpu": "t"}, statuses={"gpu": None}, phase="Running")
    assert pod_claim_findings(not_needed, {}) == []


def test_claims_prepared_on_a_node_the_pod_is_not_bound_to() -> None:
    bound = make_pod("p", node_name="node-1")
    unbound = make_pod("q")
    prepared = {"node-1": {"uid-p": (("default", "c"),), "uid-q": (("default", "d"),), "uid-gone": ()}}
    (found,) = prepared_mismatches(keyed(bound, unbound), prepared)
    assert found.rule is PREPARED_ON_NODE and found.key == ("node-1", "uid-q")
    assert (
        found.message
        == "node node-1 holds claims d prepared for pod default/q, which is not bound to any node"
    )
    moved = make_pod("q", node_name="node-2")
    (found,) = prepared_mismatches(keyed(moved), prepared)
    assert found.message.endswith("which is bound to node-2")


def test_reservations_and_allocations_outliving_their_pod() -> None:
    pod = make_pod("p")
    gone = make_pod("gone")
    claim = make_claim(
        "c", exact(), allocation=make_allocation("gpu-0"), reserved_for=[pod, gone], owner=gone
    )
    (res,) = reservations_of_gone_pods(keyed(pod), keyed(claim))
    assert res.rule is RESERVED_FOR_GONE_POD and res.rule.settles
    assert res.message == "claim default/c is reserved for pod gone (uid uid-gone), which is gone"
    (own,) = claims_of_gone_pods(keyed(pod), keyed(claim))
    assert own.rule is CLAIM_OF_DELETED_POD
    assert own.message.startswith("claim default/c is still allocated, but pod gone (uid uid-gone)")
    deallocated = make_claim("c", exact(), owner=gone)
    assert claims_of_gone_pods(keyed(pod), keyed(deallocated)) == []
    assert claims_of_gone_pods(keyed(pod, gone), keyed(claim)) == []


def test_quota_used_must_equal_the_sum() -> None:
    quota = msgspec.structs.replace(
        make_quota("q", {"count/resourceclaims.resource.k8s.io": 4}),
        status=ResourceQuotaStatus(used={"count/resourceclaims.resource.k8s.io": "1"}),
    )
    assert (
        quota_mismatches(keyed(quota), {("default", "q"): {"count/resourceclaims.resource.k8s.io": "1"}})
        == []
    )
    (found,) = quota_mismatches(
        keyed(quota), {("default", "q"): {"count/resourceclaims.resource.k8s.io": "2"}}
    )
    assert found.rule is QUOTA_USAGE
    assert (
        found.message
        == "ResourceQuota default/q reports used count/resourceclaims.resource.k8s.io: 1 (sum 2)"
    )


def test_evaluate_runs_every_rule() -> None:
    pod = make_pod("p", claims={"gpu": "c"}, phase="Running", node_name="node-1")
    other = make_claim("d", exact(), allocation=make_allocation("gpu-0"), reserved_for=["gone"])
    claim = make_claim("c", exact(), allocation=make_allocation("gpu-0"))
    found = evaluate(State(pods=keyed(pod), claims=keyed(claim, other)))
    assert sorted(f.rule.id for f in found) == ["device-once", "reserved-for-gone-pod", "running-pod-claims"]
    assert evaluate(State()) == []
