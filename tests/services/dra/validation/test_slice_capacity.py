"""ResourceSlice rules on shared devices and partitions, as tables with the apiserver's messages.

* ``capacity[*].requestPolicy`` (consumable capacity, KEP-5075): every scenario of upstream's
  ``TestValidateDeviceCapacity`` (pkg/apis/resource/validation) with its exact field paths,
  values and wording, plus the limit on ``validValues``.
* ``partitionTypeAttribute`` (KEP-5677, alpha in 1.37): the per-slice rules the KEP assigns to
  admission (only on slices with counter-consuming devices; every such device carries the named
  attribute as a string; the driver-domain bare form counts). Upstream's implementation of this
  rule is newer than the sources we could read, so its wording here is draflow's.
"""

from __future__ import annotations

from typing import Any

import pytest

from draflow.events.api.codec import decode_object
from draflow.services.apiserver.admission import apply_defaults, validate

pytestmark = pytest.mark.kep4381

POLICY = "ResourceSlice s: spec.devices[0].capacity[memory].requestPolicy"
VALUES = f"{POLICY}.validValues"
RANGE = f"{POLICY}.validRange"


def _errors(spec: dict[str, Any]) -> list[str]:
    base = {"driver": "gpu.example.com", "pool": {"name": "node-1", "resourceSliceCount": 1}}
    raw = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "s"},
        "spec": {**base, "nodeName": "node-1", **spec},
    }
    return [str(e) for e in validate(apply_defaults(decode_object(raw)), None)]


def _capacity(value: str, policy: dict[str, Any] | None, *, multi: bool = True) -> list[str]:
    cap: dict[str, Any] = {"value": value}
    if policy is not None:
        cap["requestPolicy"] = policy
    device: dict[str, Any] = {"name": "gpu-0", "capacity": {"memory": cap}}
    if multi:
        device["allowMultipleAllocations"] = True
    return _errors({"devices": [device]})


def _range(min_: str | None = None, max_: str | None = None, step: str | None = None) -> dict[str, str]:
    return {k: v for k, v in (("min", min_), ("max", max_), ("step", step)) if v is not None}


CAPACITY_CASES: list[tuple[str, str, dict[str, Any] | None, list[str]]] = [
    ("no-policy", "1Gi", None, []),
    ("policy-without-default", "1Gi", {}, []),
    (
        "valid-values-without-default",
        "1Gi",
        {"validValues": ["1Gi"]},
        [f"{POLICY}.default: Required value: required when validValues is defined"],
    ),
    (
        "valid-range-without-default",
        "1Gi",
        {"validRange": _range("1Gi")},
        [f"{POLICY}.default: Required value: required when validRange is defined"],
    ),
    (
        "valid-range-without-min",
        "1Gi",
        {"default": "1Gi", "validRange": {}},
        [f"{RANGE}.min: Required value: required when validRange is defined"],
    ),
    ("valid-simple-range", "10Gi", {"default": "1Gi", "validRange": _range("1Gi")}, []),
    ("valid-range-with-max", "10Gi", {"default": "1Gi", "validRange": _range("1Gi", "10Gi")}, []),
    ("valid-range-with-step", "10Gi", {"default": "1Gi", "validRange": _range("1Gi", step="1Gi")}, []),
    (
        "valid-range-with-max-and-step",
        "10Gi",
        {"default": "1Gi", "validRange": _range("1Gi", "10Gi", "1Gi")},
        [],
    ),
    ("valid-single-option", "10Gi", {"default": "1Gi", "validValues": ["1Gi"]}, []),
    ("valid-two-options", "10Gi", {"default": "1Gi", "validValues": ["1Gi", "10Gi"]}, []),
    ("default-without-policy", "10Gi", {"default": "1Gi"}, []),
    (
        "more-than-one-policy",
        "10Gi",
        {"default": "1Gi", "validValues": ["1Gi"], "validRange": _range("1Gi")},
        [
            f"{POLICY}: Forbidden: exactly one policy can be specified, cannot specify "
            '"validValues" and "validRange" at the same time'
        ],
    ),
    (
        "invalid-options",
        "10Gi",
        {"default": "1Gi", "validValues": ["20Gi"]},
        [
            f'{VALUES}[0]: Invalid value: "20Gi": option is larger than capacity value: 10Gi',
            f'{VALUES}: Invalid value: "1Gi": default value is not valid according to the requestPolicy',
        ],
    ),
    (
        "invalid-options-duplicate",
        "10Gi",
        {"default": "1Gi", "validValues": ["1Gi", "1Gi"]},
        [f'{VALUES}[1]: Duplicate value: "1073741824"'],
    ),
    (
        "invalid-options-duplicate-normalized",
        "10Gi",
        {"default": "1Ki", "validValues": ["1Ki", "1024"]},
        [f'{VALUES}[1]: Duplicate value: "1024"'],
    ),
    (
        "invalid-options-unsorted",
        "10Gi",
        {"default": "1Gi", "validValues": ["2Gi", "1Gi"]},
        [f'{VALUES}[1]: Invalid value: "1Gi": values must be sorted in ascending order'],
    ),
    (
        "invalid-range-large-min-small-max",
        "10Gi",
        {"default": "2Gi", "validRange": _range("20Gi", "1Gi")},
        [
            f'{RANGE}.min: Invalid value: "20Gi": min is larger than capacity value: 10Gi',
            f'{RANGE}.min: Invalid value: "2Gi": default is less than min: 20Gi',
            f'{RANGE}.max: Invalid value: "20Gi": min is larger than max: 1Gi',
            f'{RANGE}.max: Invalid value: "2Gi": default is more than max: 1Gi',
        ],
    ),
    (
        "invalid-range-large-max",
        "10Gi",
        {"default": "1Gi", "validRange": _range("1Gi", "20Gi")},
        [f'{RANGE}.max: Invalid value: "20Gi": max is larger than capacity value: 10Gi'],
    ),
    (
        "invalid-range-multiple-of-step",
        "10Gi",
        {"default": "2Gi", "validRange": _range("1Gi", "10Gi", "2Gi")},
        [
            f'{RANGE}.step: Invalid value: "2Gi": value is not a multiple of a given step (2Gi) from (1Gi)',
            f'{RANGE}.step: Invalid value: "10Gi": value is not a multiple of a given step (2Gi) from (1Gi)',
        ],
    ),
    (
        "invalid-range-large-step",
        "10Gi",
        {"default": "1Gi", "validRange": _range("1Gi", step="10Gi")},
        [f'{RANGE}.step: Invalid value: "10Gi": one step 11Gi is larger than capacity value: 10Gi'],
    ),
    # beyond upstream's table: the same functions on inputs it does not list
    (
        "too-many-options-short-circuit-the-items",  # the default is then never found
        "100",
        {"default": "1", "validValues": [str(i) for i in range(1, 12)]},
        [
            f"{VALUES}: Too many: 11: must have at most 10 items",
            f'{VALUES}: Invalid value: "1": default value is not valid according to the requestPolicy',
        ],
    ),
    ("ten-options-are-allowed", "100", {"default": "1", "validValues": [str(i) for i in range(1, 11)]}, []),
    (
        "fractional-options-collide-in-whole-units",  # 1500m and 2 both count as 2
        "10",
        {"default": "1500m", "validValues": ["1500m", "2"]},
        [f'{VALUES}[1]: Duplicate value: "2"'],
    ),
    (
        "unsorted-and-over-capacity-and-duplicate-in-that-order",
        "2Gi",
        {"default": "1Gi", "validValues": ["3Gi", "1Gi", "1Gi"]},
        [
            f'{VALUES}[1]: Invalid value: "1Gi": values must be sorted in ascending order',
            f'{VALUES}[0]: Invalid value: "3Gi": option is larger than capacity value: 2Gi',
            f'{VALUES}[2]: Duplicate value: "1073741824"',
        ],
    ),
    (
        "step-counts-in-whole-units",  # min 500m is 1 whole unit: default 1 is 0 steps from it
        "10",
        {"default": "1", "validRange": _range("500m", step="1")},
        [],
    ),
    (
        "step-must-be-positive",
        "10",
        {"default": "1", "validRange": _range("1", step="0")},
        [f'{RANGE}.step: Invalid value: "0": must be greater than zero'],
    ),
]


@pytest.mark.parametrize(
    ("value", "policy", "expected"),
    [pytest.param(v, p, e, id=name) for name, v, p, e in CAPACITY_CASES],
)
def test_request_policy(value: str, policy: dict[str, Any] | None, expected: list[str]) -> None:
    assert _capacity(value, policy) == expected


def test_request_policy_needs_a_multi_allocatable_device() -> None:
    assert _capacity("10Gi", {"default": "1Gi", "validValues": ["1Gi"]}, multi=False) == [
        f"{POLICY}: Forbidden: allowMultipleAllocations must be true"
    ]
    assert _capacity("10Gi", None, multi=False) == []


ATTR = "gpu.example.com/profile"


def _partition(*devices: dict[str, Any], attribute: str = ATTR) -> list[str]:
    return _errors({"partitionTypeAttribute": attribute, "devices": list(devices)})


def _dev(name: str, attributes: dict[str, Any] | None = None, *, counters: bool = True) -> dict[str, Any]:
    device: dict[str, Any] = {"name": name, "attributes": attributes or {}}
    if counters:
        device["consumesCounters"] = [{"counterSet": "gpu-0", "counters": {"memory": {"value": "40Gi"}}}]
    return device


FULL: dict[str, Any] = {"string": "Full"}
PARTITION_CASES: list[tuple[str, list[dict[str, Any]], str, list[str]]] = [
    (
        "every-partition-carries-the-attribute",
        [_dev("full", {ATTR: FULL}), _dev("half", {ATTR: {"string": "Half"}})],
        ATTR,
        [],
    ),
    ("bare-name-in-the-drivers-domain", [_dev("full", {"profile": FULL})], ATTR, []),
    (
        "devices-without-counters-are-exempt",
        [_dev("full", {ATTR: FULL}), _dev("plain", counters=False)],
        ATTR,
        [],
    ),
    (
        "no-device-consumes-counters",
        [_dev("plain", {ATTR: FULL}, counters=False)],
        ATTR,
        [
            f'ResourceSlice s: spec.partitionTypeAttribute: Invalid value: "{ATTR}": may only be set on '
            "a slice which declares devices that consume counters"
        ],
    ),
    (
        "a-partition-lacks-the-attribute",
        [_dev("full", {ATTR: FULL}), _dev("half")],
        ATTR,
        [
            f"ResourceSlice s: spec.devices[1].attributes[{ATTR}]: Required value: device consumes "
            "counters and `partitionTypeAttribute` names this attribute, so it must be set"
        ],
    ),
    (
        "the-attribute-is-not-a-string",
        [_dev("full", {ATTR: {"int": 1}})],
        ATTR,
        [
            f"ResourceSlice s: spec.devices[0].attributes[{ATTR}]: Invalid value: must be a string "
            "value because `partitionTypeAttribute` names this attribute"
        ],
    ),
    (
        "another-domains-bare-name-does-not-count",
        [_dev("full", {"profile": FULL})],
        "other.example.com/profile",
        [
            "ResourceSlice s: spec.devices[0].attributes[other.example.com/profile]: Required value: "
            "device consumes counters and `partitionTypeAttribute` names this attribute, so it must be set"
        ],
    ),
    (
        "not-fully-qualified",  # the name check comes first; devices are not looked at then
        [_dev("full")],
        "profile",
        [
            'ResourceSlice s: spec.partitionTypeAttribute: Invalid value: "profile": a fully qualified '
            "name must be a domain and a name separated by a slash"
        ],
    ),
]


@pytest.mark.parametrize(
    ("devices", "attribute", "expected"),
    [pytest.param(d, a, e, id=name) for name, d, a, e in PARTITION_CASES],
)
def test_partition_type_attribute(devices: list[dict[str, Any]], attribute: str, expected: list[str]) -> None:
    assert _partition(*devices, attribute=attribute) == expected
