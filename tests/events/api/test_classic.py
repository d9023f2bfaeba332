"""Decoding the KEP-3063 manifests exactly as the seed writes them, and keeping the kinds apart."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import msgspec
import pytest

from draflow.events.api import classic_v1alpha1 as cv
from draflow.events.api import core_v1 as c1
from draflow.events.api import resource_v1 as r1
from draflow.events.api.classic_pod import (
    POD_RESOURCES_ANNOTATION,
    decode_manifest,
    encode_classic,
    is_kep_pod,
    normalize_manifest,
    pod_claims,
)
from draflow.events.api.codec import decode_object
from draflow.events.api.errors import ApiError
from draflow.events.api.loader import parse_documents
from draflow.events.api.registry import lookup_resource, lookup_wire
from draflow.events.objects import object_applied
from draflow.events.subjects import aggregate_subject
from tests.paths import ROOT

pytestmark = pytest.mark.kep3063

SEED = ROOT / "tests" / "data" / "seeds" / "kep-3063-dynamic-resource-allocation.md"  # copy of the seed
EXAMPLES = ROOT / "examples" / "classic"


def _seed_blocks() -> list[str]:
    return re.findall(r"```\n(apiVersion:.*?)```", SEED.read_text(), re.S)


def _docs(path: Path) -> list[object]:
    return [d for _, d in parse_documents(path.read_text())]


def test_examples_are_the_seed_text_verbatim() -> None:
    rc, pod = _seed_blocks()
    assert (EXAMPLES / "acme-gpu-resourceclass.yaml").read_text() == rc
    assert (EXAMPLES / "device-consumer-pod.yaml").read_text() == pod


def test_kindless_resource_class_decodes() -> None:
    (raw,) = _docs(EXAMPLES / "acme-gpu-resourceclass.yaml")
    rc = decode_manifest(raw)
    assert isinstance(rc, cv.ResourceClass)
    assert rc.metadata.name == "acme-gpu"
    assert rc.driver_name == "gpu.acme.com"
    assert rc.parameters == {"initCommand": ["/usr/local/bin/acme-gpu-init", "--cluster", "my-cluster"]}
    shown = encode_classic(rc)
    assert shown == {**raw, "kind": "ResourceClass"}  # type: ignore[dict-item]


def test_device_consumer_pod_decodes_and_shows_as_written() -> None:
    (raw,) = _docs(EXAMPLES / "device-consumer-pod.yaml")
    assert is_kep_pod(raw)
    pod = decode_manifest(raw)
    assert isinstance(pod, c1.Pod)
    # the v1 Pod carries no claims: the structured machinery leaves it alone
    assert pod.spec.resource_claims == ()
    assert all(c.resources.claims == () for c in pod.spec.containers)
    assert pod.spec.containers[0].resources.requests == {"memory": "64Mi", "cpu": "250m"}
    claims = pod_claims(pod)
    assert claims is not None
    (entry,) = claims.resource_claims
    assert entry.name == "gpu" and entry.template is not None
    assert cv.template_spec(entry.template) == cv.ResourceClaimSpec(
        resource_class_name="acme-gpu", parameters={"memory": "2Gi"}
    )
    assert claims.containers == {"workload": ("gpu",), "monitor": ("gpu",)}
    shown = encode_classic(pod)
    shown.pop("status")
    assert shown == raw
    # the stored form decodes again (annotation form is a plain v1 Pod)
    assert decode_object(msgspec.json.decode(msgspec.json.encode(pod_manifest := encode_pod(pod)))) == pod
    assert POD_RESOURCES_ANNOTATION in pod_manifest["metadata"]["annotations"]


def encode_pod(pod: c1.Pod) -> dict:
    from draflow.events.api.codec import encode_object

    return encode_object(pod)


def test_v1_pods_are_untouched() -> None:
    raw = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "t"}],
            "containers": [{"name": "c", "image": "i", "resources": {"claims": [{"name": "gpu"}]}}],
        },
    }
    assert not is_kep_pod(raw)
    assert normalize_manifest(raw) is raw


def test_nested_template_and_standalone_claim_names() -> None:
    raw = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {
            "resourceClaims": [
                {"name": "fpga", "resourceClaimName": "shared-fpga"},
                {
                    "name": "gpu",
                    "template": {
                        "metadata": {"labels": {"a": "b"}},
                        "spec": {"resourceClassName": "acme-gpu", "allocationMode": "Immediate"},
                    },
                },
            ],
            "containers": [{"name": "c", "image": "i", "resources": {"claims": ["fpga", "gpu"]}}],
        },
    }
    pod = decode_manifest(raw)
    claims = pod_claims(pod)  # type: ignore[arg-type]
    assert claims is not None
    assert claims.resource_claims[0].resource_claim_name == "shared-fpga"
    assert cv.template_spec(claims.resource_claims[1].template).allocation_mode == "Immediate"  # type: ignore[arg-type]


def test_kep_pod_errors_name_the_field() -> None:
    bad_template = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"resourceClaims": [{"name": "gpu", "template": {"resourceClass": "x"}}], "containers": []},
    }
    with pytest.raises(ApiError) as exc:
        decode_manifest(bad_template)
    assert str(exc.value) == (
        'Pod p: strict decoding error: unknown field "spec.resourceClaims[0].template.resourceClass"'
    )
    mixed = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {
            "resourceClaims": [{"name": "gpu", "resourceClaimName": "g"}],
            "containers": [{"name": "c", "resources": {"claims": ["gpu", {"name": "gpu"}]}}],
        },
    }
    with pytest.raises(ApiError, match=r"spec.containers\[0\].resources.claims: a KEP-3063 Pod lists"):
        decode_manifest(mixed)


def test_kindless_document_without_hints_is_refused() -> None:
    with pytest.raises(ApiError, match="kind: Required value: kind not set"):
        decode_manifest({"apiVersion": "cdi.k8s.io/v1alpha1", "metadata": {"name": "x"}})


def test_claim_kind_clash_is_kept_apart() -> None:
    manifest = {
        "apiVersion": "cdi.k8s.io/v1alpha1",
        "kind": "ResourceClaim",
        "metadata": {"name": "gpu", "namespace": "default"},
        "spec": {"resourceClassName": "acme-gpu", "parameters": {"memory": "2Gi"}},
    }
    claim = decode_manifest(manifest)
    assert isinstance(claim, cv.ResourceClaim)
    assert encode_classic(claim)["kind"] == "ResourceClaim"
    assert encode_classic(claim)["apiVersion"] == "cdi.k8s.io/v1alpha1"
    structured = lookup_wire("resource.k8s.io/v1", "ResourceClaim")
    assert structured is not None and structured.struct is r1.ResourceClaim
    # events and subjects use the internal kind token
    assert type(object_applied(claim)).__name__ == "ClassicResourceClaimApplied"
    assert aggregate_subject(claim.KIND, "default", "gpu") == "draflow.ev.ClassicResourceClaim.default.gpu"
    # CLI names: bare plural stays structured, the qualified one is classic
    assert lookup_resource("resourceclaims").struct is r1.ResourceClaim  # type: ignore[union-attr]
    assert lookup_resource("resourceclaims.cdi.k8s.io").struct is cv.ResourceClaim  # type: ignore[union-attr]
    assert lookup_resource("resourceclaim.cdi.k8s.io").struct is cv.ResourceClaim  # type: ignore[union-attr]
    assert lookup_resource("ClassicResourceClaim").struct is cv.ResourceClaim  # type: ignore[union-attr]
    assert lookup_resource("resourceclasses").struct is cv.ResourceClass  # type: ignore[union-attr]


def test_claim_status_shape_round_trips() -> None:
    manifest = {
        "apiVersion": "cdi.k8s.io/v1alpha1",
        "kind": "ResourceClaim",
        "metadata": {"name": "gpu", "namespace": "default"},
        "spec": {"resourceClassName": "acme-gpu", "allocationMode": "Delayed"},
        "status": {
            "phase": "Pending",
            "driverName": "gpu.acme.com",
            "scheduling": {
                "scheduler": {"selectedNode": "n1", "potentialNodes": ["n1", "n2"]},
                "driver": {
                    "unsuitableNodes": ["n2"],
                    "answeredPotentialNodes": ["n1", "n2"],
                    "availableOnNodes": {
                        "nodeSelectorTerms": [
                            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
                        ]
                    },
                },
            },
            "userLimit": -1,
            "reservedFor": [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u"}],
        },
    }
    claim = decode_manifest(manifest)
    assert encode_classic(claim) == manifest


def test_every_example_decodes_and_validates() -> None:
    from draflow.services.dra.classic.validation import apply_classic_defaults, validate_classic

    seen = []
    for path in sorted(EXAMPLES.glob("*.yaml")):
        for raw in _docs(path):
            obj = apply_classic_defaults(decode_manifest(raw))
            assert [str(e) for e in validate_classic(obj)] == [], path.name
            seen.append(type(obj).__name__)
    assert seen.count("ResourceClass") == 2 and seen.count("Pod") == 3 and seen.count("ResourceClaim") == 2


def test_kep_pod_templates_in_deployments() -> None:
    from draflow.events.api import workloads_v1 as w1

    (pod_raw,) = _docs(EXAMPLES / "device-consumer-pod.yaml")
    pod_raw = dict(pod_raw)  # type: ignore[call-overload]
    template = {"metadata": {"labels": {"app": "dc"}}, "spec": pod_raw["spec"]}
    deployment: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "dc", "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": "dc"}}, "template": template},
    }
    obj = decode_manifest(deployment)
    assert isinstance(obj, w1.Deployment)
    meta = obj.spec.template.metadata
    assert meta.labels == {"app": "dc"} and POD_RESOURCES_ANNOTATION in meta.annotations
    assert obj.spec.template.spec.resource_claims == ()
    bad: dict[str, Any] = {
        **deployment,
        "spec": {
            **deployment["spec"],
            "template": {"spec": {"resourceClaims": [{"name": "x", "template": {"oops": 1}}]}},
        },
    }
    with pytest.raises(ApiError) as exc:
        decode_manifest(bad)
    assert str(exc.value) == (
        "Deployment default/dc: strict decoding error: unknown field "
        '"spec.template.spec.resourceClaims[0].template.oops"'
    )
