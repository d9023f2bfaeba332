"""The driver-owned per-node capacity object of gpu.acme.com (``gpu.acme.com/v1alpha1``).

KEP-3063 suggests that a node-local driver publish "a CRD object named after the node" with what
the node offers; this is that object for the ACME example driver. It is served like a CRD would
be (cluster-scoped, ``nodegpucapacities.gpu.acme.com``), so the node side appends it to the log
and the driver controller folds it; users can read it to see a node's GPUs.
"""

from __future__ import annotations

from typing import ClassVar

import msgspec

from draflow.events.api.base import ApiStruct, QuantityValue, normalize_quantities
from draflow.events.api.meta import ObjectMeta

__all__ = ["API_VERSION", "GROUP", "GpuInfo", "NodeGpuCapacity", "NodeGpuCapacitySpec"]

GROUP = "gpu.acme.com"
API_VERSION = f"{GROUP}/v1alpha1"


class GpuInfo(ApiStruct, frozen=True):
    name: str = ""
    memory: QuantityValue = "0"

    def __post_init__(self) -> None:
        normalize_quantities(self, "memory")


class NodeGpuCapacitySpec(ApiStruct, frozen=True):
    node_name: str = ""
    gpus: tuple[GpuInfo, ...] = ()


class NodeGpuCapacity(ApiStruct, frozen=True):
    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "NodeGpuCapacity"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: NodeGpuCapacitySpec = msgspec.field(default_factory=NodeGpuCapacitySpec)
