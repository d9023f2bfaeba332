"""Field selection, indexing and presence tests off the fast paths (Kubernetes' DRA CEL semantics).

The compiler reads ``device.attributes["domain"].id`` straight from flat tables; these cases go
through the general rules instead: ``device`` bound to another name (``cel.bind``), a domain map
selected as a field, optional selection and indexing on optionals, lists indexed by whole doubles.
Upstream's device value is a map whose ``attributes``/``capacity`` maps find every domain (an
unknown one is an empty map), so ``has()`` and ``.?``/``[?]`` report any domain present.
"""

from __future__ import annotations

from typing import Any

import pytest

from draflow.events.quantity import Quantity
from draflow.services.dra.cel import CelRuntimeError, Version, compile_any, compile_expression, prepare_device

pytestmark = pytest.mark.kep4381

DRIVER = "dra.example.com"
ATTRIBUTES: dict[str, object] = {
    "model": "a100",
    "cores": 8,
    "other.example.com/fast": True,
    "version": Version("1.2.3"),
}
CAPACITY = {"memory": Quantity.parse("80Gi")}


def device(allow_multiple_allocations: bool | None = True) -> Any:
    return prepare_device(DRIVER, ATTRIBUTES, CAPACITY, allow_multiple_allocations)


def run(expr: str) -> Any:
    return compile_expression(expr).evaluate(device())


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        # `device` under another name: every field read through the general selection rules
        ("cel.bind(d, device, d.driver == 'dra.example.com')", True),
        ("cel.bind(d, device, d.attributes['dra.example.com'].model == 'a100')", True),
        ("cel.bind(d, device, d.attributes['other.example.com'].fast)", True),
        ("cel.bind(d, device, d.capacity['dra.example.com'].memory == quantity('80Gi'))", True),
        ("cel.bind(d, device, d.allowMultipleAllocations)", True),
        ("[device].all(d, d.attributes['dra.example.com'].cores == 8)", True),
        (
            "cel.bind(d, device, d.attributes['dra.example.com'].version.isGreaterThan(semver('1.2.0')))",
            True,
        ),
        # has() on the device's declared fields: all of them are always set
        ("cel.bind(d, device, has(d.driver) && has(d.attributes) && has(d.capacity))", True),
        # optional selection of device fields always has a value
        ("device.?driver.orValue('') == 'dra.example.com'", True),
        ("cel.bind(d, device, d.?driver.orValue('') == 'dra.example.com')", True),
        ("cel.bind(d, device, d.?capacity.hasValue())", True),
        # a domain map selected as a field: unknown domains are empty maps, present for .?
        ("device.attributes.nodomain.size() == 0", True),
        ("cel.bind(a, device.attributes, a.nodomain.size() == 0)", True),
        ("device.attributes.?nodomain.hasValue()", True),
        ("device.attributes.?nodomain.orValue({'x': 1}).size() == 0", True),
        # optional indexing: a known domain yields its entries, an unknown one an empty map
        ("device.attributes[?'dra.example.com'].orValue({}).size() == 3", True),
        ("device.attributes[?'nodomain'].orValue({'x': 1}).size() == 0", True),
        ("cel.bind(a, device.attributes, a[?'nodomain'].orValue({'x': 1}).size() == 0)", True),
        ("device.capacity[?'nodomain'].hasValue()", True),
        # a domain looked up with a computed key
        ("cel.bind(a, device.attributes, a[dyn('nodomain')].size() == 0)", True),
        ("cel.bind(a, device.attributes, a['dra.example.com'].size() == 3)", True),
        # membership: a domain in the map, an id in a domain
        ("'other.example.com' in device.attributes", True),
        ("'model' in device.attributes['dra.example.com']", True),
        ("'memory' in device.attributes['dra.example.com']", False),
    ],
)
def test_device_access(expr: str, expected: bool) -> None:
    assert run(expr) is expected


def test_capacity_map_is_built_once_per_device() -> None:
    """The prepared device is shared by every selector: its nested capacity map is reused."""
    dev = device()
    program = compile_expression("device.capacity['dra.example.com'].size() == 1")
    assert program.evaluate(dev) is True
    first = dev.capacity
    assert program.evaluate(dev) is True
    assert dev.capacity is first
    assert dict(first) == {"dra.example.com": {"memory": Quantity.parse("80Gi")}}


def test_unset_allow_multiple_allocations_reads_false_through_a_binding() -> None:
    dev = device(allow_multiple_allocations=None)
    assert compile_expression("cel.bind(d, device, !d.allowMultipleAllocations)").evaluate(dev) is True


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        # optionals: indexing and selecting inside one keeps the result optional
        ("optional.of({'a': 1})['a'].orValue(0) == 1", True),
        ("optional.of({'a': 1})['b'].hasValue()", False),
        ("optional.of({'a': {'b': 1}}).a.b.orValue(0) == 1", True),
        ("optional.none().a.hasValue()", False),
        ("optional.of([1, 2, 3])[?1] == optional.of(2)", True),
        ("optional.of([1, 2, 3])[?5].hasValue()", False),
        ("optional.none()[?1].hasValue()", False),
        ("optional.of({'a': 1})[?'a'] == optional.of(1)", True),
        ("{'a': 1}[?'b'].hasValue()", False),
        # lists index with int, uint or a whole double (cel-go's lossless index conversion)
        ("[1, 2, 3][dyn(1.0)] == 2", True),
        ("[1, 2, 3][dyn(2u)] == 3", True),
        ("[1, 2, 3][?dyn(1.0)] == optional.of(2)", True),
        ("[1, 2, 3][?3].hasValue()", False),
    ],
)
def test_optional_and_list_access(expr: str, expected: bool) -> None:
    assert compile_any(expr).evaluate(device()) is expected


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        # selecting a field of a scalar is a missing key (cel-go's attribute resolution)
        ("dyn(1).foo == 1", "no such key: foo"),
        ("[1, 2, 3][dyn(1.5)] == 2", "unsupported index value"),
        ("[1, 2, 3][dyn(3)] == 2", "index out of bounds: 3"),
        ("{'a': 1}['b'] == 1", "no such key: b"),
        ("1 in dyn(1)", "no such overload"),
    ],
)
def test_access_runtime_errors(expr: str, message: str) -> None:
    with pytest.raises(CelRuntimeError) as info:
        compile_any(expr).evaluate(device())
    assert message in str(info.value)


def test_the_first_unusable_attribute_is_named() -> None:
    """Upstream fails building the input at the first bad attribute; every selector then errors."""
    dev = prepare_device(DRIVER, {"good": 1, "first": None, "second": Version("nope")}, {})
    assert dev.error == "attribute first: unsupported attribute value"
    with pytest.raises(CelRuntimeError, match="attribute first: unsupported attribute value"):
        compile_expression("true").evaluate(dev)


def test_repr_names_the_device() -> None:
    text = repr(prepare_device(DRIVER, {"model": "a100"}, {"memory": Quantity.parse("1Gi")}))
    assert text.startswith("DeviceInput(driver='dra.example.com', ")
    assert "'dra.example.com/model': 'a100'" in text
    assert "'dra.example.com/memory'" in text
