"""Device-plugin devices on a ``--device-plugin`` node: ids, assignment to containers, checkpoint.

A device plugin (``--device-plugin example.com/gpu=2``) advertises ``count`` devices of a resource;
this is the kubelet's device manager for them (after upstream ``pkg/kubelet/cm/devicemanager``):

* **ids**: device ``i`` of resource ``vendor/name`` is ``name-i`` (``gpu-0``, ``gpu-1``): stable
  across restarts, as a real plugin's ids (GPU UUIDs) are;
* **assignment** at admission, container by container in the pod's order: an init container's
  devices may be taken again by the containers after it (it has finished by then), a restartable
  init container (sidecar, ``restartPolicy: Always``) keeps its own; devices held by other pods are
  never given out. Too few free devices is upstream's admission error
  (``UnexpectedAdmissionError``), and nothing is assigned;
* **CDI**: each device is the CDI device ``vendor/name=<id>`` of the plugin's static spec (what a
  plugin's ``Allocate`` answer names), so the runtime gets the devices of a device-plugin pod too;
* **release** when the kubelet releases the pod (deleted, finished, gone while it was down);
* **checkpoint** ``device-plugins/kubelet_internal_checkpoint`` under the kubelet's state dir, shaped
  like upstream's (``PodDeviceEntries`` + ``RegisteredDevices``; the checksum here is CRC-32 of the
  data, not upstream's hash of Go's in-memory struct), written after every change, read at start.

Pure: no I/O except the checkpoint helpers at the bottom.
"""

from __future__ import annotations

import json
import os
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from draflow.events.api.core_v1 import Container, Pod
from draflow.events.quantity import Quantity, QuantityError

__all__ = [
    "CHECKPOINT_FILE",
    "Assignment",
    "DeviceManager",
    "DevicesUnavailable",
    "device_ids",
]

CHECKPOINT_DIR = "device-plugins"
CHECKPOINT_FILE = "kubelet_internal_checkpoint"
NO_NUMA = "-1"  # upstream's key for devices without NUMA affinity


class DevicesUnavailable(Exception):
    """Upstream's admission failure when a plugin has too few free devices for a pod."""

    def __init__(self, resource: str, requested: int, available: int) -> None:
        super().__init__(
            f"Allocate failed due to requested number of devices unavailable for {resource}. "
            f"Requested: {requested}, Available: {available}, which is unexpected"
        )


@dataclass(frozen=True, slots=True)
class Assignment:
    """Devices of one resource given to one container of one pod."""

    pod_uid: str
    container: str
    resource: str
    device_ids: tuple[str, ...]


def device_ids(resource: str, count: int) -> list[str]:
    """The ids a plugin for ``resource`` with ``count`` devices advertises (``gpu-0``, ...)."""
    base = resource.rsplit("/", 1)[-1]
    return [f"{base}-{i}" for i in range(count)]


def _requested(container: Container, resource: str) -> int:
    raw = container.resources.requests.get(resource, container.resources.limits.get(resource))
    if raw is None:
        return 0
    try:
        return max(Quantity.parse(str(raw)).value(), 0)
    except QuantityError:
        return 0


def _is_sidecar(container: Container) -> bool:
    return container.restart_policy == "Always"


class DeviceManager:
    """Registered devices per resource and which pod container holds which."""

    def __init__(self, resources: Mapping[str, int], assignments: Iterable[Assignment] = ()) -> None:
        self.registered: dict[str, list[str]] = {r: device_ids(r, n) for r, n in sorted(resources.items())}
        self._by_pod: dict[str, list[Assignment]] = {}
        for a in assignments:
            if a.resource in self.registered:  # a plugin no longer configured: its devices are gone
                self._by_pod.setdefault(a.pod_uid, []).append(a)

    # -- queries -------------------------------------------------------------------------------

    def holds(self, pod_uid: str) -> bool:
        return pod_uid in self._by_pod

    def held_pods(self) -> frozenset[str]:
        return frozenset(self._by_pod)

    def assignments(self) -> list[Assignment]:
        """Everything the checkpoint must hold, in a stable order."""
        return [a for uid in sorted(self._by_pod) for a in self._by_pod[uid]]

    def container_devices(self, pod_uid: str, container: str) -> list[tuple[str, tuple[str, ...]]]:
        """``(resource, device ids)`` of one container, in resource order."""
        found = [
            (a.resource, a.device_ids) for a in self._by_pod.get(pod_uid, ()) if a.container == container
        ]
        return sorted(found)

    def cdi_devices(self, pod_uid: str, container: str) -> list[str]:
        """The CDI device names the plugin's ``Allocate`` gives this container."""
        return [
            f"{resource}={d}" for resource, ids in self.container_devices(pod_uid, container) for d in ids
        ]

    def _in_use(self, resource: str, except_pod: str) -> set[str]:
        return {
            d
            for uid, items in self._by_pod.items()
            if uid != except_pod
            for a in items
            if a.resource == resource
            for d in a.device_ids
        }

    # -- changes -------------------------------------------------------------------------------

    def allocate(self, pod: Pod) -> bool:
        """Assign devices to the pod's containers (idempotent); returns whether anything changed.
        Raises :class:`DevicesUnavailable` (and assigns nothing) when a resource runs short."""
        uid = pod.metadata.uid
        if uid in self._by_pod:
            return False
        out: list[Assignment] = []
        for resource, ids in self.registered.items():
            used = self._in_use(resource, uid)
            free = [d for d in ids if d not in used]
            reusable: list[str] = []  # devices of finished init containers
            for container, init in [(c, True) for c in pod.spec.init_containers] + [
                (c, False) for c in pod.spec.containers
            ]:
                want = _requested(container, resource)
                if want == 0:
                    continue
                pool = reusable + [d for d in free if d not in reusable]
                if len(pool) < want:
                    raise DevicesUnavailable(resource, want, len(pool))
                taken = pool[:want]
                out.append(Assignment(uid, container.name, resource, tuple(taken)))
                free = [d for d in free if d not in taken]
                reusable = [d for d in reusable if d not in taken]
                if init and not _is_sidecar(container):
                    reusable += taken
        if out:
            self._by_pod[uid] = out
        return bool(out)

    def release(self, pod_uid: str) -> bool:
        """Free the pod's devices; returns whether it held any."""
        return self._by_pod.pop(pod_uid, None) is not None


# -- checkpoint --------------------------------------------------------------------------------


def encode_checkpoint(manager: DeviceManager) -> bytes:
    entries: list[dict[str, Any]] = [
        {
            "PodUID": a.pod_uid,
            "ContainerName": a.container,
            "ResourceName": a.resource,
            "DeviceIDs": {NO_NUMA: list(a.device_ids)},
            "AllocResp": "",
        }
        for a in manager.assignments()
    ]
    data = {"PodDeviceEntries": entries or None, "RegisteredDevices": manager.registered}
    text = json.dumps(data, separators=(",", ":"), sort_keys=False)
    return json.dumps({"Data": data, "Checksum": zlib.crc32(text.encode())}, separators=(",", ":")).encode()


class DeviceCheckpointError(ValueError):
    """The device checkpoint cannot be trusted (bad JSON, shape or checksum)."""


def decode_checkpoint(blob: bytes) -> list[Assignment]:
    try:
        outer = json.loads(blob)
        data = outer["Data"]
        text = json.dumps(data, separators=(",", ":"), sort_keys=False)
        if outer.get("Checksum") != zlib.crc32(text.encode()):
            raise DeviceCheckpointError("device-plugin checkpoint is corrupted (checksum mismatch)")
        out = []
        for e in data.get("PodDeviceEntries") or []:
            ids = [d for numa in sorted(e["DeviceIDs"]) for d in e["DeviceIDs"][numa]]
            out.append(
                Assignment(str(e["PodUID"]), str(e["ContainerName"]), str(e["ResourceName"]), tuple(ids))
            )
        return out
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        if isinstance(exc, DeviceCheckpointError):
            raise
        raise DeviceCheckpointError(f"device-plugin checkpoint: {exc}") from None


def write_checkpoint(state_dir: Path, manager: DeviceManager) -> Path:
    """Atomically and durably, like the DRA manager's checkpoint."""
    folder = state_dir / CHECKPOINT_DIR
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / CHECKPOINT_FILE
    tmp = path.with_name(f".{CHECKPOINT_FILE}.tmp")
    with open(tmp, "wb") as fh:
        fh.write(encode_checkpoint(manager))
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    return path


def read_checkpoint(state_dir: Path) -> list[Assignment]:
    path = state_dir / CHECKPOINT_DIR / CHECKPOINT_FILE
    return decode_checkpoint(path.read_bytes()) if path.exists() else []
