"""Kubernetes DRA selector semantics (cases modelled on k8s.io/dynamic-resource-allocation cel tests)."""

from __future__ import annotations

from typing import Any

import pytest

from events.quantity import Quantity
from services.dra.cel import CelCompileError, CelRuntimeError, Version, compile_expression, prepare_device

DRIVER = "dra.example.com"
TEN = "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]"


def run(
    expr: str, attributes: dict[str, Any] | None = None, capacity: dict[str, str] | None = None, **kw: Any
):
    dev = prepare_device(
        kw.get("driver", DRIVER),
        attributes or {},
        {k: Quantity.parse(v) for k, v in (capacity or {}).items()},
        kw.get("allow_multiple_allocations"),
    )
    return compile_expression(expr).evaluate(dev)


MATCH_CASES: list[tuple[str, dict[str, Any], dict[str, str], bool]] = [
    ("true", {}, {}, True),
    ("false", {}, {}, False),
    ('"no-such-domain" in device.attributes', {}, {}, False),
    ('"dra.example.com" in device.attributes', {"dra.example.com/something": True}, {}, True),
    (f'device.driver == "{DRIVER}"', {}, {}, True),
    ('device.attributes["dra.example.com"].name', {"name": True}, {}, True),
    ('device.attributes["dra.example.com"]["name"]', {"name": True}, {}, True),
    ('cel.bind(dra, device.attributes["dra.example.com"], dra.name)', {"name": True}, {}, True),
    ('device.attributes["other.example.com"].name', {"other.example.com/name": True}, {}, True),
    ('device.attributes["dra.example.com"].name > 0', {"name": 1}, {}, True),
    ('device.attributes["dra.example.com"].name == "fish"', {"name": "fish"}, {}, True),
    ('device.attributes["dra.example.com"].names.size() == 2', {"names": [True, False]}, {}, True),
    ('device.attributes["dra.example.com"].names.size() == 2', {"names": [1, 2]}, {}, True),
    ('device.attributes["dra.example.com"].names.size() == 2', {"names": ["a", "b"]}, {}, True),
    (
        'device.attributes["dra.example.com"].names.size() == 2',
        {"names": [Version("1.0.0"), Version("2.0.0")]},
        {},
        True,
    ),
    ('device.attributes["dra.example.com"].names.exists(x, x > 0)', {"names": [1, 2]}, {}, True),
    ('device.attributes["dra.example.com"].names.all(x, x != "")', {"names": ["fish", "bird"]}, {}, True),
    (
        'device.attributes["dra.example.com"].names.all(x, x.isGreaterThan(semver("0.0.1")))',
        {"names": [Version("1.0.0"), Version("2.0.0")]},
        {},
        True,
    ),
    ('1 in device.attributes["dra.example.com"].names', {"names": [1, 2, 3]}, {}, True),
    (
        'device.attributes["dra.example.com"].name.isGreaterThan(semver("0.0.1"))',
        {"name": Version("1.0.0")},
        {},
        True,
    ),
    (
        'device.attributes["dra.example.com"].name.isGreaterThan(semver("v0.0.1", true)) && '
        'isSemver("v1.0.0", true)',
        {"name": Version("1.0.0")},
        {},
        True,
    ),
    ('device.capacity["dra.example.com"].name.isGreaterThan(quantity("1Ki"))', {}, {"name": "1Mi"}, True),
    (
        '"name" in device.capacity["dra.example.com"] && '
        'device.capacity["dra.example.com"].name.isGreaterThan(quantity("1Ki"))',
        {},
        {"name": "1Mi"},
        True,
    ),
    (
        '!("name" in device.capacity["dra.example.com"]) || '
        'device.capacity["dra.example.com"].name.isGreaterThan(quantity("1Ki"))',
        {},
        {},
        True,
    ),
    ('device.attributes.exists_one(x, x == "dra.example.com")', {"services": "x"}, {}, True),
    ('device.attributes["dra.example.com"].exists_one(x, x == "services")', {"services": "x"}, {}, True),
    (
        'device.attributes["dra.example.com"].services.split("example").size() >= 2',
        {"services": "some_example_value"},
        {},
        True,
    ),
    (
        'device.attributes["dra.example.com"].services.matches("[^a]?sym")',
        {"services": "asymetric"},
        {},
        True,
    ),
    ('device.capacity.exists_one(x, x == "dra.example.com")', {}, {"memory": "1Mi"}, True),
    ('device.capacity["dra.example.com"].exists_one(x, x == "memory")', {}, {"memory": "1Mi"}, True),
    # unknown domain is an empty map, and has() on the domain map is always true (upstream wrapper)
    ('device.attributes["no-such-domain"].size() == 0', {}, {}, True),
    ("has(device.attributes.nodomain)", {}, {}, True),
    ('has(device.attributes["dra.example.com"].missing)', {}, {}, False),
    ('device.attributes["dra.example.com"].?missing.orValue(7) == 7', {}, {}, True),
    ('device.attributes["dra.example.com"].?name.hasValue()', {"name": 1}, {}, True),
    ('device.capacity["dra.example.com"].memory == quantity("64Gi")', {}, {"memory": "65536Mi"}, True),
    ("quantity('1Gi') == quantity('1024Mi')", {}, {}, True),
    ("quantity('1Gi') != quantity('1G')", {}, {}, True),
]


@pytest.mark.parametrize(("expr", "attrs", "caps", "expected"), MATCH_CASES)
def test_match(expr: str, attrs: dict[str, Any], caps: dict[str, str], expected: bool) -> None:
    assert run(expr, attrs, caps) is expected


@pytest.mark.parametrize(
    ("expr", "attrs", "message"),
    [
        (
            'device.attributes["no-such-domain"].noSuchAttr.isGreaterThan(quantity("0"))',
            {},
            "no such key: noSuchAttr",
        ),
        (
            'device.attributes["no-such-domain"]["noSuchAttr"].isGreaterThan(quantity("0"))',
            {},
            "no such key: noSuchAttr",
        ),
        (
            'device.attributes["dra.example.com"].name.exists(x, x > 0)',
            {"name": 1},
            "got 'types.Int', expected iterable type",
        ),
        (
            'device.attributes["dra.example.com"].name.exists(x, x == true)',
            {"name": True},
            "got 'types.Bool', expected iterable type",
        ),
        (
            'device.attributes["dra.example.com"].name.exists(x, x == "fish")',
            {"name": "fish"},
            "got 'types.String', expected iterable type",
        ),
        (
            'device.attributes["dra.example.com"].name.exists(x, x.isGreaterThan(semver("0.0.1")))',
            {"name": Version("1.0.0")},
            "got 'cel.Semver', expected iterable type",
        ),
        (
            'device.attributes["dra.example.com"].names',
            {"names": ["a"]},
            "CEL result of type list could not be converted to bool",
        ),
        ("device.driver == 'x'", {"bad": None}, "attribute bad: unsupported attribute value"),
        (
            "true",
            {"v": Version("1.0")},
            "attribute v: parse semantic version: No Major.Minor.Patch elements found",
        ),
        (
            "".join(f"{TEN}.all({v}, " for v in ("x", "y", "z", "z2", "z3", "z4", "z5"))
            + "int('1'.find('[0-9]*')) < 100"
            + ")" * 7,
            {},
            "actual cost limit exceeded",
        ),
    ],
)
def test_runtime_error(expr: str, attrs: dict[str, Any], message: str) -> None:
    with pytest.raises(CelRuntimeError) as info:
        run(expr, attrs)
    assert message in str(info.value)
    assert info.value.expression == expr


def test_no_such_key_hint() -> None:
    with pytest.raises(CelRuntimeError) as info:
        run('device.attributes["dra.example.com"].missing == 1')
    assert str(info.value) == (
        "no such key: missing. consider using CEL optional chaining (.? followed by orValue()) or guarding "
        "the check with has() for optional fields"
    )


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("?!", "Syntax error"),
        ("1", "must evaluate to bool or the unknown type, not int"),
        ("noSuchVar", "undeclared reference to 'noSuchVar'"),
        ("device.noSuchField == 1", "undefined field 'noSuchField'"),
        ("device.driver == 1", "found no matching overload for '_==_' applied to '(string, int)'"),
        ("noSuchFunc(1)", "undeclared reference to 'noSuchFunc'"),
        ("device.driver.matches('(')", "1:23: invalid matches argument"),
        ("[1, 'a'].size() > 0", "expected type 'int' but found 'string'"),
    ],
)
def test_compile_error(expr: str, message: str) -> None:
    with pytest.raises(CelCompileError) as info:
        compile_expression(expr)
    assert message in str(info.value)


def test_allow_multiple_allocations() -> None:
    assert run("device.allowMultipleAllocations == true", allow_multiple_allocations=True)
    assert run("device.allowMultipleAllocations == false", allow_multiple_allocations=None)
    assert run("device.allowMultipleAllocations == false", allow_multiple_allocations=False)


def test_runtime_error_carries_position() -> None:
    expr = 'device.attributes["dra.example.com"].a == 1 &&\n  device.attributes["dra.example.com"].b == 2'
    with pytest.raises(CelRuntimeError) as info:
        run(expr, {"a": 1})
    err = info.value
    assert err.expression == expr
    assert (err.line, err.column) == (2, 39)
    assert err.located().startswith("ERROR: <input>:2:39: no such key: b.")
    # input errors and the cost limit are not tied to a sub-expression
    with pytest.raises(CelRuntimeError) as info:
        run("true", {"bad": None})
    assert info.value.offset == -1 and info.value.line is None
