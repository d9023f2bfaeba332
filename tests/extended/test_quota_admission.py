"""Quota admission: refusals in Kubernetes' words for every key, nothing charged twice."""

from __future__ import annotations

from collections.abc import Sequence

from services.apiserver.admission.quota import check_quota
from services.dra.extended import ExtendedResourceIndex
from services.dra.quota.state import QuotaState
from tests.extended.helpers import container, device_class, pod
from tests.extended.quota_helpers import bound, claim, exact, first, quota, special_claim

GPU = "example.com/gpu"
CLASS = device_class("gpu.example.com", GPU, "2025-01-01T00:00:00Z")


def _state(*objs: object) -> QuotaState:
    state = QuotaState()
    state.apply(CLASS)
    for o in objs:
        state.apply(o)  # type: ignore[arg-type]
    return state


def _one(errors: Sequence[object]) -> str:
    assert len(errors) == 1, errors
    return str(errors[0])


def test_pod_over_extended_resource_quota_is_refused() -> None:
    q = quota("gpu", {"requests.example.com/gpu": 2})
    state = _state(q, pod("a", containers=(container("c", requests={GPU: 1}),)))
    new = pod("b", containers=(container("c", requests={GPU: 2}),))
    assert _one(check_quota(new, [q], state)) == (
        "Pod default/b: forbidden: exceeded quota: gpu, requested: requests.example.com/gpu=2, "
        "used: requests.example.com/gpu=1, limited: requests.example.com/gpu=2"
    )
    fits = pod("b", containers=(container("c", requests={GPU: 1}),))
    assert check_quota(fits, [q], state) == []


def test_claim_count_quota() -> None:
    q = quota("claims", {"count/resourceclaims.resource.k8s.io": 1})
    state = _state(q, claim("first", [exact("a", "gpu.example.com")]))
    assert _one(check_quota(claim("second", [exact("a", "gpu.example.com")]), [q], state)) == (
        "ResourceClaim default/second: forbidden: exceeded quota: claims, "
        "requested: count/resourceclaims.resource.k8s.io=1, "
        "used: count/resourceclaims.resource.k8s.io=1, limited: count/resourceclaims.resource.k8s.io=1"
    )


def test_device_class_quota_counts_all_mode_as_32() -> None:
    q = quota("dev", {"gpu.example.com.deviceclass.resource.k8s.io/devices": 31})
    msg = _one(check_quota(claim("c", [exact("a", "gpu.example.com", mode="All")]), [q], _state(q)))
    assert "requested: gpu.example.com.deviceclass.resource.k8s.io/devices=32" in msg
    assert "limited: gpu.example.com.deviceclass.resource.k8s.io/devices=31" in msg


def test_first_available_charges_the_largest_subrequest() -> None:
    q = quota("dev", {"gpu.example.com.deviceclass.resource.k8s.io/devices": 2})
    c = claim("c", [first("a", ("s1", "gpu.example.com", 1), ("s2", "gpu.example.com", 2))])
    assert check_quota(c, [q], _state(q)) == []  # 2, not 1 + 2


def test_implicit_request_key_limits_claims_and_pods() -> None:
    q = quota("impl", {"requests.deviceclass.resource.kubernetes.io/gpu.example.com": 2})
    state = _state(q, claim("c", [exact("a", "gpu.example.com", 2)]))
    msg = _one(check_quota(pod("p", containers=(container("c", requests={GPU: 1}),)), [q], state))
    assert msg.endswith(
        "exceeded quota: impl, requested: requests.deviceclass.resource.kubernetes.io/gpu.example.com=1, "
        "used: requests.deviceclass.resource.kubernetes.io/gpu.example.com=2, "
        "limited: requests.deviceclass.resource.kubernetes.io/gpu.example.com=2"
    )


def test_claims_are_held_to_the_extended_resource_quota_too() -> None:
    q = quota("gpu", {"requests.example.com/gpu": 1})
    msg = _one(check_quota(claim("c", [exact("a", "gpu.example.com", 2)]), [q], _state(q)))
    assert "requested: requests.example.com/gpu=2" in msg


def test_pods_are_held_to_the_device_class_quota_too() -> None:
    q = quota("dev", {"gpu.example.com.deviceclass.resource.k8s.io/devices": 1})
    msg = _one(check_quota(pod("p", containers=(container("c", requests={GPU: 2}),)), [q], _state(q)))
    assert "requested: gpu.example.com.deviceclass.resource.k8s.io/devices=2" in msg


def test_special_claim_passes_when_its_pod_already_paid() -> None:
    hard = {"requests.example.com/gpu": 2, "gpu.example.com.deviceclass.resource.k8s.io/devices": 2}
    q = quota("gpu", hard)
    p = pod("web", containers=(container("c", requests={GPU: 2}),))
    assert check_quota(p, [q], _state(q)) == []
    index = ExtendedResourceIndex.from_classes([CLASS])
    sc, maps = special_claim(p, index, "web-extended-resources-x")
    state = _state(q, p)
    assert check_quota(sc, [q], state) == []  # exactly at the limit: no double charge
    state.apply(sc)
    state.apply(bound(p, sc.metadata.name, maps))
    another = pod("more", containers=(container("c", requests={GPU: 1}),))
    assert "used: gpu.example.com.deviceclass.resource.k8s.io/devices=2" in _one(
        check_quota(another, [q], state)
    )


def test_other_namespaces_and_unrelated_objects_are_ignored() -> None:
    q = quota("gpu", {"requests.example.com/gpu": 0}, namespace="other")
    assert check_quota(pod("p", containers=(container("c", requests={GPU: 1}),)), [q], _state(q)) == []
    assert check_quota(CLASS, [q], _state(q)) == []


def test_update_charges_only_the_difference() -> None:
    q = quota("claims", {"count/resourceclaims.resource.k8s.io": 1})
    c = claim("c", [exact("a", "gpu.example.com")])
    state = _state(q, c)
    assert check_quota(c, [q], state, old=c) == []
