"""Validation as the Kubernetes API server does it: rules, limits and wording."""

from __future__ import annotations

from typing import Any

import pytest

from draflow.events.api.codec import decode_object
from draflow.events.api.errors import ApiError
from draflow.events.api.resource_v1 import ResourceClaim
from draflow.services.apiserver.admission import admit, apply_defaults, check_admin_access, validate

pytestmark = pytest.mark.kep4381


def _errors(raw: dict[str, Any], old: dict[str, Any] | None = None) -> list[str]:
    obj = apply_defaults(decode_object(raw))
    prev = apply_defaults(decode_object(old)) if old is not None else None
    return [str(e) for e in validate(obj, prev)]


def claim(*requests: dict[str, Any], **devices: Any) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "gpu", "namespace": "default"},
        "spec": {"devices": {"requests": list(requests), **devices}},
    }


def req(name: str = "req-0", **exactly: Any) -> dict[str, Any]:
    return {"name": name, "exactly": {"deviceClassName": "gpu.example.com", **exactly}}


def slice_(**spec: Any) -> dict[str, Any]:
    base = {
        "driver": "gpu.example.com",
        "pool": {"name": "node-1", "resourceSliceCount": 1},
        "nodeName": "node-1",
    }
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "s"},
        "spec": {**base, **spec},
    }


def test_valid_claim_gets_defaults_and_passes() -> None:
    obj = admit(decode_object(claim(req())))
    exactly = obj.spec.devices.requests[0].exactly  # type: ignore[attr-defined]
    assert (exactly.allocation_mode, exactly.count) == ("ExactCount", 1)


def test_count_must_be_positive_for_exact_count() -> None:
    assert _errors(claim(req(allocationMode="ExactCount", count=-1))) == [
        "ResourceClaim default/gpu: spec.devices.requests[0].exactly.count: Invalid value: -1: must be "
        "greater than zero"
    ]


def test_count_forbidden_with_all_and_unknown_mode() -> None:
    errors = _errors(claim(req(allocationMode="All", count=2), req("r2", allocationMode="Some")))
    assert errors == [
        "ResourceClaim default/gpu: spec.devices.requests[0].exactly.count: Invalid value: 2: "
        "must not be specified when allocationMode is 'All'",
        "ResourceClaim default/gpu: spec.devices.requests[1].exactly.allocationMode: Unsupported value: "
        '"Some": supported values: "All", "ExactCount"',
    ]


def test_exactly_one_of_exactly_and_first_available() -> None:
    both = {**req(), "firstAvailable": [{"name": "a", "deviceClassName": "x"}]}
    errors = _errors(claim({"name": "none"}, both))
    assert (
        "spec.devices.requests[0]: Required value: exactly one of `exactly` or `firstAvailable` is required"
        in (errors[0])
    )
    assert errors[1].endswith(
        "spec.devices.requests[1]: Invalid value: null: exactly one of `exactly` or "
        "`firstAvailable` is required, but multiple fields are set"
    )


def test_size_limits() -> None:
    errors = _errors(claim(*[req(f"r{i}") for i in range(33)]))
    assert errors == [
        "ResourceClaim default/gpu: spec.devices.requests: Too many: 33: must have at most 32 items"
    ]
    sel = [{"cel": {"expression": "true"}}] * 33
    assert _errors(claim(req(selectors=sel)))[0].endswith("Too many: 33: must have at most 32 items")
    long_expr = "device.driver == '" + "x" * 10240 + "'"
    assert _errors(claim(req(selectors=[{"cel": {"expression": long_expr}}]))) == [
        "ResourceClaim default/gpu: spec.devices.requests[0].exactly.selectors[0].cel.expression: "
        "Too long: may not be more than 10240 bytes"
    ]


def test_names_duplicates_and_references() -> None:
    raw = claim(
        req("Bad_Name"),
        req("ok"),
        req("ok"),
        constraints=[{"requests": ["missing"], "matchAttribute": "numa"}],
        config=[{"requests": ["ok"], "opaque": {"driver": "gpu.example.com", "parameters": [1]}}],
    )
    errors = "\n".join(_errors(raw))
    assert 'spec.devices.requests[0].name: Invalid value: "Bad_Name": a lowercase RFC 1123 label' in errors
    assert 'spec.devices.requests[2]: Duplicate value: "ok"' in errors
    assert (
        'spec.devices.constraints[0].requests[0]: Invalid value: "missing": must be the name of a request'
        in errors
    )
    assert (
        'spec.devices.constraints[0].matchAttribute: Invalid value: "numa": a fully qualified name' in errors
    )
    assert (
        'spec.devices.config[0].opaque.parameters: Invalid value: "<value omitted>": must be a valid JSON '
        "object" in (errors)
    )


def test_cel_selector_is_syntax_checked() -> None:
    errors = _errors(
        claim(
            req(
                selectors=[{"cel": {"expression": "device.driver == 'x'"}}, {"cel": {"expression": "a["}}, {}]
            )
        )
    )
    assert len(errors) == 2
    assert 'selectors[1].cel.expression: Invalid value: "a[": compilation failed' in errors[0]
    assert errors[1].endswith("spec.devices.requests[0].exactly.selectors[2].cel: Required value")


def test_tolerations() -> None:
    tols = [
        {"key": "k", "operator": "Exists", "value": "v"},
        {"operator": "Sometimes"},
        {"effect": "NoExecute"},
    ]
    errors = _errors(claim(req(tolerations=tols)))
    assert errors == [
        "ResourceClaim default/gpu: spec.devices.requests[0].exactly.tolerations[0].value: Invalid value: "
        '"v": '
        "must be empty for operator `Exists`",
        "ResourceClaim default/gpu: spec.devices.requests[0].exactly.tolerations[1].operator: Unsupported "
        "value: "
        '"Sometimes": supported values: "Equal", "Exists"',
    ]  # the third (empty key, defaulted to Equal) is accepted, as upstream


def test_claim_spec_is_immutable() -> None:
    errors = _errors(claim(req(count=2)), old=claim(req()))
    assert errors == ["ResourceClaim default/gpu: spec: Invalid value: null: field is immutable"]


def test_status_rules() -> None:
    raw = claim(req())
    raw["status"] = {"reservedFor": [{"resource": "pods", "name": "p", "uid": "u1"}]}
    assert _errors(raw) == [
        "ResourceClaim default/gpu: status.reservedFor: Forbidden: may not be specified when `allocated` "
        "is not set"
    ]
    raw["status"]["allocation"] = {
        "devices": {"results": [{"request": "nope", "driver": "d", "pool": "p", "device": "dev"}]}
    }
    assert 'status.allocation.devices.results[0].request: Invalid value: "nope"' in _errors(raw)[0]


def test_admin_access_needs_the_namespace_label() -> None:
    obj = apply_defaults(decode_object(claim(req(adminAccess=True))))
    assert [str(e) for e in check_admin_access(obj, {})] == [
        "ResourceClaim default/gpu: spec.devices.requests[0].exactly.adminAccess: Forbidden: admin access to "
        "devices requires the `resource.kubernetes.io/admin-access: true` label on the containing namespace"
    ]
    assert check_admin_access(obj, {"resource.kubernetes.io/admin-access": "true"}) == []


def test_metadata_rules() -> None:
    raw = claim(req())
    raw["metadata"] = {"name": "UPPER", "labels": {"bad key!": "v"}}
    errors = _errors(raw)
    assert errors[0].startswith(
        'ResourceClaim default/UPPER: metadata.name: Invalid value: "UPPER": a lowercase RFC'
    )
    assert 'metadata.labels: Invalid value: "bad key!": name part must consist of' in errors[1]
    cls = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {}}
    assert _errors(cls) == [
        "DeviceClass <unnamed>: metadata.name: Required value: name or generateName is required"
    ]


def test_device_class_extended_resource_name() -> None:
    cls = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "c"},
        "spec": {"extendedResourceName": "gpu"},
    }
    assert _errors(cls) == [
        'DeviceClass c: spec.extendedResourceName: Invalid value: "gpu": must be a valid extended resource '
        "name"
    ]
    cls["spec"] = {"extendedResourceName": "example.com/gpu"}
    assert _errors(cls) == []


def test_slice_node_scope_and_devices() -> None:
    assert _errors(slice_(nodeName=None)) == [
        "ResourceSlice s: spec: Required value: exactly one of `nodeName`, `nodeSelector`, `allNodes`, "
        "`perDeviceNodeSelection` is required"
    ]
    errors = _errors(slice_(allNodes=True))
    assert errors[0].startswith(
        'ResourceSlice s: spec: Invalid value: "{`nodeName`, `allNodes`}": exactly one of'
    )
    devices = [
        {"name": "a", "attributes": {"x": {"int": 1, "string": "s"}, "v": {"version": "1.2"}}},
        {"name": "a"},
    ]
    errors = _errors(slice_(devices=devices))
    assert errors == [
        "ResourceSlice s: spec.devices[0].attributes[x]: Invalid value: exactly one value must be specified",
        'ResourceSlice s: spec.devices[0].attributes[v].version: Invalid value: "1.2": must be a string '
        "compatible with semver.org spec 2.0.0",
        'ResourceSlice s: spec.devices[1]: Duplicate value: "a"',
    ]
    too_many = [{"name": f"d{i}"} for i in range(129)]
    assert _errors(slice_(devices=too_many)) == [
        "ResourceSlice s: spec.devices: Too many: 129: must have at most 128 items"
    ]


def test_slice_request_policy() -> None:
    policy = {"default": "3Gi", "validRange": {"min": "1Gi", "step": "2Gi"}}
    dev = {
        "name": "a",
        "allowMultipleAllocations": True,
        "capacity": {"memory": {"value": "8Gi", "requestPolicy": policy}},
    }
    assert _errors(slice_(devices=[dev])) == []
    policy["default"] = "2Gi"
    assert _errors(slice_(devices=[dev])) == [
        "ResourceSlice s: spec.devices[0].capacity[memory].requestPolicy.validRange.step: Invalid value: "
        '"2Gi": '
        "value is not a multiple of a given step (2Gi) from (1Gi)"
    ]
    dev["allowMultipleAllocations"] = False
    assert _errors(slice_(devices=[dev])) == [
        "ResourceSlice s: spec.devices[0].capacity[memory].requestPolicy: Forbidden: "
        "allowMultipleAllocations must be true"
    ]


def test_pod_claim_references() -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {
            "resourceClaims": [
                {"name": "gpu"},
                {"name": "x", "resourceClaimName": "c", "resourceClaimTemplateName": "t"},
            ],
            "containers": [
                {"name": "c", "image": "i", "resources": {"claims": [{"name": "gpu"}, {"name": "other"}]}}
            ],
        },
    }
    assert _errors(pod) == [
        "Pod ns/p: spec.resourceClaims[0]: Invalid value: must specify one of: `resourceClaimName`, "
        "`resourceClaimTemplateName`",
        "Pod ns/p: spec.resourceClaims[1]: Invalid value: at most one of `resourceClaimName` or "
        "`resourceClaimTemplateName` may be specified",
        'Pod ns/p: spec.containers[0].resources.claims[1]: Not found: "other": must be one of the names in '
        "pod.spec.resourceClaims: gpu, x",
    ]


def test_pod_extended_resources_and_tolerations() -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {
            "tolerations": [{"effect": "NoSchedule", "value": "v"}],
            "containers": [
                {"name": "c", "image": "i", "resources": {"limits": {"nvidia.com/gpu": "1.5", "gpu": 1}}}
            ],
        },
    }
    errors = _errors(pod)
    assert (
        'Pod default/p: spec.containers[0].resources.limits[nvidia.com/gpu]: Invalid value: "1500m": must '
        "be an integer" in errors
    )
    assert (
        'Pod default/p: spec.containers[0].resources.limits[gpu]: Invalid value: "gpu": must be a standard '
        "resource for containers" in errors
    )
    assert any(
        "spec.tolerations[0].operator: Invalid value" in e and "operator must be Exists" in e for e in errors
    )


def test_admit_raises_with_every_error() -> None:
    with pytest.raises(ApiError) as info:
        admit(decode_object(claim(req("A"), req("B"))))
    assert len(info.value.errors) == 2


def test_namespace_defaulting() -> None:
    obj = apply_defaults(decode_object(claim(req())), namespace="team-a")
    assert obj.metadata.namespace == "default"  # type: ignore[attr-defined]  # manifest wins
    raw = claim(req())
    del raw["metadata"]["namespace"]
    assert apply_defaults(decode_object(raw), namespace="team-a").metadata.namespace == "team-a"  # type: ignore[attr-defined]
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n", "namespace": "x"}}
    assert apply_defaults(decode_object(node)).metadata.namespace == ""  # type: ignore[attr-defined]


def test_cel_is_checked_with_the_project_compiler() -> None:
    from draflow.services.apiserver.admission.cel import check_cel

    problem = check_cel("device.nosuch == 1")
    assert problem is not None and problem.startswith("compilation failed: ERROR: <input>:1:7:")
    assert "\n" not in problem
    assert check_cel('device.attributes["dra.net"].type == "rdma"') is None


def test_regex_errors_are_worded_as_kubernetes() -> None:
    def sel(expr: str) -> dict[str, Any]:
        return req(selectors=[{"cel": {"expression": expr}}])

    path = "ResourceClaim default/gpu: spec.devices.requests[0].exactly.selectors[0].cel.expression"
    # cel-go's regex literal validator: an invalid value at the literal's position
    assert _errors(claim(sel("device.driver.matches('x++')"))) == [
        f"{path}: Invalid value: \"device.driver.matches('x++')\": compilation failed: "
        "ERROR: <input>:1:23: invalid matches argument"
    ]
    # program planning compiles find's literal pattern: field.InternalError upstream
    assert _errors(claim(sel("device.driver.find(')') == ''"))) == [
        f"{path}: Internal error: program instantiation failed: error parsing regexp: unexpected ): `)`"
    ]
    # RE2 syntax: lookarounds and backreferences are refused, \\z is fine
    assert _errors(claim(sel("device.driver.matches('a(?=b)')")))
    assert _errors(claim(sel("device.driver.matches('(a)\\\\1')")))
    assert _errors(claim(sel("device.driver.matches('gpu\\\\.example\\\\.com\\\\z')"))) == []


def test_admission_checks_do_not_evaluate_user_cel() -> None:
    import time

    from draflow.services.apiserver.admission.cel import check_cel

    start = time.perf_counter()
    assert check_cel("'" + "a" * 28 + "!'.matches('^(a+)+$')") is None
    assert check_cel(" && ".join(["lists.range(900000).size() > 0"] * 100)) is None
    assert time.perf_counter() - start < 1.0


def test_status_dropped_on_create_and_kept_on_update() -> None:
    raw = claim(req())
    raw["status"] = {"reservedFor": [{"resource": "pods", "name": "p", "uid": "u1"}]}
    created = admit(decode_object(raw))  # status of the manifest is ignored, as upstream
    assert created.status.reserved_for == ()  # type: ignore[attr-defined]
    assert _errors(raw)  # ...but as a status write it is invalid (no allocation)


def test_recorded_allocated_claim_is_a_valid_status_write() -> None:
    from msgspec.structs import replace

    from draflow.events.api.loader import load_manifests
    from tests.events.api.realworld_table import CORPUS

    path = CORPUS / "kubernetes-sigs__dranet" / "examples__azure_aks_examples__gb300__resource-claim.yaml"
    (result,) = [r for r in load_manifests(path) if r.obj is not None]
    assert isinstance(result.obj, ResourceClaim)
    new = apply_defaults(result.obj)
    old = replace(new, status=type(new.status)())
    assert new.status.allocation is not None
    # the dump's device condition has no lastTransitionTime (trimmed when it was recorded): as a
    # status write that alone is refused, as upstream's ValidateConditions does
    assert [f"{e.path}: {e.rule}" for e in validate(new, old)] == [
        "status.devices[0].conditions[0].lastTransitionTime: Required value: must be set"
    ]
    (dev,) = new.status.devices
    (cond,) = dev.conditions
    timed = replace(dev, conditions=(replace(cond, last_transition_time="2026-03-01T12:00:00Z"),))
    assert validate(replace(new, status=replace(new.status, devices=(timed,))), old) == []


def _node(**parts: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}, **parts}


def _job_template(restart: str = "Never") -> dict[str, Any]:
    return {"spec": {"restartPolicy": restart, "containers": [{"name": "c", "image": "i"}]}}


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (
            _node(status={"capacity": {"example.com/gpu": "1500m", "cpu": "1500m"}}),
            'Node n1: status.capacity[example.com/gpu]: Invalid value: "1500m": must be an integer',
        ),
        (
            _node(status={"allocatable": {"example.com/gpu": "-1"}}),
            'Node n1: status.allocatable[example.com/gpu]: Invalid value: "-1": '
            "must be greater than or equal to 0",
        ),
        (
            _node(spec={"taints": [{"key": "a", "effect": "Sometimes"}]}),
            'Node n1: spec.taints[0].effect: Unsupported value: "Sometimes": supported values: "NoExecute", '
            '"NoSchedule", "PreferNoSchedule"',
        ),
        (
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "Team_A"}},
            'Namespace Team_A: metadata.name: Invalid value: "Team_A": a lowercase RFC 1123 label must',
        ),
        (
            {
                "apiVersion": "v1",
                "kind": "ResourceQuota",
                "metadata": {"name": "q", "namespace": "default"},
                "spec": {"hard": {"count/resourceclaims.resource.k8s.io": "-1"}},
            },
            'ResourceQuota default/q: spec.hard[count/resourceclaims.resource.k8s.io]: Invalid value: "-1": '
            "must be greater than or equal to 0",
        ),
        (
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {"name": "j", "namespace": "default"},
                "spec": {"completions": -1, "template": _job_template()},
            },
            "Job default/j: spec.completions: Invalid value: -1: must be greater than or equal to 0",
        ),
        (
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {"name": "j", "namespace": "default"},
                "spec": {"template": _job_template("Always")},
            },
            'Job default/j: spec.template.spec.restartPolicy: Unsupported value: "Always": supported values: '
            '"Never", "OnFailure"',
        ),
        (
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceTaintRule",
                "metadata": {"name": "t"},
                "spec": {"taint": {"key": "k", "effect": "Maybe"}},
            },
            'DeviceTaintRule t: spec.taint.effect: Unsupported value: "Maybe": '
            'supported values: "NoExecute", "NoSchedule", "None"',
        ),
    ],
    ids=[
        "node-fractional-device",
        "node-negative",
        "node-taint",
        "namespace",
        "quota",
        "job",
        "job-restart",
        "dtr",
    ],
)
def test_every_kind_names_object_field_and_rule(raw: dict[str, Any], expected: str) -> None:
    (error,) = _errors(raw)
    assert error.startswith(expected)
