"""ResourceSlice validation (``validateResourceSliceSpec`` and ``validateDevice`` upstream)."""

from __future__ import annotations

from events.api import resource_v1 as r1
from events.quantity import Quantity
from services.dra.validation import common as c
from services.dra.validation import names
from services.dra.validation.errs import Errs
from services.dra.validation.meta import validate_meta_update, validate_object_meta

MAX_DEVICES = 128
MAX_DEVICES_ADVANCED = 64  # with taints, consumesCounters or list attributes
MAX_COUNTER_SETS = 8
MAX_COUNTERS_PER_SET = 32
MAX_CONSUMPTIONS_PER_DEVICE = 2
MAX_COUNTERS_PER_CONSUMPTION = 32
MAX_ATTRS_AND_CAPS = 32
MAX_ATTRIBUTE_VALUES = 48
MAX_TAINTS = 16
MAX_VALID_VALUES = 10
ATTRIBUTE_VALUE_MAX = 64
_NODE_SCOPE = "exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required"
_ONE_POLICY = (
    'exactly one policy can be specified, cannot specify "validValues" and "validRange" at the same time'
)
_PARTITION_ONLY = "may only be set on a slice which declares devices that consume counters"
_PARTITION_REQUIRED = (
    "device consumes counters and `partitionTypeAttribute` names this attribute, so it must be set"
)
_DEVICE_SCOPE = (
    "exactly one of `nodeName`, `nodeSelector`, or `allNodes` is required when `perDeviceNodeSelection` "
    "is set to true in the ResourceSlice spec"
)


def _attribute(errs: Errs, attr: r1.DeviceAttribute, path: str) -> None:
    set_count = 0
    set_count += (attr.int_ is not None) + (attr.bool_ is not None)
    if attr.string is not None:
        set_count += 1
        if len(attr.string) > ATTRIBUTE_VALUE_MAX:
            errs.too_long(f"{path}.string", ATTRIBUTE_VALUE_MAX)
    if attr.version is not None:
        set_count += 1
        _version(errs, attr.version, f"{path}.version")
    for field, values in (
        ("bools", attr.bools),
        ("ints", attr.ints),
        ("strings", attr.strings),
        ("versions", attr.versions),
    ):
        if values is None:
            continue
        set_count += 1
        if not values:
            errs.invalid(f"{path}.{field}", [], "must not be empty if specified")
        for i, v in enumerate(values):
            if field == "strings" and isinstance(v, str) and len(v) > ATTRIBUTE_VALUE_MAX:
                errs.too_long(f"{path}.strings[{i}]", ATTRIBUTE_VALUE_MAX)
            elif field == "versions" and isinstance(v, str):
                _version(errs, v, f"{path}.versions[{i}]")
    if set_count != 1:
        errs.invalid_detail(path, "exactly one value must be specified")


def _version(errs: Errs, value: str, path: str) -> None:
    if not names.is_semver(value):
        errs.invalid(path, value, "must be a string compatible with semver.org spec 2.0.0")
    if len(value) > ATTRIBUTE_VALUE_MAX:
        errs.too_long(path, ATTRIBUTE_VALUE_MAX)


def _request_policy(errs: Errs, capacity: r1.DeviceCapacity, path: str) -> None:
    policy = capacity.request_policy
    if policy is None:
        return
    maximum = Quantity.parse(capacity.value)
    if policy.valid_values and policy.valid_range is not None:
        errs.forbidden(path, _ONE_POLICY)
        return
    if policy.valid_values:
        if policy.default is None:
            errs.required(f"{path}.default", "required when validValues is defined")
            return
        default = Quantity.parse(policy.default)
        _valid_values(errs, default, maximum, policy.valid_values, f"{path}.validValues")
    elif policy.valid_range is not None:
        if policy.default is None:
            errs.required(f"{path}.default", "required when validRange is defined")
            return
        _valid_range(errs, Quantity.parse(policy.default), maximum, policy.valid_range, f"{path}.validRange")


def _valid_values(
    errs: Errs, default: Quantity, maximum: Quantity, raw: tuple[str | int | float, ...], at: str
) -> None:
    """Upstream validateRequestPolicyValidValues: sorted, then the set (too many short-circuits the
    items, so the default is then "not valid" too), duplicates keyed by the whole-unit value."""
    values = [Quantity.parse(v) for v in raw]
    for i in range(len(values) - 1):
        if values[i] > values[i + 1]:
            errs.invalid(f"{at}[{i + 1}]", str(values[i + 1]), "values must be sorted in ascending order")
    found_default = False
    if len(values) > MAX_VALID_VALUES:
        errs.too_many(at, len(values), MAX_VALID_VALUES)
    else:
        for i, v in enumerate(values):
            if v > maximum:
                errs.invalid(f"{at}[{i}]", str(v), f"option is larger than capacity value: {maximum}")
            found_default = found_default or v == default
        seen: set[int] = set()
        for i, v in enumerate(values):
            key = v.value()  # upstream's quantityKey: the value rounded up to a whole unit
            if key in seen:
                errs.duplicate(f"{at}[{i}]", str(key))
            seen.add(key)
    if not found_default:
        errs.invalid(at, str(default), "default value is not valid according to the requestPolicy")


def _valid_range(
    errs: Errs, default: Quantity, maximum: Quantity, rng: r1.CapacityRequestPolicyRange, path: str
) -> None:
    if rng.min is None:
        errs.required(f"{path}.min", "required when validRange is defined")
        return
    lo = Quantity.parse(rng.min)
    if lo > maximum:
        errs.invalid(f"{path}.min", str(lo), f"min is larger than capacity value: {maximum}")
    if default < lo:
        errs.invalid(f"{path}.min", str(default), f"default is less than min: {lo}")
    if rng.max is not None:
        hi = Quantity.parse(rng.max)
        if lo > hi:
            errs.invalid(f"{path}.max", str(lo), f"min is larger than max: {hi}")
        if hi > maximum:
            errs.invalid(f"{path}.max", str(hi), f"max is larger than capacity value: {maximum}")
        if default > hi:
            errs.invalid(f"{path}.max", str(default), f"default is more than max: {hi}")
    if rng.step is None:
        return
    step = Quantity.parse(rng.step)
    if step.sign <= 0:
        errs.invalid(f"{path}.step", str(step), "must be greater than zero")
        return
    if lo + step > maximum:
        errs.invalid(
            f"{path}.step", str(step), f"one step {lo + step} is larger than capacity value: {maximum}"
        )
    targets = [default] + ([Quantity.parse(rng.max)] if rng.max is not None else [])
    for value in targets:
        # As upstream: (value - min) a whole number of steps, each rounded up to whole units
        # (Quantity.Value()), so fractional quantities compare as the allocator rounds them.
        if (value.value() - lo.value()) % step.value() != 0:
            errs.invalid(
                f"{path}.step", str(value), f"value is not a multiple of a given step ({step}) from ({lo})"
            )


def _counters(errs: Errs, counters: dict[str, r1.Counter], limit: int, path: str) -> None:
    if not counters:
        errs.required(path)
        return
    if len(counters) > limit:
        errs.too_many(path, len(counters), limit)
        return
    for name in counters:
        errs.messages(path, name, names.dns1123_label(name))


def _counter_name(errs: Errs, name: str, path: str) -> None:
    if not name:
        errs.required(path)
    else:
        errs.messages(path, name, names.dns1123_label(name))


def _node_scope(
    errs: Errs, node_name: str | None, sel: object, all_nodes: bool | None, path: str
) -> list[str]:
    set_fields: list[str] = []
    if node_name is not None:
        if node_name:
            set_fields.append("`nodeName`")
            errs.messages(f"{path}.nodeName", node_name, names.dns1123_subdomain(node_name))
        else:
            errs.invalid(f"{path}.nodeName", node_name, "must be either unset or set to a non-empty string")
    if isinstance(sel, r1.NodeSelector):
        set_fields.append("`nodeSelector`")
        c.node_selector(errs, sel, f"{path}.nodeSelector")
    if all_nodes is not None:
        if all_nodes:
            set_fields.append("`allNodes`")
        else:
            errs.invalid(f"{path}.allNodes", all_nodes, "must be either unset or set to true")
    return set_fields


def _device(errs: Errs, dev: r1.Device, path: str, per_device: bool) -> None:
    errs.messages(f"{path}.name", dev.name, names.dns1123_label(dev.name))
    total = len(dev.attributes) + len(dev.capacity)
    if total > MAX_ATTRS_AND_CAPS:
        errs.invalid(
            path, total, f"the total number of attributes and capacities must not exceed {MAX_ATTRS_AND_CAPS}"
        )
    values = sum(
        (len(a.bools or ()) + len(a.ints or ()) + len(a.strings or ()) + len(a.versions or ())) or 1
        for a in dev.attributes.values()
    )
    if values > MAX_ATTRIBUTE_VALUES:
        errs.invalid(
            path, values, f"the total number of attribute values must not exceed {MAX_ATTRIBUTE_VALUES}"
        )
    for key, attr in dev.attributes.items():
        c.qualified_name(errs, key, f"{path}.attributes")
        _attribute(errs, attr, f"{path}.attributes[{key}]")
    multi = bool(dev.allow_multiple_allocations)
    for key, cap in dev.capacity.items():
        c.qualified_name(errs, key, f"{path}.capacity")
        if cap.request_policy is not None and not multi:
            errs.forbidden(f"{path}.capacity[{key}].requestPolicy", "allowMultipleAllocations must be true")
        elif multi:
            _request_policy(errs, cap, f"{path}.capacity[{key}].requestPolicy")
    c.check_list(errs, dev.taints, MAX_TAINTS, f"{path}.taints", lambda t, p: c.taint(errs, t, p))

    def consumption(cc: r1.DeviceCounterConsumption, p: str) -> None:
        _counter_name(errs, cc.counter_set, f"{p}.counterSet")
        _counters(errs, cc.counters, MAX_COUNTERS_PER_CONSUMPTION, f"{p}.counters")

    c.check_set(
        errs,
        dev.consumes_counters,
        MAX_CONSUMPTIONS_PER_DEVICE,
        f"{path}.consumesCounters",
        consumption,
        lambda cc: cc.counter_set,
    )
    if per_device:
        found = _node_scope(errs, dev.node_name, dev.node_selector, dev.all_nodes, path)
        if not found:
            errs.required(path, _DEVICE_SCOPE)
        elif len(found) > 1:
            errs.invalid(path, "{" + ", ".join(found) + "}", _DEVICE_SCOPE)
    elif dev.node_name is not None or dev.node_selector is not None or dev.all_nodes is not None:
        errs.invalid(
            path,
            None,
            "`nodeName`, `nodeSelector` and `allNodes` can only be set if "
            "`perDeviceNodeSelection` is set to true in the ResourceSlice spec",
        )
    c.binding_conditions(errs, dev.binding_conditions, dev.binding_failure_conditions, path)


def validate_resource_slice(errs: Errs, obj: r1.ResourceSlice, old: r1.ResourceSlice | None) -> None:
    validate_object_meta(errs, obj.metadata, namespaced=False, name_check=names.dns1123_subdomain)
    spec, path = obj.spec, "spec"
    c.driver_name(errs, spec.driver, f"{path}.driver")
    c.pool_name(errs, spec.pool.name, f"{path}.pool.name")
    if spec.pool.resource_slice_count <= 0:
        errs.invalid(
            f"{path}.pool.resourceSliceCount", spec.pool.resource_slice_count, "must be greater than zero"
        )
    if spec.pool.generation < 0:
        errs.invalid(f"{path}.pool.generation", spec.pool.generation, "must be greater than or equal to zero")
    if old is not None:
        validate_meta_update(errs, obj.metadata, old.metadata)
        for field, new_v, old_v in (
            ("pool.name", spec.pool.name, old.spec.pool.name),
            ("driver", spec.driver, old.spec.driver),
            ("nodeName", spec.node_name, old.spec.node_name),
        ):
            if new_v != old_v:
                errs.invalid(f"{path}.{field}", new_v, "field is immutable")
    found = _node_scope(errs, spec.node_name, spec.node_selector, spec.all_nodes, path)
    if spec.node_selector is not None and len(spec.node_selector.node_selector_terms) != 1:
        errs.invalid_detail(
            f"{path}.nodeSelector.nodeSelectorTerms", "must have exactly one node selector term"
        )
    if spec.per_device_node_selection is not None:
        if spec.per_device_node_selection:
            found.append("`perDeviceNodeSelection`")
        else:
            errs.invalid(f"{path}.perDeviceNodeSelection", False, "must be either unset or set to true")
    if not found:
        errs.required(path, _NODE_SCOPE)
    elif len(found) > 1:
        errs.invalid(path, "{" + ", ".join(found) + "}", f"{_NODE_SCOPE}, but multiple fields are set")
    if spec.shared_counters and spec.devices:
        errs.invalid(path, "", "only one of `sharedCounters` or `devices` is allowed")
    advanced = any(
        d.taints
        or d.consumes_counters
        or any(
            a.bools is not None or a.ints is not None or a.strings is not None or a.versions is not None
            for a in d.attributes.values()
        )
        for d in spec.devices
    )
    per_device = bool(spec.per_device_node_selection)
    c.check_set(
        errs,
        spec.devices,
        MAX_DEVICES_ADVANCED if advanced else MAX_DEVICES,
        f"{path}.devices",
        lambda d, p: _device(errs, d, p, per_device),
        lambda d: d.name,
    )

    def counter_set(cs: r1.CounterSet, p: str) -> None:
        _counter_name(errs, cs.name, f"{p}.name")
        _counters(errs, cs.counters, MAX_COUNTERS_PER_SET, f"{p}.counters")

    c.check_set(
        errs, spec.shared_counters, MAX_COUNTER_SETS, f"{path}.sharedCounters", counter_set, lambda s: s.name
    )
    if spec.partition_type_attribute is not None:
        _partition_type(errs, spec, path)
    c.skip_node_operations(errs, spec.skip_node_operations, f"{path}.skipNodeOperations")


def _partition_type(errs: Errs, spec: r1.ResourceSliceSpec, path: str) -> None:
    name = spec.partition_type_attribute or ""
    if not any(d.consumes_counters for d in spec.devices):
        errs.invalid(
            f"{path}.partitionTypeAttribute",
            name,
            _PARTITION_ONLY,
        )
        return
    before = len(errs.items)
    c.fully_qualified_name(errs, name, f"{path}.partitionTypeAttribute")
    if len(errs.items) > before:
        return
    bare = name.removeprefix(spec.driver + "/")
    for i, dev in enumerate(spec.devices):
        if not dev.consumes_counters:
            continue
        attr = dev.attributes.get(name) or (dev.attributes.get(bare) if bare != name else None)
        at = f"{path}.devices[{i}].attributes[{name}]"
        if attr is None:
            errs.required(
                at,
                _PARTITION_REQUIRED,
            )
        elif attr.string is None:
            errs.invalid_detail(
                at, "must be a string value because `partitionTypeAttribute` names this attribute"
            )
