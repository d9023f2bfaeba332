"""Per-slice and per-device data computed once when a ResourceSlice is first seen.

Everything the search asks about a device that does not depend on the claim or on what is
allocated lives here: its ID, constraint-ready attribute values, counter consumption in exact
nano-units, blocking taints, parsed capacity policies, node scope and a per-expression cache of
CEL results (a selector's verdict on a device never changes while the slice object is the same).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from draflow.events.api.resource_v1 import Device, DeviceAttribute, DeviceCapacity, DeviceTaint, ResourceSlice
from draflow.events.quantity import Quantity
from draflow.services.dra.structured.model import DeviceID
from draflow.services.dra.structured.nodeselector import CompiledNodeSelector

__all__ = ["AttrValue", "CapacitySpec", "PreparedDevice", "PreparedSlice", "attr_value"]

# Constraint view of an attribute: (kind, set of values, came from a list attribute); scalars
# are one-element sets, so list and scalar values compare alike when list attributes are on.
AttrValue = tuple[str, frozenset[Any], bool]

SCOPE_NONE = 0
SCOPE_NODE = 1
SCOPE_ALL = 2
SCOPE_SELECTOR = 3
SCOPE_PER_DEVICE = 4

_BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
_CEL_CACHE_MAX = 64


def attr_value(a: DeviceAttribute) -> AttrValue | None:
    """Lists win over scalars (as upstream's attributeAsSet); an empty attribute is None."""
    if a.ints:
        return ("int", frozenset(a.ints), True)
    if a.bools:
        return ("bool", frozenset(a.bools), True)
    if a.strings:
        return ("string", frozenset(a.strings), True)
    if a.versions:
        return ("version", frozenset(a.versions), True)
    if a.int_ is not None:
        return _scalar("int", a.int_)
    if a.bool_ is not None:
        return _scalar("bool", a.bool_)
    if a.string is not None:
        return _scalar("string", a.string)
    if a.version is not None:
        return _scalar("version", a.version)
    return None


# One shared value per scalar: the same few attribute values (a model, a family, an index) repeat
# on every device of a cluster, and each copy was a tuple and a set the cyclic GC tracks (80 of
# every 500 tracked objects in a scheduler holding 1,000 nodes' devices).
_SCALARS: dict[tuple[str, object], AttrValue] = {}


def _scalar(kind: str, value: object) -> AttrValue:
    key = (kind, value)
    hit = _SCALARS.get(key)
    if hit is None:
        if len(_SCALARS) >= 65536:  # values unique per device (serial numbers): stay bounded
            _SCALARS.clear()
        hit = _SCALARS[key] = (kind, frozenset((value,)), False)
    return hit


class CapacitySpec:
    """One declared capacity with its request policy, parsed to exact quantities."""

    __slots__ = ("default", "has_range", "max", "min", "step", "valid_values", "value")

    def __init__(self, cap: DeviceCapacity) -> None:
        self.value = Quantity.parse(cap.value)
        pol = cap.request_policy
        self.default: Quantity | None = None
        self.valid_values: tuple[Quantity, ...] = ()
        self.min: Quantity | None = None
        self.max: Quantity | None = None
        self.step: Quantity | None = None
        self.has_range = False
        if pol is not None:
            self.default = Quantity.parse(pol.default) if pol.default is not None else None
            self.valid_values = tuple(Quantity.parse(v) for v in pol.valid_values)
            rng = pol.valid_range
            if rng is not None:
                self.has_range = True
                self.min = Quantity.parse(rng.min) if rng.min is not None else None
                self.max = Quantity.parse(rng.max) if rng.max is not None else None
                self.step = Quantity.parse(rng.step) if rng.step is not None else None


class PreparedDevice:
    """A device plus everything precomputed about it (see module docstring)."""

    __slots__ = (
        "allow_multiple",
        "api",
        "binding_conditions",
        "binding_failure_conditions",
        "binds_to_node",
        "capacity",
        "cel_input",
        "cel_results",
        "consumes",
        "counter_need",
        "id",
        "index",
        "name",
        "node_selector",
        "qattrs",
        "scope",
        "scope_node",
        "slice",
        "taints",
    )

    def __init__(self, slc: PreparedSlice, device: Device, index: int) -> None:
        self.api = device
        self.slice = slc
        self.index = index
        self.name = device.name
        self.id = DeviceID(slc.driver, slc.pool, device.name)
        driver = slc.driver
        qattrs: dict[str, AttrValue | None] = {}
        for key, attr in device.attributes.items():
            if "/" not in key:
                qattrs[f"{driver}/{key}"] = attr_value(attr)
        for key, attr in device.attributes.items():
            qattrs[key] = attr_value(attr)
        self.qattrs = qattrs
        self.consumes: tuple[tuple[str, tuple[tuple[str, int], ...]], ...] = tuple(
            (cc.counter_set, tuple((name, Quantity.parse(c.value).nanos) for name, c in cc.counters.items()))
            for cc in device.consumes_counters
        )
        need: dict[tuple[str, str], int] = {}
        for set_name, counters in self.consumes:
            for name, nanos in counters:
                need[(set_name, name)] = need.get((set_name, name), 0) + nanos
        # Summed consumption per (counter set, counter); what the counter check adds at once.
        self.counter_need: tuple[tuple[tuple[str, str], int], ...] = tuple(need.items())
        self.taints: tuple[DeviceTaint, ...] = tuple(
            t for t in device.taints if t.effect in _BLOCKING_EFFECTS
        )
        self.capacity: dict[str, CapacitySpec] = {k: CapacitySpec(v) for k, v in device.capacity.items()}
        self.allow_multiple = bool(device.allow_multiple_allocations)
        self.binds_to_node = bool(device.binds_to_node)
        self.binding_conditions = device.binding_conditions
        self.binding_failure_conditions = device.binding_failure_conditions
        # Per-device node scope (only meaningful when the slice uses perDeviceNodeSelection).
        self.node_selector: CompiledNodeSelector | None = None
        if device.node_name:
            self.scope, self.scope_node = SCOPE_NODE, device.node_name
        elif device.all_nodes:
            self.scope, self.scope_node = SCOPE_ALL, ""
        elif device.node_selector is not None:
            self.scope, self.scope_node = SCOPE_SELECTOR, ""
            self.node_selector = CompiledNodeSelector(device.node_selector)
        else:
            self.scope, self.scope_node = SCOPE_NONE, ""
        # Filled lazily by the selection code: the CEL input (or the error building it) and
        # expression -> verdict (True/False or the runtime error message).
        self.cel_input: object = None
        self.cel_results: dict[str, bool | str] = {}

    def remember(self, expression: str, verdict: bool | str) -> None:
        if len(self.cel_results) >= _CEL_CACHE_MAX:
            self.cel_results.clear()
        self.cel_results[expression] = verdict

    def matches_node(self, node_name: str, labels: Mapping[str, str]) -> bool:
        """Per-device node scope (NodeMatches); raises NodeSelectorParseError on a bad selector."""
        scope = self.scope
        if scope == SCOPE_NODE:
            return self.scope_node == node_name
        if scope == SCOPE_ALL:
            return True
        if scope == SCOPE_SELECTOR:
            assert self.node_selector is not None
            return self.node_selector.matches(node_name, labels)
        return False

    def __repr__(self) -> str:
        return f"PreparedDevice({self.id})"


class PreparedSlice:
    """A ResourceSlice with its node scope compiled and its devices prepared."""

    __slots__ = (
        "api",
        "counter_sets",
        "devices",
        "driver",
        "generation",
        "has_binding_conditions",
        "name",
        "node_name",
        "node_selector",
        "pool",
        "pool_id",
        "scope",
        "slice_count",
    )

    def __init__(self, slc: ResourceSlice) -> None:
        spec = slc.spec
        self.api = slc
        self.name = slc.metadata.name
        self.driver = spec.driver
        self.pool = spec.pool.name
        self.pool_id = (spec.driver, spec.pool.name)
        self.generation = spec.pool.generation
        self.slice_count = spec.pool.resource_slice_count
        self.node_name = spec.node_name or ""
        self.node_selector: CompiledNodeSelector | None = None
        if self.node_name:
            self.scope = SCOPE_NODE
        elif spec.all_nodes:
            self.scope = SCOPE_ALL
        elif spec.node_selector is not None:
            self.scope = SCOPE_SELECTOR
            self.node_selector = CompiledNodeSelector(spec.node_selector)
        elif spec.per_device_node_selection:
            self.scope = SCOPE_PER_DEVICE
        else:
            self.scope = SCOPE_NONE
        self.counter_sets: tuple[tuple[str, dict[str, int]], ...] = tuple(
            (cs.name, {name: Quantity.parse(c.value).nanos for name, c in cs.counters.items()})
            for cs in spec.shared_counters
        )
        self.devices: tuple[PreparedDevice, ...] = tuple(
            PreparedDevice(self, d, i) for i, d in enumerate(spec.devices)
        )
        self.has_binding_conditions = any(d.binding_conditions for d in self.devices)

    @property
    def per_device(self) -> bool:
        return self.scope == SCOPE_PER_DEVICE

    def __repr__(self) -> str:
        return f"PreparedSlice({self.name})"
