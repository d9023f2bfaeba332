"""The registry of served kinds: names as kubectl spells them, versions, scope."""

from __future__ import annotations

from draflow.events.api import resource_v1 as r1
from draflow.events.api.registry import lookup_resource, lookup_wire, resource_types


def test_names_plural_singular_short_and_group_qualified() -> None:
    for name in ("ResourceClaim", "resourceclaims", "resourceclaim", "resourceclaims.resource.k8s.io"):
        info = lookup_resource(name)
        assert info is not None and info.struct is r1.ResourceClaim and info.namespaced
    assert lookup_resource("po").kind == "Pod"  # type: ignore[union-attr]
    assert lookup_resource("deploy").kind == "Deployment"  # type: ignore[union-attr]
    assert lookup_resource("quota").kind == "ResourceQuota"  # type: ignore[union-attr]
    assert lookup_resource("no").namespaced is False  # type: ignore[union-attr]
    assert lookup_resource("rc") is None  # DRA kinds have no short names upstream


def test_served_versions() -> None:
    assert lookup_wire("resource.k8s.io/v1beta2", "ResourceSlice").struct is r1.ResourceSlice  # type: ignore[union-attr]
    assert lookup_wire("resource.k8s.io/v1beta1", "ResourceClaim").to_storage is not None  # type: ignore[union-attr]
    assert lookup_wire("resource.k8s.io/v1beta1", "DeviceTaintRule") is None  # not in v1beta1 upstream
    assert lookup_wire("resource.k8s.io/v1alpha3", "ResourcePoolStatusRequest") is None
    assert {t.kind for t in resource_types() if not t.crd} == {
        "DeviceClass",
        "ResourceSlice",
        "ResourceClaim",
        "ResourceClaimTemplate",
        "DeviceTaintRule",
        "Namespace",
        "Node",
        "Pod",
        "ResourceQuota",
        "Deployment",
        "Job",
        "Lease",
        "CustomResourceDefinition",
        # classic DRA (KEP-3063, cdi.k8s.io/v1alpha1) and its example driver's capacity object
        "ResourceClass",
        "ClassicResourceClaim",
        "NodeGpuCapacity",
        "NodeResourceCapacity",
    }
