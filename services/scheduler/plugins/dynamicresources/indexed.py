"""The DRA precheck and node order read from the best-fit indexes (``framework/devorder.py``).

When every signature a pod asks for has an exact best-fit index (no shareable devices, no pool
errors), each node's counts are list lookups by node position:

* all requests single ExactCount (the common shape, e.g. one GPU, or two requests of one class):
  the pod needs ``need[sig]`` devices of each signature; a node fits when every count suffices
  and its estimate is the sum of what stays free;
* anything else (firstAvailable, All, adminAccess, mixes): ``compile_indexed``'s general check.

Nodes can be listed best-first — so the framework stops at the first feasible node — when the
score depends on one count: one signature's free devices (simple shape), or one firstAvailable
request (subrequest preference, then free devices). Other shapes are sampled and scored.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from draflow.services.scheduler.framework.cluster import ClusterState
from draflow.services.scheduler.framework.devices import Sig
from draflow.services.scheduler.framework.devorder import SigOrder
from draflow.services.scheduler.framework.nodeinfo import NodeInfo
from draflow.services.scheduler.framework.status import Status
from draflow.services.scheduler.plugins.dynamicresources.precheck import Estimate, Slot, compile_indexed

__all__ = ["IndexedPrecheck", "indexed_precheck"]


def indexed_precheck(cluster: ClusterState, slots: Sequence[Slot]) -> IndexedPrecheck | None:
    """The indexed precheck for these slots, or None when some signature has no exact index."""
    nodes = cluster.node_list()
    orders: dict[Sig, SigOrder] = {}
    for slot in slots:
        for opt in slot.options:
            if opt.sig not in orders:
                order = cluster.devices.best_fit_order(opt.sig, opt.cls, nodes)
                if order is None:
                    return None
                orders[opt.sig] = order
    return IndexedPrecheck(orders, slots)


class IndexedPrecheck:
    __slots__ = ("check", "need", "orders", "slots")

    def __init__(self, orders: dict[Sig, SigOrder], slots: Sequence[Slot]) -> None:
        self.orders = orders
        self.slots = slots
        simple = all(
            len(slot.options) == 1 and not (slot.options[0].admin or slot.options[0].all_mode)
            for slot in slots
        )
        self.need: list[tuple[Sig, int]] | None = None
        self.check: Callable[[int], Estimate | None]
        if simple:
            need: dict[Sig, int] = {}
            for slot in slots:
                opt = slot.options[0]
                need[opt.sig] = need.get(opt.sig, 0) + opt.count
            self.need = list(need.items())
            self.check = self._simple
        else:
            self.check = compile_indexed(orders, slots)

    def _simple(self, position: int) -> Estimate | None:
        assert self.need is not None
        after = 0
        for sig, need in self.need:
            free = self.orders[sig].free[position]
            if free < need:
                return None
            after += free - need
        return (0, after)

    def filter_nodes(
        self,
        nodes: list[NodeInfo],
        rejected: list[tuple[NodeInfo, Status]],
        status: Status,
        estimates: dict[str, Estimate],
    ) -> list[NodeInfo]:
        """Batch filter: the nodes that pass (in order); estimates recorded for them."""
        kept: list[NodeInfo] = []
        if self.need is not None and len(self.need) == 1:
            sig, need = self.need[0]
            free_by_position = self.orders[sig].free
            for node in nodes:
                free = free_by_position[node.index]
                if free < need:
                    rejected.append((node, status))
                else:
                    estimates[node.name] = (0, free - need)
                    kept.append(node)
            return kept
        check = self.check
        for node in nodes:
            estimate = check(node.index)
            if estimate is None:
                rejected.append((node, status))
            else:
                estimates[node.name] = estimate
                kept.append(node)
        return kept

    def walk(self, start: int) -> Iterator[NodeInfo] | None:
        """Nodes best-first when one count decides the score (module docstring), else None."""
        if self.need is not None:
            if len(self.need) != 1:
                return None
            sig, need = self.need[0]
            return self.orders[sig].walk(need, start)
        if len(self.slots) != 1:
            return None
        options = self.slots[0].options
        if any(opt.admin or opt.all_mode for opt in options):
            return None
        return _prioritized_walk([(opt.count, self.orders[opt.sig]) for opt in options], start)


def _prioritized_walk(options: list[tuple[int, SigOrder]], start: int) -> Iterator[NodeInfo]:
    """Nodes by (subrequest taken, free devices left): for each subrequest in preference order,
    the nodes where it is the first one that fits, fewest free devices first."""
    for i, (count, order) in enumerate(options):
        earlier = [(o.free, c) for c, o in options[:i]]
        for node in order.walk(count, start):
            position = node.index
            if not any(free[position] >= c for free, c in earlier):
                yield node
