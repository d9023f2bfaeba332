"""The real-world extended-resource examples: dra-example-driver, NVIDIA, the website's class."""

from __future__ import annotations

import msgspec

from events.api.core_v1 import Node, NodeStatus, Pod
from events.api.meta import ObjectMeta
from events.api.resource_v1 import DeviceClass, ResourceSlice
from services.dra.extended import (
    MSG_CANNOT_FIT,
    ExtendedResourceIndex,
    decide_node,
    new_in_memory_claim,
    node_resources,
)
from services.dra.structured import Allocator
from tests.extended.helpers import REALWORLD, load

EXAMPLE = REALWORLD / "kubernetes-sigs__dra-example-driver"
NODE = Node(
    metadata=ObjectMeta(name="dra-example-driver-cluster-worker"),
    status=NodeStatus(allocatable={"cpu": "8", "pods": "110"}),
)


def _example() -> tuple[list[DeviceClass], list[ResourceSlice], dict[str, Pod]]:
    classes = [
        o
        for o in load(EXAMPLE / "deployments__helm__dra-example-driver__templates__deviceclass.rendered.yaml")
        if isinstance(o, DeviceClass)
    ]
    slices = [
        o for o in load(EXAMPLE / "README.md.extract-resourceslice-list.yaml") if isinstance(o, ResourceSlice)
    ]
    pods = {
        o.metadata.name: o
        for o in load(EXAMPLE / "demo__examples__extended-resource-request__extended-resource-request.yaml")
        if isinstance(o, Pod)
    }
    return classes, slices, pods


def _with_uid(p: Pod) -> Pod:
    return msgspec.structs.replace(
        p, metadata=msgspec.structs.replace(p.metadata, uid=f"uid-{p.metadata.name}")
    )


def test_example_driver_pod0_implicit_name_allocates() -> None:
    classes, slices, pods = _example()
    index = ExtendedResourceIndex.from_classes(classes)
    p = _with_uid(pods["pod0"])
    d = decide_node(p, new_in_memory_claim(p), node_resources(NODE), index)
    assert d.status == "dra" and d.claim is not None
    (req,) = d.claim.spec.devices.requests
    assert req.name == "container-0-request-0" and req.exactly is not None
    assert (req.exactly.device_class_name, req.exactly.count) == ("gpu.example.com", 1)
    (m,) = d.mappings
    assert (m.container_name, m.resource_name) == (
        "ctr0",
        "deviceclass.resource.kubernetes.io/gpu.example.com",
    )
    results = Allocator(slices, {c.metadata.name: c for c in classes}).allocate(NODE, [d.claim])
    assert results is not None
    (r,) = results[0].devices.results
    assert (r.driver, r.pool, r.request) == ("gpu.example.com", "dra-example-driver-cluster-worker", req.name)


def test_example_driver_pod1_pending_without_chart_option() -> None:
    classes, _, pods = _example()
    p = _with_uid(pods["pod1"])
    d = decide_node(
        p, new_in_memory_claim(p), node_resources(NODE), ExtendedResourceIndex.from_classes(classes)
    )
    assert (d.status, d.reason, d.resource) == ("unschedulable", MSG_CANNOT_FIT, "example.com/gpu")
    # --set deviceClass.extendedResourceName=example.com/gpu
    gpu = next(c for c in classes if c.metadata.name == "gpu.example.com")
    gpu = msgspec.structs.replace(
        gpu, spec=msgspec.structs.replace(gpu.spec, extended_resource_name="example.com/gpu")
    )
    index = ExtendedResourceIndex.from_classes([*classes, gpu])
    d = decide_node(p, new_in_memory_claim(p), node_resources(NODE), index)
    assert d.status == "dra"


def test_website_device_class_maps_its_extended_resource() -> None:
    (dc,) = load(
        REALWORLD
        / "kubernetes__website"
        / (
            "content__en__docs__concepts__resource-management__dynamic-resource-allocation__"
            "dra-features.md.extract-deviceclass-extended-resource.yaml"
        )
    )
    assert isinstance(dc, DeviceClass)
    index = ExtendedResourceIndex.from_classes([dc])
    assert index.class_for("example.com/gpu") == "gpu.example.com"
    assert index.class_for("deviceclass.resource.kubernetes.io/gpu.example.com") == "gpu.example.com"


def test_nvidia_classes_map_only_the_gpu_class_explicitly() -> None:
    classes = [
        o
        for o in load(
            REALWORLD
            / "NVIDIA__k8s-dra-driver-gpu"
            / "deployments__helm__dra-driver-nvidia-gpu__templates__deviceclasses.rendered.yaml"
        )
        if isinstance(o, DeviceClass)
    ]
    explicit = {
        k: v
        for k, v in ExtendedResourceIndex.from_classes(classes).mappings().items()
        if "deviceclass." not in k
    }
    assert explicit == {"nvidia.com/gpu": "gpu.nvidia.com"}
