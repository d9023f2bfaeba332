"""The wire format: a response of draflow's kubelet decodes with messages built, field by field,
from the released upstream ``api.proto`` (k8s.io/kubelet v0.36: field numbers and types as
published), in a descriptor pool of their own, not from draflow's copy. Also the size of a large
``List`` answer against gRPC's default 4 MiB receive limit."""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from draflow.services.kubelet.devices import DeviceManager
from draflow.services.kubelet.podresources import encode
from draflow.services.kubelet.podresources.view import ClaimDevice, ClaimView, ContainerView, PodView

pytestmark = pytest.mark.kep3695

F = descriptor_pb2.FieldDescriptorProto
STRING, INT64, UINT64, MESSAGE = F.TYPE_STRING, F.TYPE_INT64, F.TYPE_UINT64, F.TYPE_MESSAGE
OPT, REP = F.LABEL_OPTIONAL, F.LABEL_REPEATED

# message -> [(field, number, type, label, message type)], as in upstream's released file
UPSTREAM: dict[str, list[tuple[str, int, int, int, str]]] = {
    "ListPodResourcesResponse": [("pod_resources", 1, MESSAGE, REP, "PodResources")],
    "PodResources": [
        ("name", 1, STRING, OPT, ""),
        ("namespace", 2, STRING, OPT, ""),
        ("containers", 3, MESSAGE, REP, "ContainerResources"),
    ],
    "ContainerResources": [
        ("name", 1, STRING, OPT, ""),
        ("devices", 2, MESSAGE, REP, "ContainerDevices"),
        ("cpu_ids", 3, INT64, REP, ""),
        ("memory", 4, MESSAGE, REP, "ContainerMemory"),
        ("dynamic_resources", 5, MESSAGE, REP, "DynamicResource"),
    ],
    "ContainerMemory": [("memory_type", 1, STRING, OPT, ""), ("size", 2, UINT64, OPT, "")],
    "ContainerDevices": [("resource_name", 1, STRING, OPT, ""), ("device_ids", 2, STRING, REP, "")],
    "DynamicResource": [
        ("claim_name", 2, STRING, OPT, ""),
        ("claim_namespace", 3, STRING, OPT, ""),
        ("claim_resources", 4, MESSAGE, REP, "ClaimResource"),
    ],
    "ClaimResource": [
        ("cdi_devices", 1, MESSAGE, REP, "CDIDevice"),
        ("driver_name", 2, STRING, OPT, ""),
        ("pool_name", 3, STRING, OPT, ""),
        ("device_name", 4, STRING, OPT, ""),
        ("share_id", 5, STRING, OPT, ""),
    ],
    "CDIDevice": [("name", 1, STRING, OPT, "")],
    "GetPodResourcesResponse": [("pod_resources", 1, MESSAGE, OPT, "PodResources")],
    "AllocatableResourcesResponse": [("devices", 1, MESSAGE, REP, "ContainerDevices")],
}


def upstream_messages() -> dict[str, Any]:
    file = descriptor_pb2.FileDescriptorProto(
        name="upstream/podresources/v1/api.proto", package="v1", syntax="proto3"
    )
    for name, fields in UPSTREAM.items():
        msg = file.message_type.add(name=name)
        for field, number, type_, label, type_name in fields:
            f = msg.field.add(name=field, number=number, type=type_, label=label)
            if type_name:
                f.type_name = f".v1.{type_name}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return {n: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"v1.{n}")) for n in UPSTREAM}


POD = PodView(
    "pod0",
    "ns",
    (
        ContainerView(
            "ctr0",
            (("example.com/gpu", ("gpu-0", "gpu-1")),),
            (
                ClaimView(
                    "pod0-gpu-x7k2p",
                    "ns",
                    (
                        ClaimDevice(
                            "gpu.example.com",
                            "node-1",
                            "gpu-3",
                            ("k8s.gpu.example.com/gpu=common", "k8s.gpu.example.com/gpu=u-gpu-3"),
                        ),
                        ClaimDevice("gpu.example.com", "node-1", "gpu-4", (), share_id="4f1c"),
                    ),
                ),
            ),
        ),
    ),
)


def test_list_response_decodes_with_upstream_field_numbers() -> None:
    up = upstream_messages()
    decoded = up["ListPodResourcesResponse"].FromString(encode.list_response([POD]).SerializeToString())
    (pod,) = decoded.pod_resources
    assert (pod.name, pod.namespace) == ("pod0", "ns")
    (ctr,) = pod.containers
    assert [(d.resource_name, list(d.device_ids)) for d in ctr.devices] == [
        ("example.com/gpu", ["gpu-0", "gpu-1"])
    ]
    (dyn,) = ctr.dynamic_resources
    assert (dyn.claim_name, dyn.claim_namespace) == ("pod0-gpu-x7k2p", "ns")
    first, second = dyn.claim_resources
    assert (first.driver_name, first.pool_name, first.device_name) == ("gpu.example.com", "node-1", "gpu-3")
    assert [c.name for c in first.cdi_devices] == [
        "k8s.gpu.example.com/gpu=common",
        "k8s.gpu.example.com/gpu=u-gpu-3",
    ]
    assert (second.device_name, second.share_id, list(second.cdi_devices)) == ("gpu-4", "4f1c", [])
    # and the other way: upstream's bytes are ours
    assert decoded.SerializeToString() == encode.list_response([POD]).SerializeToString()


def test_list_framed_from_pod_bytes_is_the_message_serialized() -> None:
    tiny = PodView("p", "ns", ())  # 7 bytes: a one-byte length; POD's takes two
    for pods in ([], [POD], [tiny, POD, tiny], [PodView("", "", ())]):
        framed = encode.list_response_bytes(encode.pod_message(p).SerializeToString() for p in pods)
        assert framed == encode.list_response(pods).SerializeToString()
        decoded = upstream_messages()["ListPodResourcesResponse"].FromString(framed)
        assert len(decoded.pod_resources) == len(pods)


def test_get_and_allocatable_decode_with_upstream_field_numbers() -> None:
    up = upstream_messages()
    got = up["GetPodResourcesResponse"].FromString(encode.get_response(POD).SerializeToString())
    assert got.pod_resources.containers[0].dynamic_resources[0].claim_resources[0].device_name == "gpu-3"
    alloc = encode.allocatable_response(DeviceManager({"example.com/gpu": 2}).registered).SerializeToString()
    (dev,) = up["AllocatableResourcesResponse"].FromString(alloc).devices
    assert (dev.resource_name, list(dev.device_ids)) == ("example.com/gpu", ["gpu-0", "gpu-1"])


def test_a_full_node_answers_within_grpc_default_message_limit() -> None:
    """110 pods (the kubelet's default maxPods) x 2 containers x 4 claims x 8 devices, each device
    with two CDI names: 7,040 devices in one List answer."""
    uid = "0f3c2b9e-5d1a-4c8e-9b7f-2a6d4e8c1b3a"

    def device(i: int) -> ClaimDevice:
        cdi = ("k8s.gpu.example.com/gpu=common", f"k8s.gpu.example.com/gpu={uid}-gpu-{i}")
        return ClaimDevice("gpu.example.com", "node-with-a-long-name-1", f"gpu-{i}", cdi)

    claims = tuple(
        ClaimView(f"pod-claim-{c}-abcde", "a-namespace", tuple(device(i) for i in range(8))) for c in range(4)
    )
    pods = [
        PodView(f"pod-{p}", "a-namespace", tuple(ContainerView(f"ctr-{c}", (), claims) for c in range(2)))
        for p in range(110)
    ]
    blob = encode.list_response(pods).SerializeToString()
    size = len(blob)
    # the kubelet's cache frames each pod's own bytes: the same answer, byte for byte
    assert encode.list_response_bytes(encode.pod_message(p).SerializeToString() for p in pods) == blob
    assert 700_000 < size < 1_500_000  # measured: ~1.0 MB, a quarter of the 4 MiB limit
    assert size < 4 * 1024 * 1024
