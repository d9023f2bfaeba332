"""What the PodResources API reports for a node, as plain values (no gRPC, no protobuf here).

Built only from the kubelet's own state, as upstream's server reads its managers:

* **pods** (``active_pods``): the pods bound to this node that are not terminated: phase not
  ``Succeeded``/``Failed``, and a pod being deleted only while the kubelet still holds something
  for it (its containers still run until then), sorted by namespace and name;
* **containers**: the restartable init containers (sidecars, ``restartPolicy: Always``) first, then
  the containers, as upstream (an ordinary init container has finished before the pod runs);
* **device-plugin devices** per container from the kubelet's device manager;
* **DRA claims** per container from the DRA manager's prepared (checkpointed) claim infos: for each
  ``spec.resourceClaims`` entry the container lists in ``resources.claims`` (in the pod's order),
  the claim's name and namespace and, per allocated device, driver, pool, device and the CDI names
  the driver's prepare returned, only the devices of the named ``request`` when one is given; the
  special extended-resource claim (KEP-5004) for the requests its ``requestMappings`` give the
  container; a claim not prepared (yet) is left out;
* **classic (KEP-3063) claims** from the classic node plugins' prepare results.

Upstream differences (documented in docs/podresources.md): upstream reports the whole claim even
when the container names one request, and its current code gives each device the CDI names of the
devices of the same driver before it too; here each device carries its own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from events.api.core_v1 import Container, Pod
from services.dra.kubeletplugin import PrepareResult, base_request
from services.dra.resourceclaim import ClaimRef, is_pod_terminal
from services.kubelet.state import ClaimInfo, DeviceState

__all__ = [
    "ClaimDevice",
    "ClaimView",
    "ClassicSource",
    "ContainerView",
    "DeviceSource",
    "PodView",
    "active_pods",
    "find_pod",
    "pod_view",
    "reported_containers",
]


@dataclass(frozen=True, slots=True)
class ClaimDevice:
    driver: str
    pool: str
    device: str
    cdi_devices: tuple[str, ...]
    share_id: str | None = None


@dataclass(frozen=True, slots=True)
class ClaimView:
    name: str
    namespace: str
    devices: tuple[ClaimDevice, ...]


@dataclass(frozen=True, slots=True)
class ContainerView:
    name: str
    devices: tuple[tuple[str, tuple[str, ...]], ...]  # (resource name, device ids)
    claims: tuple[ClaimView, ...]


@dataclass(frozen=True, slots=True)
class PodView:
    name: str
    namespace: str
    containers: tuple[ContainerView, ...]


class ClaimInfos(Protocol):
    def get(self, namespace: str, name: str) -> ClaimInfo | None: ...


class DeviceSource(Protocol):
    def container_devices(self, pod_uid: str, container: str) -> list[tuple[str, tuple[str, ...]]]: ...


class ClassicSource(Protocol):
    def container_claims(self, pod: Pod) -> dict[str, list[tuple[ClaimRef, str, PrepareResult]]]: ...


# -- which pods, which containers ------------------------------------------------------------


def active_pods(pods: Iterable[Pod], node: str, holds: Callable[[str], bool]) -> list[Pod]:
    """Pods on ``node`` that are not terminated (``holds(uid)``: the kubelet still holds something
    for the pod, which keeps a pod being deleted listed until it is released)."""
    out = [
        p
        for p in pods
        if p.spec.node_name == node
        and not is_pod_terminal(p)
        and (p.metadata.deletion_timestamp is None or holds(p.metadata.uid))
    ]
    out.sort(key=lambda p: (p.metadata.namespace, p.metadata.name))
    return out


def find_pod(pods: Iterable[Pod], node: str, namespace: str, name: str) -> Pod | None:
    """The pod of that name bound to this node (any phase: upstream's ``GetPodByName``)."""
    for p in pods:
        if p.metadata.name == name and p.metadata.namespace == namespace and p.spec.node_name == node:
            return p
    return None


def reported_containers(pod: Pod) -> list[Container]:
    """Sidecar init containers, then the containers (upstream skips ordinary init containers)."""
    return [c for c in pod.spec.init_containers if c.restart_policy == "Always"] + list(pod.spec.containers)


# -- devices of a claim ------------------------------------------------------------------------


def _for_request(device: DeviceState, requests: Sequence[str]) -> bool:
    """Whether a prepared device serves one of ``requests`` (empty: the whole claim). A device
    without request names serves every request; ``req/sub`` results count as ``req``."""
    if not requests or not device.request_names:
        return True
    return any(n in requests or base_request(n) in requests for n in device.request_names)


def _claim_devices(info: ClaimInfo, requests: Sequence[str]) -> tuple[ClaimDevice, ...]:
    return tuple(
        ClaimDevice(driver, d.pool_name, d.device_name, tuple(d.cdi_device_ids))
        for driver in sorted(info.driver_state)
        for d in info.driver_state[driver]
        if _for_request(d, requests)
    )


def _dra_claims(pod: Pod, container: Container, infos: ClaimInfos) -> list[ClaimView]:
    namespace = pod.metadata.namespace
    statuses = {s.name: s.resource_claim_name for s in pod.status.resource_claim_statuses}
    out: list[ClaimView] = []
    for entry in pod.spec.resource_claims:
        name = entry.resource_claim_name or statuses.get(entry.name)
        if not name:
            continue
        for ref in container.resources.claims:
            if ref.name != entry.name:
                continue
            info = infos.get(namespace, name)
            if info is not None:
                requests: tuple[str, ...] = (ref.request,) if ref.request else ()
                out.append(ClaimView(name, namespace, _claim_devices(info, requests)))
    extended = pod.status.extended_resource_claim_status
    if extended is not None and extended.resource_claim_name:
        requests = tuple(
            m.request_name for m in extended.request_mappings if m.container_name == container.name
        )
        info = infos.get(namespace, extended.resource_claim_name)
        if requests and info is not None:
            out.append(ClaimView(extended.resource_claim_name, namespace, _claim_devices(info, requests)))
    return out


def _classic_claims(
    namespace: str, prepared: Mapping[str, list[tuple[ClaimRef, str, PrepareResult]]], container: str
) -> list[ClaimView]:
    return [
        ClaimView(
            ref.name,
            namespace,
            tuple(
                ClaimDevice(driver, d.pool_name, d.device_name, tuple(d.cdi_device_ids), d.share_id)
                for d in result.devices
            ),
        )
        for ref, driver, result in prepared.get(container, [])
    ]


def pod_view(
    pod: Pod,
    infos: ClaimInfos,
    devices: DeviceSource | None = None,
    classic: ClassicSource | None = None,
) -> PodView:
    """Everything the API reports for one pod."""
    uid = pod.metadata.uid
    prepared = classic.container_claims(pod) if classic is not None else {}
    containers = []
    for c in reported_containers(pod):
        held = tuple(devices.container_devices(uid, c.name)) if devices is not None else ()
        claims = _dra_claims(pod, c, infos) + _classic_claims(pod.metadata.namespace, prepared, c.name)
        containers.append(ContainerView(c.name, held, tuple(claims)))
    return PodView(pod.metadata.name, pod.metadata.namespace, tuple(containers))
