"""The example driver's control-plane process: publish every GPU node's ResourceSlices.

Which nodes have GPUs, and how many: the label ``gpu.example.com/gpus=<N>`` on the Node, which the
kubelet hosting this driver's node plugin sets when it registers (``--gpus N``). Each pass runs
``sync_pool`` for every such node against the slices in the cache (create / update / delete with
the pool generation bumped when more than one object changes) and deletes this driver's slices of
nodes that are gone or lost the label. The slices go through the apiserver (admission validates
them); names are derived from node, generation and index, so a replayed pass is a no-op.
"""

from __future__ import annotations

from collections import defaultdict

from events.api.core_v1 import Node
from events.api.resource_v1 import ResourceSlice
from services.drivers.gpu_example.slices import DRIVER, sync_pool
from services.runtime.controller import Runtime

__all__ = ["GPUS_LABEL", "SlicePublisher", "gpus_of"]

GPUS_LABEL = "gpu.example.com/gpus"
KINDS = frozenset({"Node", "ResourceSlice"})


def gpus_of(node: Node) -> int:
    """GPUs the node's kubelet announced (0: none, or not a gpu.example.com node)."""
    raw = node.metadata.labels.get(GPUS_LABEL, "")
    return int(raw) if raw.isdigit() else 0


class SlicePublisher:
    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        rt.kinds = KINDS

    async def sync(self) -> None:
        rt = self.rt
        slices: dict[str, list[ResourceSlice]] = defaultdict(list)
        for s in rt.items("ResourceSlice"):
            if s.spec.driver == DRIVER:
                slices[s.spec.pool.name].append(s)
        taken = {s.metadata.name for s in rt.items("ResourceSlice")}
        wanted: set[str] = set()
        for node in rt.items("Node"):
            n = gpus_of(node)
            if n <= 0 or node.metadata.deletion_timestamp is not None:
                continue
            name = node.metadata.name
            wanted.add(name)
            plan = sync_pool(name, n, slices.get(name, []), node_uid=node.metadata.uid, taken=taken)
            for s in plan.create:
                await rt.create(s)
            for s in plan.update:
                await rt.apply(s)
            for s in plan.delete:
                await rt.delete("ResourceSlice", "", s.metadata.name, uid=s.metadata.uid)
        for pool, stale in slices.items():
            if pool not in wanted:
                for s in stale:
                    await rt.delete("ResourceSlice", "", s.metadata.name, uid=s.metadata.uid)
