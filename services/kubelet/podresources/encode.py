"""The views of ``view.py`` as PodResources v1 protobuf messages (the wire format; no gRPC here)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from draflow.services.kubelet.podresources.v1 import api_pb2 as pb
from draflow.services.kubelet.podresources.view import ClaimView, ContainerView, PodView

__all__ = ["allocatable_response", "get_response", "list_response", "list_response_bytes", "pod_message"]

# ListPodResourcesResponse.pod_resources: its key (field number, wire type 2: length-delimited)
_POD_RESOURCES = pb.ListPodResourcesResponse.DESCRIPTOR.fields_by_name["pod_resources"].number
_POD_RESOURCES_KEY = bytes([_POD_RESOURCES << 3 | 2])


def _claim(claim: ClaimView) -> pb.DynamicResource:
    return pb.DynamicResource(
        claim_name=claim.name,
        claim_namespace=claim.namespace,
        claim_resources=[
            pb.ClaimResource(
                cdi_devices=[pb.CDIDevice(name=n) for n in d.cdi_devices],
                driver_name=d.driver,
                pool_name=d.pool,
                device_name=d.device,
                share_id=d.share_id,
            )
            for d in claim.devices
        ],
    )


def _container(c: ContainerView) -> pb.ContainerResources:
    return pb.ContainerResources(
        name=c.name,
        devices=[pb.ContainerDevices(resource_name=r, device_ids=ids) for r, ids in c.devices],
        dynamic_resources=[_claim(claim) for claim in c.claims],
    )


def pod_message(pod: PodView) -> pb.PodResources:
    return pb.PodResources(
        name=pod.name, namespace=pod.namespace, containers=[_container(c) for c in pod.containers]
    )


def list_response(pods: Iterable[PodView]) -> pb.ListPodResourcesResponse:
    return pb.ListPodResourcesResponse(pod_resources=[pod_message(p) for p in pods])


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def list_response_bytes(pods: Iterable[bytes]) -> bytes:
    """A serialized ``ListPodResourcesResponse`` from its pods' serialized ``PodResources``: the
    bytes ``list_response(...).SerializeToString()`` gives (the only field, repeated, in order), so
    an answer rebuilt after one pod changed reuses the other pods' bytes."""
    return b"".join(b"".join((_POD_RESOURCES_KEY, _varint(len(p)), p)) for p in pods)


def get_response(pod: PodView) -> pb.GetPodResourcesResponse:
    return pb.GetPodResourcesResponse(pod_resources=pod_message(pod))


def allocatable_response(registered: Mapping[str, Sequence[str]]) -> pb.AllocatableResourcesResponse:
    """Device-plugin devices per resource (DRA devices are not reported: KEP-3695 non-goal)."""
    return pb.AllocatableResourcesResponse(
        devices=[
            pb.ContainerDevices(resource_name=r, device_ids=list(ids))
            for r, ids in sorted(registered.items())
        ]
    )
