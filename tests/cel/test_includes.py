"""``x.includes(v)``, the DRA list-type-attribute function, against upstream's outcomes.

The cases follow k8s.io/dynamic-resource-allocation/cel's compile tests (``includes-function-*``):
list membership or scalar equality for every attribute kind, lists of at most 48 values
(ResourceSliceMaxAttributeValuesPerDevice) and upstream's runtime error beyond, plus the edges of
upstream's loop (the bound is checked before each element, so a match among the first 48 values
of a longer list is still found) and CEL's heterogeneous equality (no error, just no match).
"""

from __future__ import annotations

from typing import Any

import pytest

from events.api.resource_v1 import Device, DeviceAttribute
from services.dra.cel import CelRuntimeError, Version, compile_expression, prepare_device
from services.dra.structured import AllocationError, Allocator
from tests.allocator.builders import claim, device_class, node, slice_
from tests.allocator.builders import request as dev_request

DRIVER = "dra.example.com"
TOO_LONG = "'includes' function cannot be applied to lists longer than 48 values"


def run(expr: str, **attributes: Any) -> bool:
    return compile_expression(expr).evaluate(prepare_device(DRIVER, attributes, {}))


def name_includes(arg: str) -> str:
    return f'device.attributes["{DRIVER}"].name.includes({arg})'


CASES: list[tuple[str, Any, str, bool]] = [
    ("bool-scalar-positive", True, "true", True),
    ("bool-scalar-negative", False, "true", False),
    ("bool-list-positive", [True, False], "true", True),
    ("bool-list-negative", [True, True], "false", False),
    ("int-scalar-positive", 1, "1", True),
    ("int-scalar-negative", 2, "1", False),
    ("int-list-positive", [1, 2], "1", True),
    ("int-list-negative", [1, 2], "3", False),
    ("string-scalar-positive", "fish", '"fish"', True),
    ("string-scalar-negative", "fish", '"bird"', False),
    ("string-list-positive", ["fish", "bird"], '"fish"', True),
    ("string-list-negative", ["fish", "bird"], '"cat"', False),
    ("semver-scalar-positive", Version("1.0.0"), 'semver("1.0.0")', True),
    ("semver-scalar-negative", Version("1.0.0"), 'semver("2.0.0")', False),
    ("semver-list-positive", [Version("1.0.0"), Version("2.0.0")], 'semver("1.0.0")', True),
    ("semver-list-negative", [Version("1.0.0"), Version("2.0.0")], 'semver("3.0.0")', False),
    # heterogeneous equality: no error, no match (cel-go's Equal is False across kinds)
    ("int-list-string-arg", [1, 2], '"1"', False),
    ("string-scalar-int-arg", "1", "1", False),
    ("semver-list-string-arg", [Version("1.0.0")], '"1.0.0"', False),
    # numeric equality across int/uint/double, as CEL's ==
    ("int-list-double-arg", [1, 2], "2.0", True),
    ("int-scalar-uint-arg", 2, "2u", True),
]


@pytest.mark.parametrize(("value", "arg", "expected"), [pytest.param(v, a, e, id=n) for n, v, a, e in CASES])
def test_includes(value: Any, arg: str, expected: bool) -> None:
    assert run(name_includes(arg), name=value) is expected


def test_includes_equals_in_for_lists_and_equality_for_scalars() -> None:
    values = [1, 5, 9]
    for probe in range(11):
        expected = probe in values
        assert run(name_includes(str(probe)), name=values) is expected
        assert run(f'{probe} in device.attributes["{DRIVER}"].name', name=values) is expected
        assert run(name_includes(str(probe)), name=5) is (probe == 5)


def _values(n: int) -> list[str]:
    return [f"value-{i}" for i in range(n)]


def test_a_list_of_48_values_is_searched_to_the_end() -> None:
    assert run(name_includes('"value-47"'), name=_values(48)) is True
    assert run(name_includes('"value-48"'), name=_values(48)) is False


def test_a_longer_list_is_a_runtime_error_once_the_search_passes_48_values() -> None:
    with pytest.raises(CelRuntimeError) as info:
        run(name_includes('"value-48"'), name=_values(49))
    assert str(info.value) == TOO_LONG
    with pytest.raises(CelRuntimeError, match=TOO_LONG):
        run(name_includes('"nothing"'), name=_values(100))
    # the bound is checked before each element: an early match returns before reaching it
    assert run(name_includes('"value-0"'), name=_values(49)) is True
    assert run(name_includes('"value-47"'), name=_values(49)) is True


def test_includes_on_list_literals_and_other_values() -> None:
    assert run("[1, 2, 3].includes(2)") is True
    assert run("['a'].includes('b')") is False
    assert run("'abc'.includes('abc')") is True  # any value: scalar equality
    assert run("{'a': 1}.includes('a')") is False  # a map is compared, not searched
    with pytest.raises(CelRuntimeError, match=TOO_LONG):
        run(f"{list(range(49))}.includes(100)")


def _gpu(name: str, models: list[str]) -> Device:
    return Device(name=name, attributes={"models": DeviceAttribute(strings=tuple(models))})


def test_a_claim_selects_devices_by_list_membership() -> None:
    """Through the allocator: only the device whose list attribute includes the value fits, and
    an over-long list turns into an allocation error, not a silent mismatch."""
    expr = 'device.attributes["driver-a"].models.includes("b200")'
    classes = {"class-a": device_class("class-a", expr)}
    devices = [_gpu("d0", ["h100"]), _gpu("d1", ["h100", "b200"]), _gpu("d2", ["a100"])]
    allocator = Allocator([slice_("s", devices)], classes)
    results = allocator.allocate(node(), [claim("c", dev_request("r"))])
    assert results is not None
    assert [r.device for r in results[0].devices.results] == ["d1"]
    long = [_gpu("d0", [f"m{i}" for i in range(49)])]
    with pytest.raises(AllocationError, match=TOO_LONG):
        Allocator([slice_("s", long)], classes).allocate(node(), [claim("c", dev_request("r"))])
