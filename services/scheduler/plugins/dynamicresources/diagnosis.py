"""DynamicResources' side of the per-request diagnosis (issue 26): which request failed where.

Nodes the allocator said no to carry its diagnosis (``draflow.services.dra.structured.diagnosis``,
a by-product of the search); nodes the device-index precheck turned away before the allocator was
asked get lines from the index counts (``precheck.index_diagnosis``). The negative cache keeps the
allocator's lines with its verdict, so a cached "no" still says why.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import msgspec

from draflow.events.api.resource_v1 import ResourceClaim
from draflow.events.dra import RequestDiagnosis
from draflow.services.dra.structured.diagnosis import group
from draflow.services.scheduler.framework.cluster import ClusterState
from draflow.services.scheduler.framework.devices import Sig
from draflow.services.scheduler.framework.devorder import SigOrder
from draflow.services.scheduler.framework.nodeinfo import NodeInfo
from draflow.services.scheduler.plugins.dynamicresources.precheck import Slot, index_diagnosis

__all__ = ["Negative", "explain_nodes", "refs"]


def explain_nodes(
    cluster: ClusterState,
    rejected: Sequence[str],
    diagnoses: dict[str, list[RequestDiagnosis]],
    slots: list[Slot] | None,
    orders: Mapping[Sig, SigOrder] | None = None,
) -> tuple[RequestDiagnosis, ...]:
    """The grouped lines for the ``rejected`` nodes: the allocator's where it ran, the index
    counts elsewhere."""
    lines: list[RequestDiagnosis] = []
    by_index: list[NodeInfo] = []
    for node_name in rejected:
        found = diagnoses.get(node_name)
        if found is not None:
            lines += found
            continue
        node = cluster.nodes.get(node_name)
        if node is not None:
            by_index.append(node)
    if by_index and slots:
        lines += index_diagnosis(cluster.devices, by_index, slots, orders)
    return group(lines)


def refs(claims: list[ResourceClaim]) -> tuple[str, ...]:
    return tuple(f"{c.metadata.namespace}/{c.metadata.name}" for c in claims)


class Negative:
    """A negative-cache entry: the node's release stamp when the allocator said no, and its
    diagnosis (reused for another pod whose claims have the same specs, named after its claims;
    the counts are those of the allocator run)."""

    __slots__ = ("lines", "refs", "stamp")

    def __init__(
        self, stamp: tuple[int, int, int], refs: tuple[str, ...], lines: list[RequestDiagnosis]
    ) -> None:
        self.stamp = stamp
        self.refs = refs
        self.lines = lines

    def lines_for(self, claims: list[ResourceClaim]) -> list[RequestDiagnosis]:
        names = refs(claims)
        if names == self.refs:
            return self.lines
        rename = dict(zip(self.refs, names, strict=False))
        return [msgspec.structs.replace(x, claim=rename.get(x.claim, x.claim)) for x in self.lines]
