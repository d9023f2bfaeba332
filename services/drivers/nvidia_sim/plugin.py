"""The simulated ``gpu.nvidia.com`` node plugin: prepares GPUs and MIG devices by writing CDI specs.

As the NVIDIA driver's kubelet plugin does, preparing a claim writes one CDI spec for it, kind
``k8s.gpu.nvidia.com/claim``, with a device ``<claim uid>-<device>`` per allocated device whose
container edits expose that GPU or MIG instance (``NVIDIA_VISIBLE_DEVICES=<uuid>``); the kubelet
hands each container the ids ``k8s.gpu.nvidia.com/claim=<claim uid>-<device>`` of its own
requests. Prepared claims are checkpointed (a repeated call after a kubelet restart answers from
the spec without preparing again); unprepare removes the spec and is a no-op for unknown claims.
A device that is not this node's (another pool, or not published here) is refused per claim.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from events.api.resource_v1 import ResourceClaim
from services.dra.kubeletplugin import Device, PrepareResult
from services.dra.resourceclaim import ClaimRef
from services.drivers import cdi
from services.drivers.classic_node import read_json, write_json
from services.drivers.nvidia_sim.devices import DRIVER, NodeLayout, device_uuids, node_devices

__all__ = ["CDI_CLASS", "CDI_VENDOR", "NvidiaGpuPlugin"]

CDI_VENDOR = "k8s.gpu.nvidia.com"
CDI_CLASS = "claim"
CHECKPOINT = "checkpoint.json"


class NvidiaGpuPlugin:
    """``DRAPlugin`` for ``gpu.nvidia.com`` on one node (``get_claim``: the kubelet's API view)."""

    def __init__(
        self,
        node_name: str,
        layout: NodeLayout,
        cdi_root: Path,
        get_claim: Callable[[ClaimRef], ResourceClaim | None],
        *,
        state_dir: Path | None = None,
    ) -> None:
        self.node_name = node_name
        self.devices = node_devices(node_name, layout)
        self.uuids = device_uuids(self.devices)
        self.cdi_root = cdi_root
        self.get_claim = get_claim
        self._checkpoint = state_dir / CHECKPOINT if state_dir is not None else None
        self._lock = threading.Lock()
        self._prepared: set[str] = (
            set(read_json(self._checkpoint, list[str], [])) if self._checkpoint is not None else set()
        )

    @property
    def driver_name(self) -> str:
        return DRIVER

    @property
    def prepared(self) -> frozenset[str]:
        return frozenset(self._prepared)

    def node_prepare_resources(self, claims: Sequence[ClaimRef]) -> dict[str, PrepareResult]:
        with self._lock:
            results = {ref.uid: self._prepare(ref) for ref in claims}
            self._save()
            return results

    def node_unprepare_resources(self, claims: Sequence[ClaimRef]) -> dict[str, str | None]:
        with self._lock:
            for ref in claims:
                cdi.remove_spec(self.cdi_root, self._spec_name(ref.uid))
                self._prepared.discard(ref.uid)
            self._save()
            return {ref.uid: None for ref in claims}

    def _spec_name(self, claim_uid: str) -> str:
        return cdi.transient_spec_name(CDI_VENDOR, CDI_CLASS, claim_uid)

    def _prepare(self, ref: ClaimRef) -> PrepareResult:
        prefix = f"error preparing devices for claim {ref.namespace}/{ref.name}"
        claim = self.get_claim(ref)
        if claim is None or claim.metadata.uid != ref.uid:
            return PrepareResult(error=f"{prefix}: ResourceClaim not found")
        allocation = claim.status.allocation
        if allocation is None:
            return PrepareResult(error=f"{prefix}: not allocated")
        cdi_devices: list[cdi.CdiDevice] = []
        devices: list[Device] = []
        for result in (r for r in allocation.devices.results if r.driver == DRIVER):
            uuid = self.uuids.get(result.device)
            if result.pool != self.node_name or uuid is None:
                return PrepareResult(
                    error=f"{prefix}: device {result.pool}/{result.device} is not on node {self.node_name}"
                )
            name = f"{ref.uid}-{result.device}"
            cdi_devices.append(cdi.CdiDevice(name=name, env=(f"NVIDIA_VISIBLE_DEVICES={uuid}",)))
            devices.append(
                Device(
                    request_names=(result.request,),
                    pool_name=result.pool,
                    device_name=result.device,
                    cdi_device_ids=(cdi.qualified_name(CDI_VENDOR, CDI_CLASS, name),),
                )
            )
        spec_name = self._spec_name(ref.uid)
        if ref.uid not in self._prepared or cdi.read_spec(self.cdi_root, spec_name) is None:
            cdi.write_spec(self.cdi_root, spec_name, cdi.build_spec(CDI_VENDOR, CDI_CLASS, cdi_devices))
            self._prepared.add(ref.uid)
        return PrepareResult(devices=tuple(devices))

    def _save(self) -> None:
        if self._checkpoint is not None:
            write_json(self._checkpoint, sorted(self._prepared))
