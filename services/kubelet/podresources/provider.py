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
do not. Building ``List`` again reuses, per pod, the view and serialized message of a pod that
did not change when the local state did not (and the bytes when its view came out the same).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from draflow.services.kubelet.podresources import encode
from draflow.services.kubelet.podresources.view import PodView, active_pods, find_pod, pod_view

if TYPE_CHECKING:
    from draflow.events.api.core_v1 import Pod
    from draflow.services.kubelet.service import KubeletService

__all__ = ["KubeletSource", "Source"]


class Source(Protocol):
    """What the gRPC server serves: serialized responses (``None`` from ``get``: no such pod).

    ``list_bytes``, ``get_bytes`` and ``allocatable_bytes`` read the kubelet's state: the server
    calls them on the kubelet's event loop. ``cached_list_bytes`` and ``cached_allocatable_bytes``
    only read what an earlier call built (``None``: nothing current): the server's worker threads
    call them directly, so a cached answer costs no trip through the loop.
    """

    def list_bytes(self) -> bytes: ...

    def get_bytes(self, namespace: str, name: str) -> bytes | None: ...

    def allocatable_bytes(self) -> bytes: ...

    def cached_list_bytes(self) -> bytes | None: ...

    def cached_allocatable_bytes(self) -> bytes | None: ...


class KubeletSource:
    def __init__(self, kubelet: KubeletService) -> None:
        self.kubelet = kubelet
        self.generation = 0
        self._list: tuple[int, bytes] | None = None
        # A List rebuilt after a change reuses what it can, per listed pod: (pod object, state
        # generation, view, serialized PodResources). A view depends only on the pod (an immutable
        # object, replaced by the cache when it changes) and the kubelet's local state (whose
        # changes bump state_generation): same pod, same state, same view. A new view equal to the
        # old one keeps the old bytes.
        self.state_generation = 0
        self._pods: dict[tuple[str, str], tuple[Pod, int, PodView, bytes]] = {}
        self._allocatable: tuple[int, bytes] | None = None
        kubelet.rt.cache.listen(self._on_change)
        kubelet.on_state_change = self._state_changed

    def _on_change(self, kind: str, namespace: str, name: str, change: Any) -> None:
        if kind != "Pod":
            return
        if (namespace, name) in self._pods:  # listed in the cached answer
            self.invalidate()
            return
        pod = self.kubelet.rt.get("Pod", namespace, name)
        if pod is not None and pod.spec.node_name == self.kubelet.node_name:
            self.invalidate()

    def invalidate(self) -> None:
        self.generation += 1

    def _state_changed(self) -> None:
        self.state_generation += 1
        self.invalidate()

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

    # The cached_* readers run on the server's threads while the loop may invalidate: one read of
    # the (generation, bytes) pair, compared with the generation read after it, so bytes of an older
    # generation are never served as current (a call racing a change may get the answer from just
    # before it, as if it had arrived a moment earlier).

    def cached_list_bytes(self) -> bytes | None:
        cached = self._list
        return cached[1] if cached is not None and cached[0] == self.generation else None

    def cached_allocatable_bytes(self) -> bytes | None:
        cached = self._allocatable
        return cached[1] if cached is not None and cached[0] == self.generation else None

    def list_bytes(self) -> bytes:
        blob = self.cached_list_bytes()
        if blob is not None:
            return blob
        generation = self.generation
        k = self.kubelet
        pods = active_pods(k.rt.items("Pod"), k.node_name, self._holds)
        state, known = self.state_generation, self._pods
        listed: dict[tuple[str, str], tuple[Pod, int, PodView, bytes]] = {}
        for pod in pods:
            key = (pod.metadata.namespace, pod.metadata.name)
            entry = known.get(key)
            if entry is None or entry[0] is not pod or entry[1] != state:
                view = self._view(pod)
                if entry is None or entry[2] != view:
                    entry = (pod, state, view, encode.pod_message(view).SerializeToString())
                else:
                    entry = (pod, state, view, entry[3])
            listed[key] = entry
        blob = encode.list_response_bytes(entry[3] for entry in listed.values())
        self._pods = listed
        self._list = (generation, blob)
        return blob

    def get_bytes(self, namespace: str, name: str) -> bytes | None:
        k = self.kubelet
        pod = k.rt.get("Pod", namespace, name)
        if pod is None or find_pod([pod], k.node_name, namespace, name) is None:
            return None
        return encode.get_response(self._view(pod)).SerializeToString()

    def allocatable_bytes(self) -> bytes:
        blob = self.cached_allocatable_bytes()
        if blob is not None:
            return blob
        generation = self.generation
        devices = self.kubelet.devices
        blob = encode.allocatable_response(
            devices.registered if devices is not None else {}
        ).SerializeToString()
        self._allocatable = (generation, blob)
        return blob
