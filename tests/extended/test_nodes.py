"""Per-node decisions in mixed clusters, the KEP's scenario with the real allocator, 129 devices."""

from __future__ import annotations

import msgspec
import pytest

from events.api.codec import decode_object
from events.api.core_v1 import Node, Pod
from events.api.loader import load_manifests
from events.api.meta import ObjectMeta
from events.api.resource_v1 import (
    DeviceClaim,
    DeviceClass,
    ResourceClaim,
    ResourceClaimSpec,
    ResourcePool,
    ResourceSlice,
)
from services.apiserver.admission import admit, validate
from services.dra.extended import (
    MSG_CANNOT_FIT,
    MSG_STALE_CLAIM,
    ExtendedResourceIndex,
    build_requests,
    claim_for_create,
    decide_node,
    new_in_memory_claim,
    node_resources,
)
from services.dra.structured import AllocatedState, Allocator, InvalidInputError
from tests.extended.helpers import EXAMPLES, container, device_class, load, pod

GPU = "example.com/gpu"
INDEX = ExtendedResourceIndex.from_classes([device_class("gpu.example.com", GPU)])


def _decide(p: Pod, allocatable: dict[str, str | int | float]) -> tuple[str, str, tuple[str, ...]]:
    d = decide_node(p, new_in_memory_claim(p), allocatable, INDEX)
    return d.status, d.reason, d.device_plugin


def test_device_plugin_node_is_left_to_node_fit() -> None:
    p = pod(containers=(container("c", requests={GPU: 1}),))
    assert _decide(p, {GPU: "2"}) == ("skip", "", (GPU,))


def test_dra_node_gets_a_claim() -> None:
    p = pod(containers=(container("c", requests={GPU: 1}),))
    assert _decide(p, {"cpu": "4"})[0] == "dra"
    # allocatable present but 0 (device plugin gone) and a class maps it: DRA, as upstream
    assert _decide(p, {GPU: "0"})[0] == "dra"


def test_unmapped_resource_missing_on_node_does_not_fit() -> None:
    p = pod(containers=(container("c", requests={GPU: 1, "other.com/fpga": 1}),))
    d = decide_node(p, new_in_memory_claim(p), {"cpu": "4"}, INDEX)
    assert (d.status, d.reason, d.resource) == ("unschedulable", MSG_CANNOT_FIT, "other.com/fpga")
    assert _decide(p, {"other.com/fpga": "1"})[0] == "dra"


def test_mixed_pod_splits_per_resource() -> None:
    index = ExtendedResourceIndex.from_classes(
        [device_class("gpu.example.com", GPU), device_class("nic.example.com", "example.com/nic")]
    )
    p = pod(containers=(container("c", requests={GPU: 1, "example.com/nic": 1}),))
    d = decide_node(p, new_in_memory_claim(p), {GPU: "4"}, index)
    assert d.status == "dra" and d.device_plugin == (GPU,) and d.dra == {"example.com/nic": 1}
    assert d.claim is not None
    assert [r.exactly.device_class_name for r in d.claim.spec.devices.requests if r.exactly] == [
        "nic.example.com"
    ]


def test_no_claim_means_skip_and_stale_claim_is_unschedulable() -> None:
    p = pod(containers=(container("c", requests={GPU: 1}),))
    assert decide_node(p, None, {}, INDEX).status == "skip"
    d = decide_node(p, new_in_memory_claim(p), {}, INDEX)
    assert d.claim is not None
    stale = claim_for_create(d.claim)
    again = decide_node(p, stale, {}, INDEX)
    assert (again.status, again.reason) == ("unschedulable", MSG_STALE_CLAIM)


def test_129_devices_is_refused_with_the_claim_limit() -> None:
    p = pod("big", containers=(container("c", requests={GPU: 129}),))
    d = decide_node(p, new_in_memory_claim(p), {}, INDEX)
    assert d.status == "error"
    assert d.reason == (
        "pod default/big: extended resources backed by DRA: number of requested devices 129 "
        "exceeds the claim limit of 32"
    )
    # on a device-plugin node the same pod is node fit's business
    assert decide_node(p, new_in_memory_claim(p), {GPU: "200"}, INDEX).status == "skip"


def test_32_devices_is_still_a_claim() -> None:
    p = pod(containers=(container("c", requests={GPU: 20}), container("d", requests={GPU: 12})))
    assert decide_node(p, new_in_memory_claim(p), {}, INDEX).status == "dra"


# -- the KEP's scenario ---------------------------------------------------------------------


def _kep() -> tuple[DeviceClass, Node, Node, Pod]:
    (dc,) = load(EXAMPLES / "deviceclass.yaml")
    n_dra, n_plugin = load(EXAMPLES / "nodes.yaml")
    (dep,) = load(EXAMPLES / "deployment.yaml")
    assert isinstance(dc, DeviceClass) and isinstance(n_dra, Node) and isinstance(n_plugin, Node)
    spec = dep.spec.template.spec  # type: ignore[attr-defined]
    p = Pod(metadata=ObjectMeta(name="demo-7d9f", namespace="default", uid="uid-demo"), spec=spec)
    return dc, n_dra, n_plugin, p


def _slice(name: str) -> ResourceSlice:
    (rs,) = load(EXAMPLES / name)
    assert isinstance(rs, ResourceSlice)
    return rs


def test_kep_deployment_lands_on_either_node() -> None:
    dc, n_dra, n_plugin, p = _kep()
    index = ExtendedResourceIndex.from_classes([dc])
    claim = new_in_memory_claim(p)
    on_plugin = decide_node(p, claim, node_resources(n_plugin), index)
    assert on_plugin.status == "skip" and on_plugin.device_plugin == (GPU,)
    on_dra = decide_node(p, claim, node_resources(n_dra), index)
    assert on_dra.status == "dra" and on_dra.claim is not None
    rs = _slice("resourceslice-runnable.yaml")
    alloc = Allocator([rs], {dc.metadata.name: dc})
    result = alloc.allocate(n_dra, [on_dra.claim])
    assert result is not None
    (r,) = result[0].devices.results
    assert (r.request, r.driver, r.device) == ("container-0-request-0", "gpu.example.com", "gpu-0")
    assert alloc.allocate(n_plugin, [on_dra.claim]) is None  # no slice there


def test_leftover_devices_stay_available_to_resource_claims() -> None:
    dc, n_dra, _, p = _kep()
    index = ExtendedResourceIndex.from_classes([dc])
    rs = _slice("resourceslice-runnable.yaml")
    d = decide_node(p, new_in_memory_claim(p), node_resources(n_dra), index)
    assert d.claim is not None
    (first,) = Allocator([rs], {dc.metadata.name: dc}).allocate(n_dra, [d.claim]) or []
    taken = ResourceClaim(
        metadata=d.claim.metadata, spec=d.claim.spec, status=d.claim.status.__class__(allocation=first)
    )
    # plain ResourceClaims share the same 8 GPUs: the 7 left over are theirs, no static split
    state = AllocatedState.from_claims([taken])
    alloc = Allocator([rs], {dc.metadata.name: dc}, state)
    result = alloc.allocate(n_dra, [user_claim(dc.metadata.name, 7)])
    assert result is not None
    devices = sorted(x.device for x in result[0].devices.results)
    assert devices == [f"gpu-{i}" for i in range(1, 8)]
    assert alloc.allocate(n_dra, [user_claim(dc.metadata.name, 8)]) is None


def user_claim(class_name: str, count: int) -> ResourceClaim:
    request = {"name": "g", "exactly": {"deviceClassName": class_name, "count": count}}
    obj = decode_object(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "gpus", "namespace": "default"},
            "spec": {"devices": {"requests": [request]}},
        }
    )
    out = admit(obj)
    assert isinstance(out, ResourceClaim)
    return out


def test_kep_slice_as_written_fails_the_class_selector() -> None:
    """The KEP's devices have no ``type`` attribute its own DeviceClass selects on."""
    dc, n_dra, _, p = _kep()
    (raw,) = load_raw_slice()
    assert Allocator([raw], {dc.metadata.name: dc}).allocate(n_dra, []) == []
    # with only the missing pool added, the class selector fails on every device
    pool = ResourcePool(name=n_dra.metadata.name, resource_slice_count=1)
    rs = msgspec.structs.replace(raw, spec=msgspec.structs.replace(raw.spec, pool=pool))
    index = ExtendedResourceIndex.from_classes([dc])
    d = decide_node(p, new_in_memory_claim(p), node_resources(n_dra), index)
    assert d.claim is not None
    with pytest.raises(InvalidInputError, match="CEL runtime error: no such key: type"):
        Allocator([rs], {dc.metadata.name: dc}).allocate(n_dra, [d.claim])


def load_raw_slice() -> list[ResourceSlice]:
    """The KEP's slice as written: decodes, but validation wants spec.pool."""
    (r,) = load_manifests(EXAMPLES / "resourceslice.yaml")
    assert r.ok and isinstance(r.obj, ResourceSlice)
    errors = [str(e) for e in validate(r.obj)]
    assert any("spec.pool.name: Required value" in e for e in errors), errors
    return [r.obj]


def test_real_allocator_agrees_on_the_claim_limit() -> None:
    dc, n_dra, _, _ = _kep()
    index = ExtendedResourceIndex.from_classes([dc])
    p = pod("big", containers=(container("c", requests={GPU: 33}),))
    d = decide_node(p, new_in_memory_claim(p), {}, index)
    assert d.status == "error" and "33 exceeds the claim limit of 32" in d.reason
    requests, _ = build_requests(p, {GPU: 33}, index)
    claim = msgspec.structs.replace(
        new_in_memory_claim(p), spec=ResourceClaimSpec(devices=DeviceClaim(requests=requests))
    )
    alloc = Allocator([_slice("resourceslice-runnable.yaml")], {dc.metadata.name: dc})
    limit = "number of requested devices 33 exceeds the claim limit of 32"
    with pytest.raises(InvalidInputError, match=limit):
        alloc.allocate(n_dra, [claim])
