"""Structural-schema validation, pruning, defaulting and CEL rules of custom objects, as tables
of (schema, object) -> exact upstream messages. Pure: no apiserver."""

from __future__ import annotations

from typing import Any

import pytest

from draflow.events.api.apiextensions_v1 import CustomObject, CustomResourceDefinition
from draflow.events.api.codec import decode_object
from draflow.events.api.errors import ApiError
from draflow.events.api.meta import ObjectMeta
from draflow.services.apiserver.crd.objects import admit_custom
from tests.builders.crds import make_crd

pytestmark = pytest.mark.kep4381

GROUP = "table.example.com"


def crd_of(spec_schema: dict[str, Any], **kw: Any) -> CustomResourceDefinition:
    schema = {"type": "object", "properties": {"spec": spec_schema}}
    crd = decode_object(make_crd("Widget", GROUP, schema, **kw))
    assert isinstance(crd, CustomResourceDefinition)
    return crd


def widget(spec: Any, name: str = "w") -> CustomObject:
    return CustomObject(
        api_version=f"{GROUP}/v1", kind="Widget", metadata=ObjectMeta(name=name), content={"spec": spec}
    )


def messages(spec_schema: dict[str, Any], spec: Any, old: Any = None) -> list[str]:
    crd = crd_of(spec_schema)
    try:
        admit_custom(widget(spec), crd, None if old is None else widget(old))
    except ApiError as exc:
        return [f"{e.path}: {e.rule}" if e.path else e.rule for e in exc.errors]
    return []


def spec_with(field: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": "object", "properties": {"x": field}, **extra}


CASES: list[tuple[str, dict[str, Any], Any, list[str]]] = [
    (
        "maximum",
        spec_with({"type": "integer", "maximum": 16}),
        {"x": 17},
        ["spec.x: Invalid value: 17: spec.x in body should be less than or equal to 16"],
    ),
    (
        "exclusive maximum",
        spec_with({"type": "integer", "maximum": 16, "exclusiveMaximum": True}),
        {"x": 16},
        ["spec.x: Invalid value: 16: spec.x in body should be less than 16"],
    ),
    (
        "minimum",
        spec_with({"type": "number", "minimum": 1.5}),
        {"x": 1},
        ["spec.x: Invalid value: 1: spec.x in body should be greater than or equal to 1.5"],
    ),
    (
        "exclusive minimum",
        spec_with({"type": "integer", "minimum": 0, "exclusiveMinimum": True}),
        {"x": 0},
        ["spec.x: Invalid value: 0: spec.x in body should be greater than 0"],
    ),
    (
        "multipleOf",
        spec_with({"type": "integer", "multipleOf": 4}),
        {"x": 6},
        ["spec.x: Invalid value: 6: spec.x in body should be a multiple of 4"],
    ),
    (
        "type",
        spec_with({"type": "integer"}),
        {"x": "many"},
        ['spec.x: Invalid value: "many": spec.x in body must be of type integer: "string"'],
    ),
    (
        "float for integer",
        spec_with({"type": "integer"}),
        {"x": 1.5},
        ['spec.x: Invalid value: 1.5: spec.x in body must be of type integer: "number"'],
    ),
    (
        "null not nullable is pruned, then required",
        spec_with({"type": "string"}, required=["x"]),
        {"x": None},
        ["spec.x: Required value"],
    ),
    ("nullable keeps null", spec_with({"type": "string", "nullable": True}, required=["x"]), {"x": None}, []),
    ("required", spec_with({"type": "string"}, required=["x"]), {}, ["spec.x: Required value"]),
    (
        "enum",
        spec_with({"type": "string", "enum": ["All", "Single"]}),
        {"x": "Some"},
        ['spec.x: Unsupported value: "Some": supported values: "All", "Single"'],
    ),
    (
        "maxLength",
        spec_with({"type": "string", "maxLength": 3}),
        {"x": "abcd"},
        ["spec.x: Too long: may not be more than 3 bytes"],
    ),
    (
        "minLength",
        spec_with({"type": "string", "minLength": 2}),
        {"x": "a"},
        ['spec.x: Invalid value: "a": spec.x in body should be at least 2 chars long'],
    ),
    (
        "pattern",
        spec_with({"type": "string", "pattern": "^[a-z]+$"}),
        {"x": "A1"},
        ["spec.x: Invalid value: \"A1\": spec.x in body should match '^[a-z]+$'"],
    ),
    (
        "format date-time",
        spec_with({"type": "string", "format": "date-time"}),
        {"x": "yesterday"},
        ['spec.x: Invalid value: "yesterday": spec.x in body must be of type date-time: "yesterday"'],
    ),
    (
        "format int32 (not checked upstream either)",
        spec_with({"type": "integer", "format": "int32"}),
        {"x": 2**40},
        [],
    ),
    (
        "maxItems",
        spec_with({"type": "array", "items": {"type": "integer"}, "maxItems": 2}),
        {"x": [1, 2, 3]},
        ["spec.x: Too many: 3: must have at most 2 items"],
    ),
    (
        "minItems",
        spec_with({"type": "array", "items": {"type": "integer"}, "minItems": 2}),
        {"x": [1]},
        ["spec.x: Invalid value: [1]: spec.x in body should have at least 2 items"],
    ),
    (
        "items",
        spec_with({"type": "array", "items": {"type": "integer", "maximum": 1}}),
        {"x": [1, 2]},
        ["spec.x[1]: Invalid value: 2: spec.x[1] in body should be less than or equal to 1"],
    ),
    (
        "list-type set",
        spec_with({"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"}),
        {"x": ["a", "a"]},
        ['spec.x[1]: Duplicate value: "a"'],
    ),
    (
        "additionalProperties",
        spec_with({"type": "object", "additionalProperties": {"type": "integer"}}),
        {"x": {"a": 1, "b": "no"}},
        ['spec.x.b: Invalid value: "no": spec.x.b in body must be of type integer: "string"'],
    ),
    ("int-or-string int", spec_with({"x-kubernetes-int-or-string": True}), {"x": 3}, []),
    ("int-or-string string", spec_with({"x-kubernetes-int-or-string": True}), {"x": "25%"}, []),
    (
        "int-or-string bool",
        spec_with({"x-kubernetes-int-or-string": True}),
        {"x": True},
        ['spec.x: Invalid value: true: spec.x in body must be of type integer,string: "boolean"'],
    ),
    (
        "preserve-unknown-fields",
        spec_with({"type": "object", "x-kubernetes-preserve-unknown-fields": True}),
        {"x": {"anything": [1, {"goes": True}]}},
        [],
    ),
    (
        "CEL rule with message",
        spec_with(
            {
                "type": "integer",
                "x-kubernetes-validations": [{"rule": "self % 2 == 0", "message": "must be even"}],
            }
        ),
        {"x": 3},
        ['spec.x: Invalid value: "integer": must be even'],
    ),
    (
        "CEL rule without message",
        spec_with({"type": "integer", "x-kubernetes-validations": [{"rule": "self > 5"}]}),
        {"x": 3},
        ['spec.x: Invalid value: "integer": failed rule: self > 5'],
    ),
    (
        "CEL messageExpression, reason, fieldPath",
        {
            "type": "object",
            "properties": {"x": {"type": "integer"}},
            "x-kubernetes-validations": [
                {
                    "rule": "self.x < 10",
                    "messageExpression": "'x is ' + string(self.x)",
                    "reason": "FieldValueForbidden",
                    "fieldPath": ".x",
                }
            ],
        },
        {"x": 12},
        ["spec.x: Forbidden: x is 12"],
    ),
    (
        "CEL runtime error",
        spec_with(
            {
                "type": "object",
                "x-kubernetes-preserve-unknown-fields": True,
                "x-kubernetes-validations": [{"rule": "self.missing > 1"}],
            }
        ),
        {"x": {}},
        [
            'spec.x: Invalid value: "object": no such key: missing. consider using CEL optional chaining '
            "(.? followed by orValue()) or guarding the check with has() for optional fields"
        ],
    ),
    (
        "several problems in one refusal",
        spec_with(
            {"type": "integer", "maximum": 1},
            required=["y"],
            properties={"x": {"type": "integer", "maximum": 1}, "y": {"type": "string"}},
        ),
        {"x": 2},
        [
            "spec.y: Required value",
            "spec.x: Invalid value: 2: spec.x in body should be less than or equal to 1",
        ],
    ),
]


@pytest.mark.parametrize(("schema", "spec", "want"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_validation_messages(schema: dict[str, Any], spec: Any, want: list[str]) -> None:
    assert messages(schema, spec) == want


def test_transition_rule_runs_only_on_update() -> None:
    schema = spec_with(
        {
            "type": "integer",
            "x-kubernetes-validations": [{"rule": "self >= oldSelf", "message": "may only grow"}],
        }
    )
    assert messages(schema, {"x": 1}) == []
    assert messages(schema, {"x": 1}, old={"x": 2}) == ['spec.x: Invalid value: "integer": may only grow']
    assert messages(schema, {"x": 3}, old={"x": 2}) == []


DEFAULTS: list[tuple[str, dict[str, Any], Any, Any]] = [
    ("missing field", spec_with({"type": "integer", "default": 1}), {}, {"x": 1}),
    ("set field kept", spec_with({"type": "integer", "default": 1}), {"x": 5}, {"x": 5}),
    ("null replaced by default", spec_with({"type": "integer", "default": 1}), {"x": None}, {"x": 1}),
    (
        "nested default inside a defaulted object",
        spec_with(
            {"type": "object", "default": {}, "properties": {"mode": {"type": "string", "default": "Single"}}}
        ),
        {},
        {"x": {"mode": "Single"}},
    ),
    (
        "default inside array items",
        spec_with(
            {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"n": {"type": "integer", "default": 0}, "m": {"type": "string"}},
                },
            }
        ),
        {"x": [{"m": "a"}, {"n": 2}]},
        {"x": [{"m": "a", "n": 0}, {"n": 2}]},
    ),
    (
        "default in map values",
        spec_with(
            {
                "type": "object",
                "additionalProperties": {
                    "type": "object",
                    "properties": {"on": {"type": "boolean", "default": True}},
                },
            }
        ),
        {"x": {"a": {}}},
        {"x": {"a": {"on": True}}},
    ),
]


@pytest.mark.parametrize(("schema", "spec", "want"), [c[1:] for c in DEFAULTS], ids=[c[0] for c in DEFAULTS])
def test_defaulting(schema: dict[str, Any], spec: Any, want: Any) -> None:
    admitted = admit_custom(widget(spec), crd_of(schema), None)
    assert admitted.content["spec"] == want


def test_unknown_fields_are_strict_decoding_errors_and_preserved_where_allowed() -> None:
    schema = spec_with({"type": "object", "properties": {"a": {"type": "string"}}})
    with pytest.raises(ApiError) as info:
        admit_custom(widget({"x": {"a": "1", "b": 2}, "y": 1}), crd_of(schema), None)
    assert [(e.path, e.type) for e in info.value.errors] == [
        ("spec.x.b", "unknown field"),
        ("spec.y", "unknown field"),
    ]
    loose = spec_with(
        {
            "type": "object",
            "x-kubernetes-preserve-unknown-fields": True,
            "properties": {"a": {"type": "string", "default": "d"}},
        }
    )
    kept = admit_custom(widget({"x": {"b": 2}}), crd_of(loose), None)
    assert kept.content["spec"] == {"x": {"b": 2, "a": "d"}}


def test_status_subresource_drops_status_on_create_and_keeps_it_on_update() -> None:
    crd = crd_of(spec_with({"type": "integer"}), status_subresource=True)
    crd_schema = crd.spec.versions[0].schema
    assert crd_schema is not None
    raw = dict(crd_schema.open_apiv3_schema or {})
    raw["properties"] = {
        **raw["properties"],
        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
    }
    crd = decode_object(make_crd("Widget", GROUP, raw, status_subresource=True))  # type: ignore[assignment]
    created = admit_custom(
        CustomObject(
            api_version=f"{GROUP}/v1", kind="Widget", content={"spec": {"x": 1}, "status": {"s": 1}}
        ),
        crd,
        None,
    )
    assert "status" not in created.content
    old = CustomObject(
        api_version=f"{GROUP}/v1", kind="Widget", content={"spec": {"x": 1}, "status": {"s": 2}}
    )
    updated = admit_custom(
        CustomObject(
            api_version=f"{GROUP}/v1", kind="Widget", content={"spec": {"x": 2}, "status": {"s": 9}}
        ),
        crd,
        old,
    )
    assert updated.content == {"spec": {"x": 2}, "status": {"s": 2}}


def test_objects_are_stored_in_the_storage_version() -> None:
    crd = decode_object(
        make_crd("Widget", GROUP, {"type": "object"}, versions=("v1alpha1", "v1"), storage="v1")
    )
    assert isinstance(crd, CustomResourceDefinition)
    obj = CustomObject(api_version=f"{GROUP}/v1alpha1", kind="Widget")
    assert admit_custom(obj, crd, None).api_version == f"{GROUP}/v1"
