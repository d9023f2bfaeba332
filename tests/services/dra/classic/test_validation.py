"""Defaulting and validation of the classic kinds: one-line errors naming object, path and rule."""

from __future__ import annotations

from typing import Any

import pytest
from msgspec.structs import replace

from draflow.events.api import classic_v1alpha1 as cv
from draflow.events.api.classic_pod import decode_manifest
from draflow.events.api.errors import ApiError
from draflow.events.api.meta import OwnerReference
from draflow.services.dra.classic.validation import admit_classic, apply_classic_defaults, validate_classic
from tests.paths import ROOT

pytestmark = pytest.mark.kep3063


def claim(**spec: Any) -> cv.ResourceClaim:
    obj = decode_manifest(
        {
            "apiVersion": "cdi.k8s.io/v1alpha1",
            "kind": "ResourceClaim",
            "metadata": {"name": "gpu"},
            "spec": {"resourceClassName": "acme-gpu", **spec},
        }
    )
    assert isinstance(obj, cv.ResourceClaim)
    return obj


HEAD = "ResourceClaim default/gpu: "


def messages(obj: Any, old: Any = None) -> list[str]:
    """The messages without the object head for claims (checked once in full below)."""
    return [str(e).removeprefix(HEAD) for e in validate_classic(obj, old)]


def test_full_message_names_object_path_and_rule() -> None:
    bad = replace(admit_classic(claim()), spec=cv.ResourceClaimSpec(allocation_mode=cv.DELAYED))
    assert [str(e) for e in validate_classic(bad)] == [HEAD + "spec.resourceClassName: Required value"]


def test_defaults_delayed_pending_user_limit_one() -> None:
    stored = admit_classic(claim())
    assert stored.metadata.namespace == "default"
    assert stored.spec.allocation_mode == cv.DELAYED
    assert stored.status.phase == cv.PENDING
    assert stored.status.user_limit == 1
    assert admit_classic(claim(allocationMode="Immediate")).spec.allocation_mode == cv.IMMEDIATE


def test_create_drops_user_status() -> None:
    c = replace(claim(), status=cv.ResourceClaimStatus(phase=cv.ALLOCATED, driver_name="x.example.com"))
    assert admit_classic(c).status.phase == cv.PENDING


def test_claim_spec_errors() -> None:
    bad = apply_classic_defaults(claim(allocationMode="Later", parameters=["not", "an", "object"]))
    bad = replace(bad, spec=replace(bad.spec, resource_class_name=""))
    assert messages(bad) == [
        "spec.resourceClassName: Required value",
        'spec.parameters: Invalid value: "<value omitted>": must be a valid JSON object',
        'spec.allocationMode: Unsupported value: "Later": supported values: "Delayed", "Immediate"',
    ]
    with pytest.raises(ApiError, match=r"spec.resourceClassName: Invalid value: \"Acme_GPU\""):
        admit_classic(claim(resourceClassName="Acme_GPU"))


def test_spec_is_immutable() -> None:
    old = admit_classic(claim())
    new = apply_classic_defaults(claim(parameters={"memory": "4Gi"}))
    assert messages(new, old) == [
        "spec: Invalid value: field is immutable (the claim spec can only be set on creation)"
    ]


def test_status_rules() -> None:
    base = admit_classic(claim())
    pod = OwnerReference(api_version="v1", kind="Pod", name="p", uid="u1")
    st = replace(base.status, user_limit=0, reserved_for=(pod,), attributes={"a": "b"})
    assert messages(replace(base, status=st), base) == [
        "status.userLimit: Invalid value: 0: must be -1 (unlimited) or greater than or equal to 1",
        "status.attributes: Forbidden: may only be set while the claim is allocated",
        "status.reservedFor: Forbidden: users may only be added while the claim is Allocated",
        "status.reservedFor: Invalid value: 1: must not have more users than userLimit (0)",
    ]
    two = (pod, replace(pod, name="q", uid="u2"))
    st = replace(base.status, phase=cv.ALLOCATED, driver_name="gpu.acme.com", reserved_for=two)
    assert messages(replace(base, status=st), base) == [
        "status.reservedFor: Invalid value: 2: must not have more users than userLimit (1)"
    ]
    st = replace(st, user_limit=cv.UNLIMITED)
    assert messages(replace(base, status=st), base) == []
    st = replace(base.status, phase="Deallocate")
    assert messages(replace(base, status=st), base) == [
        'status.phase: Unsupported value: "Deallocate": supported values: '
        '"Allocated", "Pending", "Reallocate"'
    ]
    st = replace(base.status, phase=cv.ALLOCATED)
    assert messages(replace(base, status=st), base) == [
        "status.driverName: Required value: the driver that allocated the claim must be recorded"
    ]
    sched = cv.SchedulingStatus(scheduler=cv.SchedulerSchedulingStatus(potential_nodes=("n1", "n1", "N_2")))
    assert messages(replace(base, status=replace(base.status, scheduling=sched)), base) == [
        'status.scheduling.scheduler.potentialNodes[1]: Duplicate value: "n1"',
        'status.scheduling.scheduler.potentialNodes[2]: Invalid value: "N_2": a '
        "lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
        "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
        "validation is "
        "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
    ]
    many = tuple(f"n{i}" for i in range(129))
    sched = cv.SchedulingStatus(driver=cv.DriverSchedulingStatus(unsuitable_nodes=many))
    assert messages(replace(base, status=replace(base.status, scheduling=sched)), base) == [
        "status.scheduling.driver.unsuitableNodes: Too many: 129: must have at most 128 items"
    ]
    sched = cv.SchedulingStatus(driver=cv.DriverSchedulingStatus(answered_potential_nodes=("n1", "n1")))
    assert messages(replace(base, status=replace(base.status, scheduling=sched)), base) == [
        'status.scheduling.driver.answeredPotentialNodes[1]: Duplicate value: "n1"'
    ]


def test_resource_class_rules() -> None:
    rc = decode_manifest(
        {"apiVersion": "cdi.k8s.io/v1alpha1", "metadata": {"name": "x"}, "driverName": "Bad_Driver"}
    )
    with pytest.raises(ApiError) as exc:
        admit_classic(rc)
    assert str(exc.value).startswith('ResourceClass x: driverName: Invalid value: "Bad_Driver"')
    rc = decode_manifest(
        {
            "apiVersion": "cdi.k8s.io/v1alpha1",
            "kind": "ResourceClass",
            "metadata": {"name": "x"},
            "parameters": 3,
        }
    )
    assert messages(rc) == [
        "ResourceClass x: driverName: Required value",
        'ResourceClass x: parameters: Invalid value: "<value omitted>": must be a valid JSON object',
    ]


def kep_pod(entries: list[Any], containers: list[Any], name: str = "p") -> Any:
    meta = {"name": name} if name else {"generateName": "p-"}
    return decode_manifest(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": meta,
            "spec": {"resourceClaims": entries, "containers": containers},
        }
    )


def test_kep_pod_rules() -> None:
    pod = kep_pod(
        [
            {"name": "gpu", "resourceClaimName": "a", "template": {"resourceClassName": "c"}},
            {"name": "gpu", "template": {"resourceClassName": "c", "spec": {"resourceClassName": "c"}}},
            {"name": "x", "template": {"allocationMode": "Now"}},
        ],
        [{"name": "c", "image": "i", "resources": {"claims": ["gpu", "gpu", "nope"]}}],
    )
    assert messages(pod) == [
        "Pod p: spec.resourceClaims[0]: Invalid value: must specify exactly one of resourceClaimName or "
        "template",
        'Pod p: spec.resourceClaims[1].name: Duplicate value: "gpu"',
        "Pod p: spec.resourceClaims[1].template: Invalid value: set either spec or the flattened fields "
        "(resourceClassName, parameters, parametersRef, allocationMode)",
        "Pod p: spec.resourceClaims[2].template.resourceClassName: Required value",
        'Pod p: spec.resourceClaims[2].template.allocationMode: Unsupported value: "Now": supported values: '
        '"Delayed", "Immediate"',
        'Pod p: spec.containers[0].resources.claims[1]: Duplicate value: "gpu"',
        'Pod p: spec.containers[0].resources.claims[2]: Unsupported value: "nope": supported values: '
        '"gpu", "x"',
    ]


def test_kep_pod_template_needs_a_fixed_valid_name() -> None:
    pod = kep_pod([{"name": "gpu", "template": {"resourceClassName": "c"}}], [], name="")
    assert messages(pod) == [
        "Pod p-: metadata.name: Required value: a Pod with inline claim templates needs a fixed name"
    ]
    pod = kep_pod([{"name": "g" * 60, "template": {"resourceClassName": "c"}}], [], name="p" * 200)
    (msg,) = messages(pod)
    assert "generated claim name <pod name>-<name> is invalid: must be no more than 253 characters" in msg


def test_seed_pod_is_valid() -> None:

    from draflow.events.api.loader import parse_documents

    path = ROOT / "examples" / "classic" / "device-consumer-pod.yaml"
    ((_, raw),) = parse_documents(path.read_text())
    assert messages(decode_manifest(raw)) == []


def test_phase_transitions_follow_the_kep() -> None:
    base = admit_classic(claim())
    reallocate = replace(base, status=replace(base.status, phase=cv.REALLOCATE, driver_name="gpu.acme.com"))
    assert messages(reallocate, base) == [
        'status.phase: Invalid value: "Reallocate": cannot change from Pending to Reallocate'
    ]
    allocated = replace(base, status=replace(base.status, phase=cv.ALLOCATED, driver_name="gpu.acme.com"))
    assert messages(allocated, base) == []
    assert (
        messages(replace(allocated, status=replace(allocated.status, phase=cv.REALLOCATE)), allocated) == []
    )
    assert messages(base, reallocate) == []


def test_node_gpu_capacity_rules() -> None:
    from draflow.events.api.acme_gpu_v1alpha1 import NodeGpuCapacity

    raw = {
        "apiVersion": "gpu.acme.com/v1alpha1",
        "kind": "NodeGpuCapacity",
        "metadata": {"name": "n1"},
        "spec": {"gpus": [{"name": "gpu-0", "memory": "16Gi"}, {"name": "gpu-0", "memory": 0}]},
    }
    obj = decode_manifest(raw)
    assert isinstance(obj, NodeGpuCapacity)
    assert [str(e) for e in validate_classic(apply_classic_defaults(obj))] == [
        'NodeGpuCapacity n1: spec.gpus[1].name: Duplicate value: "gpu-0"',
        'NodeGpuCapacity n1: spec.gpus[1].memory: Invalid value: "0": must be greater than zero',
    ]
    other = replace(obj, spec=replace(obj.spec, node_name="n2", gpus=obj.spec.gpus[:1]))
    assert [str(e) for e in validate_classic(other)] == [
        'NodeGpuCapacity n1: spec.nodeName: Invalid value: "n2": '
        "must be the object's name (one object per node)"
    ]
