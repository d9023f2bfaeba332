"""Prepared slices, indexed for per-node lookups, reused across scheduling cycles.

``SliceCache`` lives as long as the scheduler: it prepares each ResourceSlice object once
(keyed by object identity; the Structs are frozen, so an unchanged object means unchanged
content, and the cache holds a reference so the identity cannot be reused). ``snapshot(slices)``
gives a ``SliceSnapshot`` (slices by node, slices without a node, slices by pool) that also
caches the gathered pools per node; passing the same slice objects again returns the same
snapshot, so per-node work is done once until a slice changes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from events.api.resource_v1 import ResourceSlice
from services.dra.structured.model import Features, InvalidInputError
from services.dra.structured.pools import NodePools, gather_pools
from services.dra.structured.prepared import PreparedSlice

__all__ = ["SliceCache", "SliceSnapshot"]

_NODE_CACHE_MAX = 8192


class SliceSnapshot:
    """An immutable view of all slices of one moment, plus a per-node pool cache."""

    __slots__ = ("_node_cache", "by_node", "by_pool", "ids", "shared", "slices")

    def __init__(self, slices: Sequence[PreparedSlice], ids: tuple[int, ...] = ()) -> None:
        self.slices = tuple(slices)
        self.ids = ids
        self.by_node: dict[str, list[PreparedSlice]] = {}
        self.shared: list[PreparedSlice] = []
        self.by_pool: dict[tuple[str, str], list[PreparedSlice]] = {}
        for slc in self.slices:
            if slc.node_name:
                self.by_node.setdefault(slc.node_name, []).append(slc)
            else:
                self.shared.append(slc)
            self.by_pool.setdefault(slc.pool_id, []).append(slc)
        self._node_cache: dict[tuple[object, ...], NodePools | InvalidInputError] = {}

    def pools_for(self, node_name: str, labels: Mapping[str, str], features: Features) -> NodePools:
        """Gathered pools of a node (cached by node name, labels and features)."""
        key = (node_name, features, *sorted(labels.items()))
        hit = self._node_cache.get(key)
        if hit is None:
            try:
                hit = gather_pools(
                    node_name, labels, self.by_node.get(node_name, ()), self.shared, self.by_pool, features
                )
            except InvalidInputError as exc:
                hit = exc
            if len(self._node_cache) >= _NODE_CACHE_MAX:
                self._node_cache.clear()
            self._node_cache[key] = hit
        if isinstance(hit, InvalidInputError):
            raise InvalidInputError(str(hit))
        return hit


class SliceCache:
    """Long-lived cache of prepared slices (see module docstring)."""

    __slots__ = ("_last", "_prepared")

    def __init__(self) -> None:
        self._prepared: dict[int, tuple[ResourceSlice, PreparedSlice]] = {}
        self._last: SliceSnapshot | None = None

    def snapshot(self, slices: Sequence[ResourceSlice]) -> SliceSnapshot:
        ids = tuple(id(s) for s in slices)
        last = self._last
        if last is not None and last.ids == ids:
            return last
        fresh: dict[int, tuple[ResourceSlice, PreparedSlice]] = {}
        prepared: list[PreparedSlice] = []
        for slc in slices:
            entry = self._prepared.get(id(slc))
            if entry is None or entry[0] is not slc:
                entry = (slc, PreparedSlice(slc))
            fresh[id(slc)] = entry
            prepared.append(entry[1])
        self._prepared = fresh
        snap = SliceSnapshot(prepared, ids)
        self._last = snap
        return snap
