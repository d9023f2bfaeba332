"""The answers of one kubelet's PodResources API, read from that kubelet's in-memory state.

:class:`KubeletSource` reads a :class:`~draflow.services.kubelet.service.KubeletService`: the pods of its
log-fed cache, its DRA manager (prepared claim infos, restored from the checkpoint at start), its
device-plugin device manager and its classic node plugins' prepare results, never a driver. So a
kubelet restarted with pods running answers from its checkpoints exactly as before, before it
consumes a new event.

Answers are serialized once and cached until something they depend on changes (the KEP's "passive
caching" against heavy callers): a change of a Pod bound to this node (or listed in the cached
answer) or of the kubelet's local state (every change of its DRA manager, device manager or
classic prepare results is followed by a checkpoint, and ``KubeletService`` calls
``on_state_change`` after every checkpoint) drops the cached ``List`` and
``GetAllocatableResources`` bytes; the next call builds them again. Pods of other nodes changing
do not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from draflow.services.kubelet.podresources import encode
from draflow.services.kubelet.podresources.view import active_pods, find_pod, pod_view

if TYPE_CHECKING:
    from draflow.events.api.core_v1 import Pod
    from draflow.services.kubelet.service import KubeletService

__all__ = ["KubeletSource", "Source"]


class Source(Protocol):
    """What the gRPC server serves: serialized responses (``None`` from ``get``: no such pod)."""

    def list_bytes(self) -> bytes: ...

    def get_bytes(self, namespace: str, name: str) -> bytes | None: ...

    def allocatable_bytes(self) -> bytes: ...


class KubeletSource:
    def __init__(self, kubelet: KubeletService) -> None:
        self.kubelet = kubelet
        self.generation = 0
        self._list: tuple[int, bytes] | None = None
        self._listed: set[tuple[str, str]] = set()  # (namespace, name) in the cached List answer
        self._allocatable: tuple[int, bytes] | None = None
        kubelet.rt.cache.listen(self._on_change)
        kubelet.on_state_change = self.invalidate

    def _on_change(self, kind: str, namespace: str, name: str, change: Any) -> None:
        if kind != "Pod":
            return
        if (namespace, name) in self._listed:
            self.invalidate()
            return
        pod = self.kubelet.rt.get("Pod", namespace, name)
        if pod is not None and pod.spec.node_name == self.kubelet.node_name:
            self.invalidate()

    def invalidate(self) -> None:
        self.generation += 1

    def _holds(self, pod_uid: str) -> bool:
        k = self.kubelet
        return (
            k.manager.has_pod_reference(pod_uid)
            or (k.classic is not None and k.classic.holds(pod_uid))
            or (k.devices is not None and k.devices.holds(pod_uid))
        )

    def _view(self, pod: Pod) -> Any:
        k = self.kubelet
        return pod_view(pod, k.manager, k.devices, k.classic)

    def list_bytes(self) -> bytes:
        cached = self._list
        if cached is not None and cached[0] == self.generation:
            return cached[1]
        generation = self.generation
        k = self.kubelet
        pods = active_pods(k.rt.items("Pod"), k.node_name, self._holds)
        blob = encode.list_response(self._view(p) for p in pods).SerializeToString()
        self._listed = {(p.metadata.namespace, p.metadata.name) for p in pods}
        self._list = (generation, blob)
        return blob

    def get_bytes(self, namespace: str, name: str) -> bytes | None:
        k = self.kubelet
        pod = k.rt.get("Pod", namespace, name)
        if pod is None or find_pod([pod], k.node_name, namespace, name) is None:
            return None
        return encode.get_response(self._view(pod)).SerializeToString()

    def allocatable_bytes(self) -> bytes:
        cached = self._allocatable
        if cached is not None and cached[0] == self.generation:
            return cached[1]
        generation = self.generation
        devices = self.kubelet.devices
        blob = encode.allocatable_response(
            devices.registered if devices is not None else {}
        ).SerializeToString()
        self._allocatable = (generation, blob)
        return blob
