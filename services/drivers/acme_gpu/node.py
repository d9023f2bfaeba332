"""gpu.acme.com kubelet plugin: publishes the node's GPUs and prepares partial-GPU claims.

Each claim becomes its own CDI device ``gpu.acme.com/gpu=<claim uid>`` whose environment names
the physical GPU and the memory slice (``ACME_GPU``, ``ACME_GPU_MEMORY``) and, when the class set
one, the administrator's init command (``ACME_GPU_INIT``); claims sharing a GPU get distinct
devices with the same ``ACME_GPU``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from events.api import classic_v1alpha1 as cv
from events.api.acme_gpu_v1alpha1 import GpuInfo, NodeGpuCapacity, NodeGpuCapacitySpec
from events.api.meta import ObjectMeta
from services.drivers.acme_gpu.controller import DRIVER_NAME
from services.drivers.cdi import CdiDevice
from services.drivers.classic_node import ClassicNodePlugin

__all__ = ["AcmeGpuNodePlugin", "acme_devices"]


def acme_devices(claim: cv.ResourceClaim) -> list[tuple[str, CdiDevice]]:
    attrs = claim.status.attributes
    env = [f"ACME_GPU={attrs.get('gpu', '')}", f"ACME_GPU_MEMORY={attrs.get('memory', '')}"]
    if "initCommand" in attrs:
        env.append("ACME_GPU_INIT=" + " ".join(json.loads(attrs["initCommand"])))
    return [(attrs.get("gpu", ""), CdiDevice(name=claim.metadata.uid, env=tuple(env)))]


class AcmeGpuNodePlugin(ClassicNodePlugin):
    def __init__(
        self,
        *,
        node_name: str,
        gpus: Sequence[GpuInfo],
        node_labels: Mapping[str, str] | None = None,
        cdi_root: Path | None = None,
        state_dir: Path | None = None,
    ) -> None:
        super().__init__(
            driver_name=DRIVER_NAME,
            node_name=node_name,
            node_labels=node_labels or {},
            cdi_vendor="gpu.acme.com",
            cdi_class="gpu",
            devices_for=acme_devices,
            cdi_root=cdi_root,
            state_dir=state_dir,
        )
        self._gpus = tuple(gpus)

    def capacity(self) -> NodeGpuCapacity:
        """The driver-owned object this node publishes (named after the node)."""
        return NodeGpuCapacity(
            metadata=ObjectMeta(name=self.node_name),
            spec=NodeGpuCapacitySpec(node_name=self.node_name, gpus=self._gpus),
        )
