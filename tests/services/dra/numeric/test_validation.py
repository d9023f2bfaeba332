"""Admission of KEP-4381's fields: exact messages naming object, field path and rule."""

from __future__ import annotations

from typing import Any

import pytest

from draflow.events.api import classic_v1alpha1 as cv
from draflow.events.api import numeric_v1alpha2 as nv
from draflow.events.api.classic_pod import decode_manifest
from draflow.events.api.errors import ApiError
from draflow.services.dra.classic.validation import admit_classic

pytestmark = pytest.mark.kep4381

TEMPLATE = "kind: Parameters\napiVersion: counter.dra.config.k8s.io/v1alpha1\nRequired: {{object.spec.n}}\n"


def decode(manifest: dict[str, Any]) -> Any:
    return decode_manifest(manifest)


def rules(obj: Any) -> list[str]:
    try:
        admit_classic(obj)
    except ApiError as exc:
        return [str(e) for e in exc.errors]
    return []


def klass(*types: dict[str, Any]) -> cv.ResourceClass:
    obj = decode(
        {
            "apiVersion": "cdi.k8s.io/v1alpha1",
            "kind": "ResourceClass",
            "metadata": {"name": "frob"},
            "driverName": "frobnicator.example.com",
            "numericParameters": list(types),
        }
    )
    assert isinstance(obj, cv.ResourceClass)
    return obj


def capacity(**fields: Any) -> nv.NodeResourceCapacity:
    obj = decode(
        {
            "apiVersion": "resource.k8s.io/v1alpha2",
            "kind": "NodeResourceCapacity",
            "metadata": {"name": "node-1-frob"},
            **fields,
        }
    )
    assert isinstance(obj, nv.NodeResourceCapacity)
    return obj


def test_class_with_numeric_parameters_is_admitted() -> None:
    nt = {
        "apiVersion": "frobnicator.example.com/v1alpha1",
        "kind": "ClaimParameters",
        "celTemplate": TEMPLATE,
    }
    stored = admit_classic(klass(nt))
    assert stored.numeric_parameters[0].cel_template == TEMPLATE
    assert stored.numeric_parameters[0].shareable is False


@pytest.mark.parametrize(
    ("types", "expected"),
    [
        (
            [{"apiVersion": "frobnicator.example.com/v1alpha1", "celTemplate": TEMPLATE}],
            ["ResourceClass frob: numericParameters[0].kind: Required value"],
        ),
        (
            [{"kind": "ClaimParameters", "celTemplate": " "}],
            ["ResourceClass frob: numericParameters[0].celTemplate: Required value"],
        ),
        (
            [{"kind": "ClaimParameters", "celTemplate": "Required: {{object.spec.n"}],
            [
                "ResourceClass frob: numericParameters[0].celTemplate: "
                "Invalid value: unbalanced {{ }} placeholder"
            ],
        ),
        (
            [{"kind": "C", "celTemplate": TEMPLATE}, {"kind": "C", "celTemplate": TEMPLATE}],
            ['ResourceClass frob: numericParameters[1]: Duplicate value: "C"'],
        ),
        (
            [{"apiVersion": "Bad_Group/v1", "kind": "C", "celTemplate": TEMPLATE}],
            [
                'ResourceClass frob: numericParameters[0].apiVersion: Invalid value: "Bad_Group/v1": a '
                "lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
                "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex "
                "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
            ],
        ),
    ],
)
def test_class_rules(types: list[dict[str, Any]], expected: list[str]) -> None:
    assert rules(klass(*types)) == expected


def claim(**spec: Any) -> cv.ResourceClaim:
    obj = decode(
        {
            "apiVersion": "cdi.k8s.io/v1alpha1",
            "kind": "ResourceClaim",
            "metadata": {"name": "frob"},
            "spec": {"resourceClassName": "frob", **spec},
        }
    )
    assert isinstance(obj, cv.ResourceClaim)
    return obj


def test_claim_parameters_ref() -> None:
    ref = {"apiGroup": "frobnicator.example.com", "kind": "ClaimParameters", "name": "three"}
    stored = admit_classic(claim(parametersRef=ref))
    assert stored.spec.parameters_ref == cv.ResourceClaimParametersReference(
        api_group="frobnicator.example.com", kind="ClaimParameters", name="three"
    )
    assert rules(claim(parametersRef={"apiGroup": "x.example.com"})) == [
        "ResourceClaim default/frob: spec.parametersRef.kind: Required value",
        "ResourceClaim default/frob: spec.parametersRef.name: Required value",
    ]
    assert rules(claim(parametersRef=ref, parameters={"a": 1})) == [
        "ResourceClaim default/frob: spec.parametersRef: Forbidden: may not be set together with parameters"
    ]


def test_template_claim_accepts_parameters_ref() -> None:
    template = cv.ClaimTemplate(
        resource_class_name="frob",
        parameters_ref=cv.ResourceClaimParametersReference(kind="ClaimParameters", name="x"),
    )
    assert cv.template_spec(template).parameters_ref is not None
    assert template.has_flat_fields()


def test_capacity_is_admitted_cluster_scoped() -> None:
    inst = {
        "id": "frob-0",
        "apiVersion": "counter.dra.config.k8s.io/v1alpha1",
        "kind": "Capacity",
        "data": {"count": 8},
    }
    stored = admit_classic(
        capacity(nodeName="node-1", driverName="frobnicator.example.com", instances=[inst]), None, "ns"
    )
    assert stored.metadata.namespace == ""
    assert stored.instances[0].data == {"count": 8}


def test_capacity_rules() -> None:
    ok = {
        "id": "a",
        "apiVersion": "counter.dra.config.k8s.io/v1alpha1",
        "kind": "Capacity",
        "data": {"count": 1},
    }
    bad = capacity(
        driverName="-frob",
        instances=[ok, ok, {"id": "", "apiVersion": "v1", "kind": "", "data": [1]}],
    )
    head = "NodeResourceCapacity node-1-frob: "
    got = [r.removeprefix(head) for r in rules(bad)]
    assert got[0] == "nodeName: Required value"
    assert got[1].startswith('driverName: Invalid value: "-frob"')
    assert got[2:] == [
        'instances[1].id: Duplicate value: "a"',
        "instances[2].id: Required value",
        "instances[2].kind: Required value",
        'instances[2].data: Invalid value: "<value omitted>": must be a valid JSON object',
    ]
    many = [{**ok, "id": f"i{i}"} for i in range(129)]
    assert rules(capacity(nodeName="n", driverName="frobnicator.example.com", instances=many)) == [
        head + "instances: Too many: 129: must have at most 128 items"
    ]
    big = [{**ok, "data": {"x": "y" * 11000}}]
    assert rules(capacity(nodeName="n", driverName="frobnicator.example.com", instances=big)) == [
        head + "instances[0].data: Too long: may not be more than 10240 bytes"
    ]


def test_capacity_node_and_driver_are_immutable() -> None:
    old = admit_classic(capacity(nodeName="n1", driverName="frobnicator.example.com"))
    new = capacity(nodeName="n2", driverName="frobnicator.example.com")
    with pytest.raises(ApiError) as exc:
        admit_classic(new, old)
    assert [str(e) for e in exc.value.errors] == [
        'NodeResourceCapacity node-1-frob: nodeName: Invalid value: "n2": field is immutable'
    ]
