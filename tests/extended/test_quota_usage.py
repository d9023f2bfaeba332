"""Quota charging table: claims (ExactCount, All, firstAvailable), pods, the special claim."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from services.dra.extended import ExtendedResourceIndex
from services.dra.quota.usage import claim_usage, pod_usage, verified_owner
from tests.extended.helpers import container, device_class, pod
from tests.extended.quota_helpers import bound, claim, exact, first, special_claim

GPU = "example.com/gpu"
INDEX = ExtendedResourceIndex.from_classes(
    [device_class("gpu.example.com", GPU), device_class("tpu.example.com")]
)
COUNT = "count/resourceclaims.resource.k8s.io"
GPU_DEV = "gpu.example.com.deviceclass.resource.k8s.io/devices"
TPU_DEV = "tpu.example.com.deviceclass.resource.k8s.io/devices"
GPU_IMPL = "requests.deviceclass.resource.kubernetes.io/gpu.example.com"
TPU_IMPL = "requests.deviceclass.resource.kubernetes.io/tpu.example.com"
GPU_EXPL = "requests.example.com/gpu"


def _gpu(n: int) -> dict[str, int]:
    return {COUNT: 1, GPU_DEV: n, GPU_IMPL: n, GPU_EXPL: n}


@pytest.mark.parametrize(
    ("requests", "expected"),
    [
        ([exact("a", "gpu.example.com")], _gpu(1)),  # count defaulted to 1
        ([exact("a", "gpu.example.com", 3)], _gpu(3)),
        ([exact("a", "gpu.example.com", mode="All")], _gpu(32)),
        ([exact("a", "gpu.example.com", 2), exact("b", "gpu.example.com", 5)], _gpu(7)),
        # firstAvailable: the largest subrequest per class, not the sum (1 then 2 -> 2, not 3)
        ([first("a", ("s1", "gpu.example.com", 1), ("s2", "gpu.example.com", 2))], _gpu(2)),
        ([first("a", ("s1", "gpu.example.com", 2), ("s2", "gpu.example.com", 1))], _gpu(2)),
        ([first("a", ("s1", "gpu.example.com", 1), ("s2", "gpu.example.com", None))], _gpu(32)),
        (
            [first("a", ("s1", "gpu.example.com", 2), ("s2", "tpu.example.com", 4))],
            {COUNT: 1, GPU_DEV: 2, GPU_IMPL: 2, GPU_EXPL: 2, TPU_DEV: 4, TPU_IMPL: 4},
        ),
        # a class without extendedResourceName: no explicit requests.* key
        ([exact("a", "tpu.example.com", 4)], {COUNT: 1, TPU_DEV: 4, TPU_IMPL: 4}),
        # a class nobody defined (yet) is still charged by its name
        (
            [exact("a", "nope", 2)],
            {
                COUNT: 1,
                "nope.deviceclass.resource.k8s.io/devices": 2,
                "requests.deviceclass.resource.kubernetes.io/nope": 2,
            },
        ),
    ],
)
def test_claim_charging_table(requests: list[dict[str, Any]], expected: dict[str, int]) -> None:
    assert claim_usage(claim("c", requests), INDEX) == expected


def test_unknown_allocation_mode_is_not_charged() -> None:
    c = claim("c", [exact("a", "gpu.example.com", 2)])
    req = c.spec.devices.requests[0]
    assert req.exactly is not None
    odd = msgspec.structs.replace(req, exactly=msgspec.structs.replace(req.exactly, allocation_mode="Some"))
    c = msgspec.structs.replace(
        c,
        spec=msgspec.structs.replace(
            c.spec, devices=msgspec.structs.replace(c.spec.devices, requests=(odd,))
        ),
    )
    assert claim_usage(c, INDEX) == {COUNT: 1}


def test_pod_usage_counts_init_peak_and_syncs_class_keys() -> None:
    p = pod(
        init=(container("i", requests={GPU: 3}),),
        containers=(container("a", requests={GPU: 1}), container("b", limits={GPU: 1})),
    )
    assert pod_usage(p, INDEX) == {
        "count/pods": 1,
        "pods": 1,
        **{k: 3 for k in (GPU_DEV, GPU_IMPL, GPU_EXPL)},
    }
    assert pod_usage(p, INDEX, sync_classes=False) == {"count/pods": 1, "pods": 1, GPU_EXPL: 3}


def test_pod_usage_unmapped_and_terminal() -> None:
    p = pod(containers=(container("a", requests={"vendor.com/fpga": 2, "cpu": "1"}),))
    assert pod_usage(p, INDEX) == {"count/pods": 1, "pods": 1, "requests.vendor.com/fpga": 2}
    done = msgspec.structs.replace(p, status=msgspec.structs.replace(p.status, phase="Succeeded"))
    assert pod_usage(done, INDEX) == {"count/pods": 1}


def test_implicit_request_charges_explicit_key_too() -> None:
    p = pod(containers=(container("a", requests={"deviceclass.resource.kubernetes.io/gpu.example.com": 2}),))
    assert pod_usage(p, INDEX) == {"count/pods": 1, "pods": 1, GPU_DEV: 2, GPU_IMPL: 2, GPU_EXPL: 2}


def test_special_claim_is_not_double_charged() -> None:
    p = pod("web", containers=(container("a", requests={GPU: 2}),))
    sc, maps = special_claim(p, INDEX, "web-extended-resources-abcde")
    p = bound(p, sc.metadata.name, maps)
    pods = {("default", "web"): p}
    owner = verified_owner(sc, pods, [sc])
    assert owner is p
    assert claim_usage(sc, INDEX, owner) == {COUNT: 1}
    # upstream's numbers: devices charged by the claim, the explicit name by the pod only
    assert claim_usage(sc, INDEX, owner, sync_classes=False) == {COUNT: 1, GPU_DEV: 2, GPU_IMPL: 2}


def test_special_claim_not_named_by_the_pod_pays_in_full() -> None:
    p = pod("web", containers=(container("a", requests={GPU: 2}),))
    sc, maps = special_claim(p, INDEX, "web-extended-resources-abcde")
    p = bound(p, "web-extended-resources-other", maps)
    assert verified_owner(sc, {("default", "web"): p}, [sc]) is None
    assert claim_usage(sc, INDEX, None) == _gpu(2)


def test_before_prebind_only_the_oldest_special_claim_is_exempt() -> None:
    p = pod("web", containers=(container("a", requests={GPU: 1}),))
    old, _ = special_claim(p, INDEX, "web-extended-resources-b", "2025-01-01T00:00:00Z")
    tie, _ = special_claim(p, INDEX, "web-extended-resources-a", "2025-01-01T00:00:00Z")
    new, _ = special_claim(p, INDEX, "web-extended-resources-0", "2025-02-01T00:00:00Z")
    pods = {("default", "web"): p}
    claims = [old, tie, new]
    assert verified_owner(tie, pods, claims) is p  # same time, smaller name
    assert verified_owner(old, pods, claims) is None
    assert verified_owner(new, pods, claims) is None


def test_owner_must_match_uid_and_exist() -> None:
    p = pod("web", containers=(container("a", requests={GPU: 1}),))
    sc, _ = special_claim(p, INDEX, "web-extended-resources-x")
    other = msgspec.structs.replace(p, metadata=msgspec.structs.replace(p.metadata, uid="uid-new"))
    assert verified_owner(sc, {("default", "web"): other}, [sc]) is None
    assert verified_owner(sc, {}, [sc]) is None
    plain = claim("plain", [exact("a", "gpu.example.com")])
    assert verified_owner(plain, {("default", "web"): p}, [plain]) is None
