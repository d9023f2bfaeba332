"""A CustomResourceDefinition's own validation and status (pure), with upstream's messages."""

from __future__ import annotations

from typing import Any

import pytest

from draflow.events.api.apiextensions_v1 import CustomResourceDefinition
from draflow.events.api.codec import decode_object
from draflow.services.apiserver.crd.definition import crd_status, validate_crd
from draflow.services.dra.validation.errs import Errs
from tests.builders.crds import make_crd

pytestmark = pytest.mark.kep4381


def problems(manifest: dict[str, Any], old: dict[str, Any] | None = None) -> list[str]:
    crd = decode_object(manifest)
    assert isinstance(crd, CustomResourceDefinition)
    prev = decode_object(old) if old is not None else None
    errs = Errs(crd.KIND, "", crd.metadata.name)
    validate_crd(errs, crd, prev)  # type: ignore[arg-type]
    return [f"{e.path}: {e.rule}" for e in errs.items]


OBJ = {"type": "object"}


def with_spec(manifest: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {**manifest, "spec": {**manifest["spec"], **spec}}


CASES: list[tuple[str, dict[str, Any], list[str]]] = [
    ("valid", make_crd("Widget", "example.com", OBJ), []),
    (
        "name",
        {**make_crd("Widget", "example.com", OBJ), "metadata": {"name": "widgets.other.com"}},
        ['metadata.name: Invalid value: "widgets.other.com": must be spec.names.plural+"."+spec.group'],
    ),
    (
        "group without dot",
        make_crd("Widget", "example", OBJ, plural="w"),
        ['spec.group: Invalid value: "example": should be a domain with at least one dot'],
    ),
    (
        "protected group",
        make_crd("Widget", "x.k8s.io", OBJ),
        [
            "metadata.annotations[api-approved.kubernetes.io]: Required value: protected groups must have "
            'approval annotation "api-approved.kubernetes.io", see https://github.com/kubernetes/enhancements/pull/1111'
        ],
    ),
    (
        "approved protected group",
        make_crd("Widget", "x.k8s.io", OBJ, annotations={"api-approved.kubernetes.io": "yes"}),
        [],
    ),
    (
        "scope",
        make_crd("Widget", "example.com", OBJ, scope="Global"),
        ['spec.scope: Unsupported value: "Global": supported values: "Cluster", "Namespaced"'],
    ),
    (
        "two storage versions",
        with_spec(
            make_crd("Widget", "example.com", OBJ, versions=("v1", "v2")),
            versions=[
                {"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": OBJ}},
                {"name": "v2", "served": True, "storage": True, "schema": {"openAPIV3Schema": OBJ}},
            ],
        ),
        ["spec.versions: Invalid value: must have exactly one version marked as storage version"],
    ),
    (
        "no schema",
        with_spec(
            make_crd("Widget", "example.com", OBJ), versions=[{"name": "v1", "served": True, "storage": True}]
        ),
        ["spec.versions[0].schema.openAPIV3Schema: Required value: schemas are required"],
    ),
    (
        "root not object",
        make_crd("Widget", "example.com", {"type": "string"}),
        ['spec.versions[0].schema.openAPIV3Schema.type: Invalid value: "string": must be object at the root'],
    ),
    (
        "field without type",
        make_crd("Widget", "example.com", {"type": "object", "properties": {"spec": {}}}),
        [
            "spec.versions[0].schema.openAPIV3Schema.properties[spec].type: Required value: "
            "must not be empty for specified object fields"
        ],
    ),
    (
        "invalid default",
        make_crd(
            "Widget",
            "example.com",
            {"type": "object", "properties": {"n": {"type": "integer", "maximum": 3, "default": 5}}},
        ),
        [
            "spec.versions[0].schema.openAPIV3Schema.properties[n].default: Invalid value: 5: "
            "default in body should be less than or equal to 3"
        ],
    ),
    (
        "rule does not compile",
        make_crd(
            "Widget",
            "example.com",
            {"type": "object", "x-kubernetes-validations": [{"rule": "self.size( > 1"}]},
        ),
        ["x"],
    ),
    (
        "printer column type",
        make_crd("Widget", "example.com", OBJ, columns=({"name": "N", "type": "float", "jsonPath": ".n"},)),
        [
            'spec.versions[0].additionalPrinterColumns[0].type: Unsupported value: "float": '
            'supported values: "integer", "number", "string", "boolean", "date"'
        ],
    ),
]


@pytest.mark.parametrize(("manifest", "want"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_crd_validation(manifest: dict[str, Any], want: list[str]) -> None:
    got = problems(manifest)
    if want == ["x"]:  # a CEL compile error: its own wording, at the rule
        assert len(got) == 1 and got[0].startswith(
            "spec.versions[0].schema.openAPIV3Schema.x-kubernetes-validations[0].rule: Invalid value: "
            '"self.size( > 1": compilation failed: ERROR: <input>:1:'
        )
        return
    assert got == want


def test_scope_and_group_are_immutable() -> None:
    old = make_crd("Widget", "example.com", OBJ)
    assert problems(make_crd("Widget", "example.com", OBJ, scope="Cluster"), old) == [
        'spec.scope: Invalid value: "Cluster": field is immutable'
    ]


def test_status_accepts_names_and_remembers_stored_versions() -> None:
    first = decode_object(make_crd("Widget", "example.com", OBJ, versions=("v1", "v2")))
    assert isinstance(first, CustomResourceDefinition)
    status = crd_status(first, None, "2026-01-01T00:00:00Z")
    assert status.accepted_names is not None and status.accepted_names.list_kind == "WidgetList"
    assert [c.type for c in status.conditions] == ["NamesAccepted", "Established"]
    assert status.stored_versions == ("v1",)
    stored = decode_object({**make_crd("Widget", "example.com", OBJ, versions=("v1", "v2"), storage="v2")})
    assert isinstance(stored, CustomResourceDefinition)
    from msgspec.structs import replace

    again = crd_status(stored, replace(first, status=status), "2026-01-02T00:00:00Z")
    assert again.stored_versions == ("v1", "v2")
    assert again.conditions[1].last_transition_time == "2026-01-01T00:00:00Z"  # still Established since then
