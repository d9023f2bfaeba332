"""Publishes each ACME node's ``NodeGpuCapacity`` (the KEP's driver-owned "object named after the
node") from what the node announced.

A node announces its ACME GPUs with two labels set by whatever hosts the node plugin:
``gpu.acme.com/gpus=<count>`` and ``gpu.acme.com/gpu-memory=<quantity>`` (memory per GPU). Each
pass makes the log hold exactly one matching object per such node (created, replaced when it
differs, deleted when the node or its labels are gone). The apiserver does not admit this kind
yet, so the object is admitted here (``admit_classic``) and appended as its lifecycle facts.
"""

from __future__ import annotations

from events.api.acme_gpu_v1alpha1 import GpuInfo, NodeGpuCapacity, NodeGpuCapacitySpec
from events.api.core_v1 import Node
from events.api.meta import ObjectMeta
from events.objects import object_applied, object_deleted
from events.quantity import Quantity, QuantityError
from infra.eventstore import ConcurrencyError
from services.dra.classic.validation import admit_classic
from services.runtime.controller import Runtime

__all__ = ["GPUS_LABEL", "KIND", "MEMORY_LABEL", "CapacityPublisher", "capacity_for"]

GPUS_LABEL = "gpu.acme.com/gpus"
MEMORY_LABEL = "gpu.acme.com/gpu-memory"
KIND = "NodeGpuCapacity"


def capacity_for(node: Node) -> NodeGpuCapacity | None:
    """The object the node's labels call for (None: not an ACME node, or labels not usable)."""
    labels = node.metadata.labels
    count, memory = labels.get(GPUS_LABEL, ""), labels.get(MEMORY_LABEL, "")
    if not count.isdigit() or int(count) <= 0 or node.metadata.deletion_timestamp is not None:
        return None
    try:
        size = Quantity.parse(memory)
    except QuantityError:
        return None
    if size.sign <= 0:
        return None
    name = node.metadata.name
    gpus = tuple(GpuInfo(name=f"gpu-{i}", memory=str(size)) for i in range(int(count)))
    return NodeGpuCapacity(
        metadata=ObjectMeta(name=name), spec=NodeGpuCapacitySpec(node_name=name, gpus=gpus)
    )


class CapacityPublisher:
    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        rt.kinds = frozenset({"Node", KIND})

    async def sync(self) -> None:
        rt = self.rt
        wanted: dict[str, NodeGpuCapacity] = {}
        for node in rt.items("Node"):
            cap = capacity_for(node)
            if cap is not None:
                wanted[cap.metadata.name] = cap
        for name, cap in wanted.items():
            have = rt.get(KIND, "", name)
            if have is not None and have.spec == cap.spec:
                continue
            version = rt.cache.index.version(KIND, "", name) if have is not None else 0
            try:
                await rt.cache.append(
                    KIND, "", name, [object_applied(admit_classic(cap))], expected_last_seq=version
                )
            except ConcurrencyError:
                rt.kick()  # someone else wrote it meanwhile: decide again on the next pass
        for have in rt.items(KIND):
            if have.metadata.name not in wanted:
                await rt.append(KIND, "", have.metadata.name, [object_deleted(KIND)])
