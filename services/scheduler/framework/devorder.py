"""Nodes in DRA best-fit order for one request signature, maintained incrementally.

For a pod whose only device need is one ExactCount request, the DRA score of a node depends on
one number: how many matching devices are free there. This index keeps, per signature, the
nodes bucketed by that number (each bucket sorted by node position), updated when devices
change hands, so the scheduler can walk nodes best-first — fewest free devices that still
suffice first, ties in the pod's walk order — and stop at the first node that passes every
filter. That is the node a full scan scoring every node would choose, at the cost of looking at
a handful of nodes instead of hundreds.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterator
from typing import TYPE_CHECKING

from draflow.events.api.resource_v1 import DeviceClass
from draflow.services.scheduler.framework.nodeinfo import NodeInfo

if TYPE_CHECKING:
    from draflow.services.scheduler.framework.devices import DeviceIndex, Sig

__all__ = ["SigOrder"]


class SigOrder:
    """Free-count buckets of one signature over one node order (see module docstring)."""

    __slots__ = (
        "all_dirty",
        "buckets",
        "cls",
        "dirty",
        "free",
        "index",
        "nodes",
        "position",
        "sig",
        "total",
        "unusable",
    )

    def __init__(self, index: DeviceIndex, sig: Sig, cls: DeviceClass, nodes: list[NodeInfo]) -> None:
        self.index = index
        self.sig = sig
        self.cls = cls
        self.nodes = nodes
        self.position = {node.name: i for i, node in enumerate(nodes)}
        self.free: list[int] = []  # free matching devices, by node position
        self.total: list[int] = []  # matching devices, by node position
        self.buckets: dict[int, list[int]] = {}
        self.dirty: set[str] = set()
        self.all_dirty = False
        # Nodes where the count does not decide the order (shareable devices, pool errors,
        # devices on which a selector fails).
        self.unusable: set[int] = set()
        self._build()

    def _build(self) -> None:
        self.free = [0] * len(self.nodes)
        self.total = [0] * len(self.nodes)
        self.buckets = {}
        self.unusable = set()
        for i in range(len(self.nodes)):
            f = self._count(i)
            self.free[i] = f
            self.buckets.setdefault(f, []).append(i)
        self.dirty.clear()
        self.all_dirty = False

    def _count(self, i: int) -> int:
        node = self.nodes[i]
        nd = self.index.node(node.name, node.labels)
        if nd.error is not None:
            self.unusable.add(i)
            return 0
        entry = self.index.entry(nd, node.name, self.sig, self.cls)
        if entry.multi or entry.errors:
            # shareable devices: the count does not decide; selector errors: the allocator must
            # run on this node whatever the order (it fails the pod's attempt there)
            self.unusable.add(i)
        else:
            self.unusable.discard(i)
        self.total[i] = len(entry.devices)
        return entry.free

    def refresh(self) -> None:
        if self.all_dirty:
            self._build()
            return
        for name in self.dirty:
            i = self.position.get(name)
            if i is None:
                continue
            f = self._count(i)
            old = self.free[i]
            if f == old:
                continue
            bucket = self.buckets[old]
            del bucket[bisect_left(bucket, i)]
            if not bucket:
                del self.buckets[old]
            insort(self.buckets.setdefault(f, []), i)
            self.free[i] = f
        self.dirty.clear()

    def walk(self, count: int, start: int) -> Iterator[NodeInfo]:
        """Nodes with at least ``count`` free devices, fewest first, ties from ``start`` on."""
        nodes = self.nodes
        for free in sorted(f for f in self.buckets if f >= count):
            bucket = self.buckets[free]
            cut = bisect_left(bucket, start)
            for i in bucket[cut:]:
                yield nodes[i]
            for i in bucket[:cut]:
                yield nodes[i]
