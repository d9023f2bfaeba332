"""Prepared slices, indexed for per-node lookups, reused across scheduling cycles.

``SliceCache`` lives as long as the scheduler: it prepares each ResourceSlice object once
(keyed by object identity; the Structs are frozen, so an unchanged object means unchanged
content, and the cache holds a reference so the identity cannot be reused). ``snapshot(slices)``
gives a ``SliceSnapshot`` (slices by node, slices without a node, slices by pool) that also
caches the gathered pools per node; passing the same slice objects again returns the same
snapshot, so per-node work is done once until a slice changes. ``update(changed, nodes)`` gives
the next snapshot after a few slices changed without looking at the others: the per-node and
per-pool lists of the changed slices are rebuilt, the rest (and the gathered pools of every node
outside ``nodes``) is shared with the previous snapshot, so a slice republished on a 5,000-node
cluster costs what that slice costs, not what the cluster does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from draflow.events.api.resource_v1 import ResourceSlice
from draflow.services.dra.structured.model import Features, InvalidInputError
from draflow.services.dra.structured.pools import NodePools, gather_pools
from draflow.services.dra.structured.prepared import PreparedSlice

__all__ = ["SliceCache", "SliceSnapshot"]

_NODE_CACHE_MAX = 8192


class SliceSnapshot:
    """An immutable view of all slices of one moment, plus a per-node pool cache."""

    __slots__ = ("_by_name", "_node_cache", "_slices", "by_node", "by_pool", "ids", "shared")

    def __init__(self, slices: Sequence[PreparedSlice], ids: tuple[int, ...] | None = ()) -> None:
        self._slices: tuple[PreparedSlice, ...] | None = tuple(slices)
        self._by_name = {slc.name: slc for slc in self._slices}
        self.ids = ids  # the slice objects' identities (None: built by ``updated``)
        self.by_node: dict[str, list[PreparedSlice]] = {}
        self.shared: list[PreparedSlice] = []
        self.by_pool: dict[tuple[str, str], list[PreparedSlice]] = {}
        for slc in self._slices:
            if slc.node_name:
                self.by_node.setdefault(slc.node_name, []).append(slc)
            else:
                self.shared.append(slc)
            self.by_pool.setdefault(slc.pool_id, []).append(slc)
        # node name -> (features, labels) -> its gathered pools
        self._node_cache: dict[str, dict[tuple[object, ...], NodePools | InvalidInputError]] = {}

    @property
    def slices(self) -> tuple[PreparedSlice, ...]:
        """Every slice, in the order given (by name after ``updated``)."""
        if self._slices is None:
            self._slices = tuple(self._by_name[name] for name in sorted(self._by_name))
        return self._slices

    def get(self, name: str) -> PreparedSlice | None:
        return self._by_name.get(name)

    def updated(
        self, removed: Sequence[PreparedSlice], added: Sequence[PreparedSlice], nodes: Iterable[str]
    ) -> SliceSnapshot:
        """The snapshot with ``removed`` gone and ``added`` in (a changed slice is both), sharing
        everything else; the cached pools of ``nodes`` (those whose view the change can alter,
        which must include every node of the changed slices) are dropped, the others kept."""
        new = SliceSnapshot.__new__(SliceSnapshot)
        new._slices = None
        new.ids = None
        by_name = new._by_name = dict(self._by_name)
        for slc in removed:
            if by_name.get(slc.name) is slc:
                del by_name[slc.name]
        for slc in added:
            by_name[slc.name] = slc
        new.by_node = dict(self.by_node)
        new.by_pool = dict(self.by_pool)
        new.shared = self.shared
        for slc in (*removed, *added):
            if slc.node_name:
                new.by_node[slc.node_name] = _relisted(self.by_node.get(slc.node_name, ()), by_name)
                if not new.by_node[slc.node_name]:
                    del new.by_node[slc.node_name]
            elif new.shared is self.shared:
                new.shared = _relisted(self.shared, by_name)
            new.by_pool[slc.pool_id] = _relisted(self.by_pool.get(slc.pool_id, ()), by_name)
            if not new.by_pool[slc.pool_id]:
                del new.by_pool[slc.pool_id]
        for slc in added:  # a slice new to its node or pool, in name order like a full build
            if slc.node_name and slc not in new.by_node.get(slc.node_name, ()):
                new.by_node[slc.node_name] = _by_name((*new.by_node.get(slc.node_name, ()), slc))
            elif not slc.node_name and slc not in new.shared:
                new.shared = _by_name((*new.shared, slc))
            if slc not in new.by_pool.get(slc.pool_id, ()):
                new.by_pool[slc.pool_id] = _by_name((*new.by_pool.get(slc.pool_id, ()), slc))
        new._node_cache = dict(self._node_cache)  # keeps the stored hashes: no key is rehashed
        for node in nodes:
            new._node_cache.pop(node, None)
        return new

    def pools_for(self, node_name: str, labels: Mapping[str, str], features: Features) -> NodePools:
        """Gathered pools of a node (cached by node name, labels and features)."""
        key = (features, *sorted(labels.items()))
        per_node = self._node_cache.get(node_name)
        hit = per_node.get(key) if per_node is not None else None
        if hit is None:
            try:
                hit = gather_pools(
                    node_name, labels, self.by_node.get(node_name, ()), self.shared, self.by_pool, features
                )
            except InvalidInputError as exc:
                hit = exc
            if per_node is None:
                if len(self._node_cache) >= _NODE_CACHE_MAX:
                    self._node_cache.clear()
                per_node = self._node_cache[node_name] = {}
            elif len(per_node) >= 4:  # the node's labels keep changing: keep the newest only
                per_node.clear()
            per_node[key] = hit
        if isinstance(hit, InvalidInputError):
            raise InvalidInputError(str(hit))
        return hit


def _by_name(slices: Iterable[PreparedSlice]) -> list[PreparedSlice]:
    return sorted(slices, key=lambda s: s.name)


def _relisted(old: Iterable[PreparedSlice], by_name: Mapping[str, PreparedSlice]) -> list[PreparedSlice]:
    """``old`` without the slices no longer current (new ones are added by the caller)."""
    return [slc for slc in old if by_name.get(slc.name) is slc]


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

    def has_snapshot(self) -> bool:
        return self._last is not None

    def update(
        self, changed: Mapping[str, ResourceSlice | None], nodes: Iterable[str]
    ) -> tuple[SliceSnapshot, list[PreparedSlice], list[PreparedSlice]]:
        """The last snapshot with the slices named in ``changed`` replaced (None: deleted), see
        :meth:`SliceSnapshot.updated`; also the prepared slices removed and added. Requires a
        previous snapshot."""
        last = self._last
        assert last is not None, "update() needs a snapshot to start from"
        removed: list[PreparedSlice] = []
        added: list[PreparedSlice] = []
        for name, slc in changed.items():
            old = last.get(name)
            if old is not None and slc is not None and old.api is slc:
                continue  # the same object: nothing changed
            if old is not None:
                removed.append(old)
                self._prepared.pop(id(old.api), None)
            if slc is not None:
                entry = self._prepared.get(id(slc))
                if entry is None or entry[0] is not slc:
                    entry = (slc, PreparedSlice(slc))
                    self._prepared[id(slc)] = entry
                added.append(entry[1])
        snap = last.updated(removed, added, nodes)
        self._last = snap
        return snap, removed, added
