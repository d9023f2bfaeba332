"""Per-node device index for cheap DRA prechecks: how many matching devices are still free.

The structured allocator answers "do these claims fit on this node" exactly, at ~50 µs a node;
asking it about 500 nodes per pod would cost 25 ms. This index answers a necessary condition in
about a microsecond: for a request signature (device class + the request's own CEL selectors) it
keeps, per node, the devices that match, and counts how many are not allocated. Counts are
cached per node and recomputed only after a device of that node changed hands (usage
generations), so a cycle touches a few dict entries per node.

Ignored here (the allocator still checks them): constraints, taints, counters (partitionable
devices), consumable capacity, and devices that can be allocated many times (counted as always
available). A CEL error (a selector failing at runtime, a device whose attributes cannot be CEL
input) counts as a match, so the allocator reports it; the entry counts such devices
(``SigEntry.errors``) so the scheduler knows on which nodes the allocator may fail with an error
(upstream aborts the pod's attempt when any node it filters does).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from draflow.events.api.resource_v1 import DeviceClass, ResourceSlice
from draflow.services.dra import cel
from draflow.services.dra.structured import DeviceID, Features, InvalidInputError, SliceCache, SliceSnapshot
from draflow.services.dra.structured.prepared import PreparedDevice
from draflow.services.dra.structured.selection import attribute_value
from draflow.services.scheduler.framework.devorder import SigOrder
from draflow.services.scheduler.framework.nodeinfo import NodeInfo

__all__ = ["DeviceIndex", "NodeDevices", "Sig", "SigEntry"]

# A request signature: (device class name, the request's CEL selector expressions).
Sig = tuple[str, tuple[str, ...]]

_MISSING = object()


class SigEntry:
    """Matching devices of one signature on one node and the cached free count; ``errors``: how
    many of them match only because a selector failed on them (the allocator raises there)."""

    __slots__ = ("devices", "errors", "free", "multi", "node_gen", "shared_gen")

    def __init__(self, devices: tuple[DeviceID, ...], multi: int, errors: int = 0) -> None:
        self.devices = devices
        self.multi = multi
        self.errors = errors
        self.free = -1
        self.node_gen = -1
        self.shared_gen = -1

    @property
    def total(self) -> int:
        return len(self.devices) + self.multi


class NodeDevices:
    """The DRA view of one node: candidate devices (from gathered pools) and signature entries."""

    __slots__ = ("candidates", "entries", "error", "off_node")

    def __init__(
        self,
        candidates: Sequence[PreparedDevice],
        off_node: Iterable[tuple[str, str, str]],
        error: str | None = None,
    ) -> None:
        self.candidates = candidates
        self.off_node = frozenset(off_node)
        self.error = error
        self.entries: dict[Sig, SigEntry] = {}


class _DeviceCel:
    __slots__ = ("input", "verdicts")

    def __init__(self, value: cel.DeviceInput | None) -> None:
        self.input = value
        # True / False, or None: the expression failed on this device (compile or runtime error)
        self.verdicts: dict[str, bool | None] = {}


class DeviceIndex:
    """Slice snapshot (rebuilt lazily after slice changes) plus the per-node signature index."""

    def __init__(
        self,
        features: Features,
        exclusive: dict[DeviceID, int],
        effective_slices: Callable[[], list[ResourceSlice]],
    ) -> None:
        self.features = features
        self._exclusive = exclusive  # the ledger's live exclusive-usage counts
        self._effective_slices = effective_slices
        self._cache = SliceCache()
        self._snapshot: SliceSnapshot | None = None
        self._dirty_nodes: set[str] | None = set()  # None = everything
        # slices changed since the last snapshot, by name (None: rebuild from every slice)
        self._pending: dict[str, ResourceSlice | None] | None = None
        self._nodes: dict[str, NodeDevices] = {}
        self._cel: dict[PreparedDevice, _DeviceCel] = {}
        self.device_node: dict[DeviceID, str | None] = {}
        self.node_usage: dict[str, int] = {}
        self.node_release: dict[str, int] = {}
        self._orders: dict[Sig, SigOrder] = {}
        self.shared_usage = 0
        self.shared_release = 0
        self.global_gen = 0
        # set once any signature entry counted a device on which a selector fails: only then
        # does the DRA Filter look for such devices per node (a hint, never cleared)
        self.any_errors = False

    # -- invalidation -------------------------------------------------------------------------
    def slices_changed(
        self, nodes: set[str] | None, changed: dict[str, ResourceSlice | None] | None = None
    ) -> None:
        """Slices changed; ``nodes`` are the nodes whose view changed (None: all of them).
        ``changed``: the effective slices by name (None: deleted); with it and ``nodes`` the next
        snapshot is the last one updated for those slices (incremental), else rebuilt from all."""
        if nodes is None or self._dirty_nodes is None:
            self._dirty_nodes = None
        else:
            self._dirty_nodes |= nodes
        if changed is None or self._dirty_nodes is None or self._pending is None:
            self._pending = None
        else:
            self._pending.update(changed)
        self._snapshot = None

    def node_changed(self, name: str) -> None:
        """Labels (pool relevance) changed or the node went away."""
        self._nodes.pop(name, None)
        self.node_release[name] = self.node_release.get(name, 0) + 1
        for order in self._orders.values():
            order.dirty.add(name)

    def classes_changed(self) -> None:
        for nd in self._nodes.values():
            nd.entries.clear()
        self._orders.clear()
        self.global_gen += 1

    def devices_changed(self, devices: Iterable[DeviceID], released: bool) -> None:
        """Bump usage generations of the nodes owning these devices."""
        device_node = self.device_node
        for did in devices:
            node = device_node.get(did, _MISSING)
            if node is _MISSING:
                continue
            if node is None:
                self.shared_usage += 1
                if released:
                    self.shared_release += 1
                for order in self._orders.values():
                    order.all_dirty = True
            else:
                assert isinstance(node, str)
                self.node_usage[node] = self.node_usage.get(node, 0) + 1
                if released:
                    self.node_release[node] = self.node_release.get(node, 0) + 1
                for order in self._orders.values():
                    order.dirty.add(node)

    # -- reads --------------------------------------------------------------------------------
    def snapshot(self) -> SliceSnapshot:
        snap = self._snapshot
        if snap is None:
            snap = self._rebuild()
        return snap

    def release_stamp(self, node: str) -> tuple[int, int, int]:
        """Changes only when something could make more room on ``node`` (negative-cache key)."""
        return (self.node_release.get(node, 0), self.shared_release, self.global_gen)

    def node(self, name: str, labels: dict[str, str]) -> NodeDevices:
        if self._snapshot is None:
            self._rebuild()
        nd = self._nodes.get(name)
        if nd is None:
            snap = self._snapshot
            assert snap is not None
            try:
                pools = snap.pools_for(name, labels, self.features)
            except InvalidInputError as exc:
                nd = NodeDevices((), (), str(exc))
            else:
                nd = NodeDevices(pools.candidates, pools.device_off_node)
            self._nodes[name] = nd
        return nd

    def entry(self, nd: NodeDevices, node: str, sig: Sig, cls: DeviceClass) -> SigEntry:
        """The signature entry with an up-to-date free count."""
        entry = nd.entries.get(sig)
        if entry is None:
            entry = self._build_entry(nd, sig, cls)
            nd.entries[sig] = entry
        node_gen = self.node_usage.get(node, 0)
        if entry.node_gen != node_gen or entry.shared_gen != self.shared_usage:
            exclusive = self._exclusive
            entry.free = sum(1 for did in entry.devices if did not in exclusive)
            entry.node_gen = node_gen
            entry.shared_gen = self.shared_usage
        return entry

    def best_fit_order(self, sig: Sig, cls: DeviceClass, nodes: list[NodeInfo]) -> SigOrder | None:
        """The up-to-date best-fit index of ``sig`` over ``nodes`` (None: its order is not exact)."""
        if self._snapshot is None:
            self._rebuild()
        order = self._orders.get(sig)
        if order is None or order.nodes is not nodes or order.cls is not cls:
            order = self._orders[sig] = SigOrder(self, sig, cls, nodes)
        else:
            order.refresh()
        if order.unusable:
            return None
        return order

    # -- internals ----------------------------------------------------------------------------
    def _rebuild(self) -> SliceSnapshot:
        if self._pending is not None and self._dirty_nodes is not None and self._cache.has_snapshot():
            return self._update(self._pending, self._dirty_nodes)
        snap = self._cache.snapshot(self._effective_slices())
        self._snapshot = snap
        self._pending = {}
        device_node: dict[DeviceID, str | None] = {}
        live: dict[PreparedDevice, _DeviceCel] = {}
        old_cel = self._cel
        for slc in snap.slices:
            for dev in slc.devices:
                owner = slc.node_name or (dev.scope_node if slc.per_device else "") or None
                device_node[dev.id] = owner
                hit = old_cel.get(dev)
                if hit is not None:
                    live[dev] = hit
        self.device_node = device_node
        self._cel = live
        self._settle_dirty()
        return snap

    def _settle_dirty(self) -> None:
        dirty = self._dirty_nodes
        if dirty is None:
            self._nodes.clear()
            self._orders.clear()
            self.global_gen += 1
        else:
            for name in dirty:
                self.node_changed(name)
        self._dirty_nodes = set()

    def _update(self, changed: dict[str, ResourceSlice | None], nodes: set[str]) -> SliceSnapshot:
        """The snapshot after a few slices changed: only their devices are looked at (a slice
        republished on a 5,000-node cluster no longer walks every device of every slice)."""
        snap, removed, added = self._cache.update(changed, nodes)
        self._snapshot = snap
        self._pending = {}
        device_node = self.device_node
        pools: set[tuple[str, str]] = set()
        for slc in removed:
            pools.add(slc.pool_id)
            for dev in slc.devices:
                device_node.pop(dev.id, None)
                self._cel.pop(dev, None)
        for slc in added:
            pools.add(slc.pool_id)
        for pool in sorted(pools):  # devices of a pool, as a full rebuild would map them
            for slc in snap.by_pool.get(pool, ()):
                for dev in slc.devices:
                    device_node[dev.id] = slc.node_name or (dev.scope_node if slc.per_device else "") or None
        self._settle_dirty()
        return snap

    def _build_entry(self, nd: NodeDevices, sig: Sig, cls: DeviceClass) -> SigEntry:
        expressions: list[str] = []
        for sel in cls.spec.selectors:
            if sel.cel is None:
                return SigEntry((), 1 << 30)  # allocator reports the unsupported selector
            expressions.append(sel.cel.expression)
        expressions.extend(sig[1])
        features = self.features
        devices: list[DeviceID] = []
        multi = 0
        errors = 0
        for dev in nd.candidates:
            if dev.id in nd.off_node:
                continue
            if dev.binding_conditions and not features.device_binding_and_status:
                continue
            verdict = self._matches(dev, expressions)
            if verdict is False:
                continue
            if verdict is None:
                errors += 1
            if dev.allow_multiple and features.consumable_capacity:
                multi += 1
            else:
                devices.append(dev.id)
        if errors:
            self.any_errors = True
        return SigEntry(tuple(devices), multi, errors)

    def _matches(self, dev: PreparedDevice, expressions: list[str]) -> bool | None:
        """All expressions true on ``dev``? None: one of them fails there (an error, which counts
        as a match: the allocator reports it)."""
        state = self._cel.get(dev)
        if state is None:
            try:
                attributes = {name: attribute_value(a) for name, a in dev.api.attributes.items()}
                capacity = {name: spec.value for name, spec in dev.capacity.items()}
                value: cel.DeviceInput | None = cel.prepare_device(
                    dev.slice.driver, attributes, capacity, dev.allow_multiple
                )
            except (ValueError, cel.CelError):
                value = None
            state = self._cel[dev] = _DeviceCel(value)
        if state.input is None:
            return None if expressions else True  # the allocator reports the broken device
        for expression in expressions:
            if expression in state.verdicts:
                verdict = state.verdicts[expression]
            else:
                try:
                    verdict = bool(cel.compile_expression(expression).evaluate(state.input))
                except cel.CelError:
                    verdict = None  # compile/runtime errors: let the allocator report them
                state.verdicts[expression] = verdict
            if verdict is None:
                return None
            if not verdict:
                return False
        return True
