"""The special claim: request names, mappings, init containers, ownership, PreBind shapes."""

from __future__ import annotations

import textwrap

import msgspec
import yaml

from events.api.codec import decode_object
from events.api.core_v1 import Pod, PodExtendedResourceClaimStatus
from events.api.meta import ObjectMeta
from events.api.resource_v1 import DeviceClass, ResourceClaim
from services.dra.extended import (
    EXTENDED_RESOURCE_CLAIM_ANNOTATION,
    IN_MEMORY_CLAIM_NAME,
    ExtendedResourceIndex,
    claim_for_create,
    claim_status,
    decide_node,
    find_extended_resource_claim,
    is_in_memory,
    new_in_memory_claim,
    pod_requests,
    wants_dra,
)
from tests.extended.helpers import REALWORLD, container, device_class, load, pod

GPU = "example.com/gpu"
IMPLICIT = "deviceclass.resource.kubernetes.io/gpu.example.com"
INDEX = ExtendedResourceIndex.from_classes([device_class("gpu.example.com", GPU)])


def _requests(p: Pod, index: ExtendedResourceIndex = INDEX) -> dict[str, tuple[str, int]]:
    d = decide_node(p, new_in_memory_claim(p), {}, index)
    assert d.status == "dra", d
    assert d.claim is not None
    return {
        r.name: (r.exactly.device_class_name, r.exactly.count)
        for r in d.claim.spec.devices.requests
        if r.exactly is not None and r.exactly.allocation_mode == "ExactCount"
    }


def _mappings(p: Pod) -> list[tuple[str, str, str]]:
    d = decide_node(p, new_in_memory_claim(p), {}, INDEX)
    return [(m.container_name, m.resource_name, m.request_name) for m in d.mappings]


def test_request_index_is_position_among_sorted_request_names() -> None:
    c = container(
        "main",
        requests={"memory": "1Gi", "cpu": "1", GPU: 2, IMPLICIT: 1},
    )
    # sorted: cpu, deviceclass.resource.kubernetes.io/..., example.com/gpu, memory
    assert _requests(pod(containers=(c,))) == {
        "container-0-request-1": ("gpu.example.com", 1),
        "container-0-request-2": ("gpu.example.com", 2),
    }
    assert _mappings(pod(containers=(c,))) == [
        ("main", IMPLICIT, "container-0-request-1"),
        ("main", GPU, "container-0-request-2"),
    ]


def test_limits_count_as_requests_like_api_defaulting() -> None:
    p = pod(containers=(container("c", limits={GPU: 3}),))
    assert pod_requests(p) == {GPU: 3}
    assert _requests(p) == {"container-0-request-0": ("gpu.example.com", 3)}


def test_container_index_runs_over_init_then_regular() -> None:
    sidecar = container("side", requests={GPU: 1}, sidecar=True)
    p = pod(init=(sidecar,), containers=(container("a"), container("b", requests={GPU: 2})))
    assert _requests(p) == {
        "container-0-request-0": ("gpu.example.com", 1),
        "container-2-request-0": ("gpu.example.com", 2),
    }
    assert pod_requests(p) == {GPU: 3}


def test_init_container_reuses_devices_of_later_containers() -> None:
    p = pod(init=(container("init", requests={GPU: 1}),), containers=(container("main", requests={GPU: 1}),))
    assert _requests(p) == {"container-1-request-0": ("gpu.example.com", 1)}
    assert _mappings(p) == [("main", GPU, "container-1-request-0"), ("init", GPU, "container-1-request-0")]
    assert pod_requests(p) == {GPU: 1}


def test_init_container_asks_only_for_the_shortfall() -> None:
    p = pod(init=(container("init", requests={GPU: 3}),), containers=(container("main", requests={GPU: 1}),))
    assert _requests(p) == {
        "container-0-request-0": ("gpu.example.com", 2),
        "container-1-request-0": ("gpu.example.com", 1),
    }
    assert _mappings(p) == [
        ("main", GPU, "container-1-request-0"),
        ("init", GPU, "container-1-request-0"),
        ("init", GPU, "container-0-request-0"),
    ]
    assert pod_requests(p) == {GPU: 3}


def test_plain_init_containers_share_the_largest_request() -> None:
    p = pod(
        init=(container("i0", requests={GPU: 1}), container("i1", requests={GPU: 2})),
        containers=(container("main", requests={"cpu": "1"}),),
    )
    assert _requests(p) == {"container-1-request-0": ("gpu.example.com", 2)}
    assert _mappings(p) == [("i0", GPU, "container-1-request-0"), ("i1", GPU, "container-1-request-0")]
    assert pod_requests(p) == {GPU: 2}


def test_requests_sorted_by_name_as_strings() -> None:
    cs = tuple(container(f"c{i}", requests={GPU: 1}) for i in range(11))
    names = list(_requests(pod(containers=cs)))
    assert names == sorted(names)
    assert names[:3] == ["container-0-request-0", "container-1-request-0", "container-10-request-0"]


def test_in_memory_claim_shape() -> None:
    p = pod("demo")
    c = new_in_memory_claim(p)
    assert c.metadata.name == IN_MEMORY_CLAIM_NAME and is_in_memory(c)
    assert c.metadata.generate_name == "demo-extended-resources-"
    assert c.metadata.annotations == {EXTENDED_RESOURCE_CLAIM_ANNOTATION: "true"}
    (ref,) = c.metadata.owner_references
    assert (ref.api_version, ref.kind, ref.name, ref.uid) == ("v1", "Pod", "demo", "uid-demo")
    assert ref.controller is True and ref.block_owner_deletion is True
    assert new_in_memory_claim(p) == c  # deterministic (replay gives the same claim)


def test_find_existing_claim_needs_annotation_and_controller_ref() -> None:
    p = pod("demo")
    mine = claim_for_create(new_in_memory_claim(p))
    named = msgspec.structs.replace(
        mine, metadata=msgspec.structs.replace(mine.metadata, name="demo-extended-resources-x")
    )
    other_pod = claim_for_create(new_in_memory_claim(pod("other")))
    plain = ResourceClaim(metadata=ObjectMeta(name="x", namespace="default"))
    assert find_extended_resource_claim(p, [plain, other_pod, named]) is named
    assert find_extended_resource_claim(p, [plain, other_pod]) is None


def test_claim_for_create_and_pod_status() -> None:
    p = pod("demo", containers=(container("ctr", requests={GPU: 1}),))
    d = decide_node(p, new_in_memory_claim(p), {}, INDEX)
    assert d.claim is not None
    created = claim_for_create(d.claim)
    assert created.metadata.name == "" and created.metadata.uid == ""
    assert created.spec == d.claim.spec
    st = claim_status("demo-extended-resources-abcde", d.mappings)
    assert st.resource_claim_name == "demo-extended-resources-abcde"
    assert [(m.container_name, m.resource_name, m.request_name) for m in st.request_mappings] == [
        ("ctr", GPU, "container-0-request-0")
    ]


def test_zero_and_unmapped_requests_do_not_want_dra() -> None:
    assert not wants_dra(pod(containers=(container("c", requests={GPU: 0}),)), INDEX)
    assert not wants_dra(pod(containers=(container("c", requests={"other.com/x": 1}),)), INDEX)
    assert wants_dra(pod(containers=(container("c", requests={IMPLICIT: 1}),)), INDEX)


def _commented_yaml(text: str, start: str, stop: str) -> dict[str, object]:
    """The YAML an example shows in comments, from the line ``start`` up to ``stop``."""
    body: list[str] = []
    on = False
    for line in text.splitlines():
        if not line.startswith("#"):
            continue
        raw = line[1:]
        if raw.strip().startswith(start):
            on = True
        elif on and stop in raw:
            break
        if on:
            body.append(raw)
    doc = yaml.safe_load(textwrap.dedent("\n".join(body)))
    assert isinstance(doc, dict)
    return doc


def _check_nvidia_example(file: str, classes: list[DeviceClass]) -> None:
    text = (REALWORLD / "NVIDIA__k8s-dra-driver-gpu" / file).read_text()
    objs = load(REALWORLD / "NVIDIA__k8s-dra-driver-gpu" / file)
    classes = classes + [o for o in objs if isinstance(o, DeviceClass)]
    (p,) = [o for o in objs if isinstance(o, Pod)]
    p = msgspec.structs.replace(p, metadata=msgspec.structs.replace(p.metadata, uid="uid-x"))
    index = ExtendedResourceIndex.from_classes(classes)
    d = decide_node(p, new_in_memory_claim(p), {"cpu": "8", "pods": "110"}, index)
    assert d.status == "dra" and d.claim is not None
    expected_doc = _commented_yaml(text, "apiVersion: resource.k8s.io/v1", "pod status")
    expected_doc.pop("status", None)
    meta = expected_doc["metadata"]
    assert isinstance(meta, dict)
    meta.pop("name")  # random suffix chosen by the API server
    expected = decode_object(expected_doc)
    assert isinstance(expected, ResourceClaim)
    got = claim_for_create(d.claim)
    assert got.spec == expected.spec
    assert got.metadata.generate_name == expected.metadata.generate_name
    assert got.metadata.annotations == expected.metadata.annotations
    (ref,), (want,) = got.metadata.owner_references, expected.metadata.owner_references
    assert (ref.kind, ref.name, ref.controller) == (want.kind, want.name, want.controller)
    status_doc = _commented_yaml(text, "extendedResourceClaimStatus:", "---")
    want_status = decode_object(
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}, "status": status_doc}
    )
    assert isinstance(want_status, Pod)
    ws = want_status.status.extended_resource_claim_status
    assert isinstance(ws, PodExtendedResourceClaimStatus)
    assert claim_status(ws.resource_claim_name, d.mappings) == ws


def test_nvidia_gpu_full_example_matches_documented_claim() -> None:
    classes = [
        o
        for o in load(
            REALWORLD
            / "NVIDIA__k8s-dra-driver-gpu"
            / "deployments__helm__dra-driver-nvidia-gpu__templates__deviceclasses.rendered.yaml"
        )
        if isinstance(o, DeviceClass)
    ]
    _check_nvidia_example("demo__specs__extended-resources__gpu-full.yaml", classes)


def test_nvidia_mig_example_matches_documented_claim() -> None:
    _check_nvidia_example("demo__specs__extended-resources__mig-1g-12gb.yaml", [])
