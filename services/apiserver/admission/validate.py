"""``validate(obj, old)``: dispatch to the per-kind validators and collect their FieldErrors."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from draflow.events.api import apiextensions_v1 as ax1
from draflow.events.api import coordination_v1 as co1
from draflow.events.api import core_v1 as c1
from draflow.events.api import resource_v1 as r1
from draflow.events.api import workloads_v1 as w1
from draflow.events.api.base import ApiStruct
from draflow.events.api.codec import object_meta
from draflow.events.api.errors import INVALID, ApiError, FieldError
from draflow.events.api.registry import lookup_resource
from draflow.services.apiserver.admission import coordination, core, resource, resource_slice
from draflow.services.apiserver.admission.defaults import (
    apply_defaults,
    prepare_for_create,
    prepare_for_update,
)
from draflow.services.apiserver.crd.definition import validate_crd
from draflow.services.apiserver.crd.objects import validate_custom_meta
from draflow.services.dra.validation.errs import Errs

__all__ = ["admit", "check_admin_access", "validate"]

S = TypeVar("S", bound=ApiStruct)

_VALIDATORS: dict[type, Callable[[Errs, Any, Any], None]] = {
    r1.DeviceClass: resource.validate_device_class,
    r1.ResourceClaim: resource.validate_resource_claim,
    r1.ResourceClaimTemplate: resource.validate_resource_claim_template,
    r1.DeviceTaintRule: resource.validate_device_taint_rule,
    r1.ResourceSlice: resource_slice.validate_resource_slice,
    c1.Pod: core.validate_pod,
    c1.Node: core.validate_node,
    c1.Namespace: core.validate_namespace,
    c1.ResourceQuota: core.validate_resource_quota,
    w1.Deployment: core.validate_deployment,
    w1.Job: core.validate_job,
    co1.Lease: coordination.validate_lease,
    ax1.CustomResourceDefinition: validate_crd,
    ax1.CustomObject: lambda errs, obj, old: _validate_custom(errs, obj, old),
}


def _validate_custom(errs: Errs, obj: ax1.CustomObject, old: ax1.CustomObject | None) -> None:
    """Metadata only: the CRD's schema was applied on the way in (``crd.objects.admit_custom``)."""
    rt = lookup_resource(obj.kind)
    validate_custom_meta(errs, obj, old, rt.namespaced if rt is not None else True)


def validate(obj: ApiStruct, old: ApiStruct | None = None) -> list[FieldError]:
    """All validation errors of ``obj`` (a create when ``old`` is None, else an update of ``old``).

    Run it on the defaulted object (``apply_defaults``), as the API server does.
    """
    meta = object_meta(obj)
    errs = Errs(obj.KIND, meta.namespace, meta.name or meta.generate_name)
    if old is not None and type(old) is not type(obj):
        errs.add("kind", INVALID, f"{INVALID}: cannot update a {old.KIND} with a {obj.KIND}")
        return errs.items
    check = _VALIDATORS.get(type(obj))
    if check is None:
        errs.add("", INVALID, f"{INVALID}: kind {obj.KIND} is not served")
        return errs.items
    check(errs, obj, old)
    return errs.items


def check_admin_access(obj: ApiStruct, namespace_labels: dict[str, str]) -> list[FieldError]:
    """The admin-access namespace rule for claims and templates (needs the namespace's labels)."""
    if not isinstance(obj, r1.ResourceClaim | r1.ResourceClaimTemplate):
        return []
    meta = object_meta(obj)
    errs = Errs(obj.KIND, meta.namespace, meta.name or meta.generate_name)
    resource.check_admin_access(errs, obj, namespace_labels)
    return errs.items


def admit(obj: S, old: S | None = None, namespace: str = "default") -> S:
    """A create (``old`` None) or main-resource update as the API server handles it: drop or keep
    status, default, validate. Returns the stored form or raises ``ApiError`` listing every problem.
    Status writes by controllers skip this and call ``validate(new, old)`` directly."""
    obj = prepare_for_create(obj) if old is None else prepare_for_update(obj, old)
    defaulted = apply_defaults(obj, namespace)
    errors = validate(defaulted, old)
    if errors:
        raise ApiError(errors)
    return defaulted
