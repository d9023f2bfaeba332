"""CEL templates: the KEP's example, and every failure as one line naming class and template."""

from __future__ import annotations

from typing import Any

import pytest

from draflow.events.api import classic_v1alpha1 as cv
from draflow.events.api.meta import ObjectMeta
from draflow.services.dra.numeric import counter
from draflow.services.dra.numeric.claims import NotReady, build_allocation, resolve
from draflow.services.dra.numeric.registry import load_models
from draflow.services.dra.numeric.template import TemplateError, expand, model_parameters

pytestmark = pytest.mark.kep4381

KEP_TEMPLATE = """kind: Parameters
apiVersion: counter.dra.config.k8s.io/v1alpha1
Required: {{object.spec.numberOfFrobnicators}}
"""
MODELS = load_models()
FROB = {
    "apiVersion": "frobnicator.example.com/v1alpha1",
    "kind": "ClaimParameters",
    "metadata": {"name": "three", "namespace": "default"},
    "spec": {"numberOfFrobnicators": 3, "env": {"A": "b"}},
}


def test_kep_example() -> None:
    out = model_parameters(KEP_TEMPLATE, FROB, MODELS)
    assert out.model.group == "counter.dra.config.k8s.io"
    assert out.parameters == counter.Parameters(required=3)
    assert out.data == {
        "kind": "Parameters",
        "apiVersion": "counter.dra.config.k8s.io/v1alpha1",
        "Required": 3,
    }


def test_placeholders_write_json_literals() -> None:
    template = "a: {{object.s}}\nb: {{[1, object.n]}}\nc: {{object.m}}\nd: {{object.n > 2}}\n"
    obj = {"s": "x: y", "n": 3, "m": {"k": ["v"]}}
    assert expand(template, obj) == {"a": "x: y", "b": [1, 3], "c": {"k": ["v"]}, "d": True}


@pytest.mark.parametrize(
    ("template", "obj", "message"),
    [
        (
            KEP_TEMPLATE,
            {"spec": {}},
            "{{object.spec.numberOfFrobnicators}}: no such key: numberOfFrobnicators",
        ),
        (
            KEP_TEMPLATE,
            {"spec": {"numberOfFrobnicators": "3"}},
            "not a valid counter.dra.config.k8s.io/v1alpha1 Parameters: "
            "Expected `int`, got `str` - at `$.required`",
        ),
        (
            "Required: {{object.spec.(}}",
            {},
            "{{object.spec.(}}: compilation failed: ERROR: <input>:1:13: Syntax error",
        ),
        ("Required: {{}}", {}, "empty placeholder at offset 10"),
        ("- {{1}}", {}, "expanded template is not a mapping"),
        ("Required: 1", {}, "expanded template has no apiVersion"),
        (
            "apiVersion: nobody.example.com/v1\nkind: P",
            {},
            "no numeric model serves nobody.example.com/v1 (installed: counter.dra.config.k8s.io, "
            "partitions.dra.config.k8s.io",
        ),
        (
            "apiVersion: counter.dra.config.k8s.io/v1alpha1\nkind: Capacity",
            {},
            "kind 'Capacity': model counter.dra.config.k8s.io expects 'Parameters'",
        ),
        ("a: [{{1}}", {}, "expanded template is not valid YAML"),
    ],
)
def test_template_errors(template: str, obj: dict[str, Any], message: str) -> None:
    with pytest.raises(TemplateError) as exc:
        model_parameters(template, obj, MODELS)
    assert str(exc.value).startswith(message)


def frob_class(template: str = KEP_TEMPLATE, **extra: Any) -> cv.ResourceClass:
    nt = cv.NumericParameterType(
        api_version="frobnicator.example.com/v1alpha1", kind="ClaimParameters", cel_template=template, **extra
    )
    return cv.ResourceClass(
        metadata=ObjectMeta(name="frob"), driver_name="frobnicator.example.com", numeric_parameters=(nt,)
    )


def frob_claim(ref_kind: str = "ClaimParameters") -> cv.ResourceClaim:
    ref = cv.ResourceClaimParametersReference(
        api_group="frobnicator.example.com", kind=ref_kind, name="three"
    )
    spec = cv.ResourceClaimSpec(resource_class_name="frob", parameters_ref=ref)
    return cv.ResourceClaim(metadata=ObjectMeta(name="c", namespace="default", uid="u"), spec=spec)


def lookup(group: str, kind: str, namespace: str, name: str) -> Any:
    return (
        FROB
        if (group, kind, namespace, name)
        == ("frobnicator.example.com", "ClaimParameters", "default", "three")
        else None
    )


def test_resolve_and_allocation_embeds_class_and_object() -> None:
    cls = frob_class(shareable=True)
    resolved = resolve(frob_claim(), cls, lookup, MODELS)
    alloc = build_allocation(cls, resolved, "node-1", counter.Allocation(instance="frob-0", count=3))
    assert alloc.node_name == "node-1" and alloc.driver_name == "frobnicator.example.com"
    assert (alloc.api_version, alloc.kind, alloc.data) == (
        "counter.dra.config.k8s.io/v1alpha1",
        "Allocation",
        {"instance": "frob-0", "count": 3},
    )
    assert alloc.parameters["spec"]["env"] == {"A": "b"}
    assert alloc.resource_class["numericParameters"][0]["celTemplate"] == KEP_TEMPLATE
    assert alloc.shareable is True


def test_resolve_problems_name_class_and_template() -> None:
    with pytest.raises(TemplateError) as exc:
        resolve(
            frob_claim(),
            frob_class(
                "apiVersion: counter.dra.config.k8s.io/v1alpha1\nkind: Parameters\n"
                "Required: {{object.spec.x}}"
            ),
            lookup,
            MODELS,
        )
    assert str(exc.value).startswith(
        "class frob, template for frobnicator.example.com/v1alpha1/ClaimParameters: "
        "{{object.spec.x}}: no such key: x"
    )
    with pytest.raises(
        TemplateError,
        match=r"class frob: parameters of kind Other \(frobnicator.example.com\) are not allowed",
    ):
        resolve(frob_claim("Other"), frob_class(), lookup, MODELS)
    missing = frob_claim()
    missing = cv.ResourceClaim(metadata=ObjectMeta(name="c", namespace="other"), spec=missing.spec)
    with pytest.raises(NotReady, match="parameters ClaimParameters other/three not found"):
        resolve(missing, frob_class(), lookup, MODELS)
