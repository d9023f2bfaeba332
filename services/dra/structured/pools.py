"""Which resource pools a node can use, in device search order (upstream GatherPools).

For a node the candidate slices are its node-local slices followed by every slice without a
nodeName. Relevant slices are grouped by (driver, pool); only the newest generation counts. A
pool whose relevant slices do not add up to resourceSliceCount is re-checked against all slices of
the pool in the cluster: obsolete (a newer generation exists) pools are dropped, incomplete ones
are kept as markers, complete ones take the extra slices along for counter bookkeeping. Pools are
sorted by (driver, pool), pools with binding conditions last; slices by name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from services.dra.structured.model import Features, InvalidInputError
from services.dra.structured.nodeselector import NodeSelectorParseError
from services.dra.structured.prepared import SCOPE_NONE, SCOPE_PER_DEVICE, PreparedDevice, PreparedSlice

__all__ = ["NodePools", "Pool", "gather_pools"]


class Pool:
    """One resource pool as seen from one node."""

    __slots__ = (
        "counter_sets",
        "devices",
        "driver",
        "has_binding_conditions",
        "id",
        "incomplete",
        "invalid",
        "invalid_reason",
        "name",
        "other_devices",
        "slices",
    )

    def __init__(self, pool_id: tuple[str, str]) -> None:
        self.id = pool_id
        self.driver, self.name = pool_id
        self.incomplete = False
        self.invalid = False
        self.invalid_reason = ""
        self.slices: list[PreparedSlice] = []  # device slices targeting the node, by name
        self.devices: list[PreparedDevice] = []  # their devices, in search order
        self.other_devices: list[PreparedDevice] = []  # devices of slices not targeting the node
        self.counter_sets: dict[str, dict[str, int]] = {}
        self.has_binding_conditions = False

    def __str__(self) -> str:
        return f"{self.driver}/{self.name}"

    def __repr__(self) -> str:
        flags = "incomplete" if self.incomplete else ("invalid" if self.invalid else "ok")
        return f"Pool({self}, {flags}, {len(self.devices)} devices)"


class NodePools:
    """The gathered pools of one node plus the flat candidate list the search walks."""

    __slots__ = ("by_id", "candidates", "device_off_node", "has_invalid", "pools")

    def __init__(self, pools: list[Pool], device_off_node: dict[tuple[str, str, str], str | None]) -> None:
        self.pools = pools
        self.by_id = {p.id: p for p in pools}
        self.candidates: tuple[PreparedDevice, ...] = tuple(
            d for p in pools if not (p.incomplete or p.invalid) for d in p.devices
        )
        self.has_invalid = any(p.invalid for p in pools)
        # Devices of perDeviceNodeSelection slices that do not match the node: None = no match,
        # a string = the node selector could not be parsed (a fatal error once the device is tried).
        self.device_off_node = device_off_node


def _relevant(
    slc: PreparedSlice,
    node_name: str,
    labels: Mapping[str, str],
    off_node: dict[tuple[str, str, str], str | None],
) -> bool:
    if slc.scope == SCOPE_PER_DEVICE:
        relevant = False
        for dev in slc.devices:
            try:
                ok = dev.matches_node(node_name, labels)
            except NodeSelectorParseError as exc:
                if not relevant:
                    raise InvalidInputError(
                        f"gather pool information: failed to perform node selection for device {dev.name} "
                        f"in slice {slc.name}: {exc}"
                    ) from None
                off_node[dev.id] = str(exc)
                continue
            if ok:
                relevant = True
            else:
                off_node[dev.id] = None
        return relevant
    if slc.scope == SCOPE_NONE:
        return False
    if slc.node_selector is not None:
        try:
            return slc.node_selector.matches(node_name, labels)
        except NodeSelectorParseError as exc:
            raise InvalidInputError(
                f"gather pool information: failed to perform node selection for slice {slc.name}: {exc}"
            ) from None
    return slc.node_name == node_name if slc.node_name else True


def _build(
    pool_id: tuple[str, str],
    relevant: list[PreparedSlice],
    extra: Sequence[PreparedSlice],
    features: Features,
) -> Pool:
    pool = Pool(pool_id)
    relevant = sorted(relevant, key=lambda s: s.name)
    counter_slices: list[PreparedSlice] = []
    other_slices: list[PreparedSlice] = []
    for slc in relevant:
        if features.partitionable_devices and slc.counter_sets:
            counter_slices.append(slc)
        else:
            pool.slices.append(slc)
    if extra:
        names = {s.name for s in relevant}
        for slc in extra:
            if slc.name in names:
                continue
            if features.partitionable_devices and slc.counter_sets:
                counter_slices.append(slc)
            else:
                other_slices.append(slc)
    pool.devices = [d for s in pool.slices for d in s.devices]
    pool.other_devices = [d for s in other_slices for d in s.devices]
    pool.has_binding_conditions = any(s.has_binding_conditions for s in pool.slices)

    seen: set[str] = set()
    for dev in pool.devices:
        if dev.name in seen:
            return _invalid(pool, f"duplicate device name {dev.name}")
        seen.add(dev.name)
    if not features.partitionable_devices:
        return pool
    for slc in counter_slices:
        for set_name, counters in slc.counter_sets:
            if set_name in pool.counter_sets:
                return _invalid(pool, f"duplicate counter set name {set_name}")
            pool.counter_sets[set_name] = counters
    for dev in (*pool.devices, *pool.other_devices):
        for set_name, used in dev.consumes:
            cs = pool.counter_sets.get(set_name)
            if cs is None:
                return _invalid(pool, f"counter set {set_name} not found")
            for counter, _ in used:
                if counter not in cs:
                    return _invalid(pool, f"counter {counter} not found in counter set {set_name}")
    return pool


def _invalid(pool: Pool, reason: str) -> Pool:
    bad = Pool(pool.id)
    bad.invalid = True
    bad.invalid_reason = reason
    return bad


def gather_pools(
    node_name: str,
    labels: Mapping[str, str],
    local_slices: Sequence[PreparedSlice],
    shared_slices: Sequence[PreparedSlice],
    slices_by_pool: Mapping[tuple[str, str], Sequence[PreparedSlice]],
    features: Features,
) -> NodePools:
    """Raises InvalidInputError when a node selector cannot be parsed (fatal upstream too)."""
    groups: dict[tuple[str, str], list[PreparedSlice]] = {}
    off_node: dict[tuple[str, str, str], str | None] = {}
    for slc in (*local_slices, *shared_slices):
        if not features.partitionable_devices and (
            slc.api.spec.per_device_node_selection is not None or slc.counter_sets
        ):
            continue
        if not _relevant(slc, node_name, labels, off_node):
            continue
        group = groups.get(slc.pool_id)
        if group is None or slc.generation > group[0].generation:
            groups[slc.pool_id] = [slc]
        elif slc.generation == group[0].generation:
            group.append(slc)

    normal: list[Pool] = []
    late: list[Pool] = []
    for pool_id, group in groups.items():
        generation, wanted = group[0].generation, group[0].slice_count
        extra: list[PreparedSlice] = []
        if len(group) != wanted:
            obsolete = False
            for slc in slices_by_pool.get(pool_id, ()):
                if slc.generation > generation:
                    obsolete = True
                    break
                if slc.generation == generation:
                    extra.append(slc)
            if obsolete:
                continue
            if len(extra) != wanted:
                marker = Pool(pool_id)
                marker.incomplete = True
                normal.append(marker)
                continue
        pool = _build(pool_id, group, extra, features)
        (late if pool.has_binding_conditions else normal).append(pool)
    normal.sort(key=lambda p: p.id)
    late.sort(key=lambda p: p.id)
    return NodePools(normal + late, off_node)
