"""Admission rules for KEP-4381's fields: a class's ``numericParameters``, a claim's
``parametersRef`` and ``status.numericAllocation``, and ``NodeResourceCapacity``.

The KEP gives the shapes; the limits follow its neighbours in ``resource.k8s.io/v1alpha2``:
names are DNS subdomains, driver names CSI driver names, opaque data a JSON object of at most
10 KiB, at most 128 instances per object (a driver with more publishes several objects).
Templates are only checked for shape here: whether one expands for a given parameter object is
found out when a claim is scheduled, and reported on the claim and the pod (KEP: "Allocation").
"""

from __future__ import annotations

from draflow.events.api import classic_v1alpha1 as cv
from draflow.events.api import numeric_v1alpha2 as nv
from draflow.services.dra.validation import common, names
from draflow.services.dra.validation.errs import Errs
from draflow.services.dra.validation.meta import validate_meta_update, validate_object_meta

__all__ = [
    "DATA_MAX",
    "MAX_INSTANCES",
    "MAX_PARAMETER_TYPES",
    "TEMPLATE_MAX",
    "numeric_parameters",
    "numeric_status",
    "parameters_ref",
    "validate_capacity",
]

MAX_PARAMETER_TYPES = 16
TEMPLATE_MAX = 10 * 1024
DATA_MAX = 10 * 1024
MAX_INSTANCES = 128
_ID_MAX = 63


def _api_version(errs: Errs, value: str, path: str) -> None:
    group, _, version = value.rpartition("/")
    if not version:
        errs.invalid(path, value, "must be <group>/<version> or <version>")
        return
    if group:
        errs.messages(path, value, names.dns1123_subdomain(group))
    errs.messages(path, value, names.dns1123_label(version))


def _placeholders_balanced(template: str) -> bool:
    depth = 0
    i = 0
    while i < len(template):
        pair = template[i : i + 2]
        if pair == "{{":
            if depth:
                return False
            depth, i = 1, i + 2
        elif pair == "}}" and depth:
            depth, i = 0, i + 2
        else:
            i += 1
    return depth == 0


def numeric_parameters(errs: Errs, items: tuple[cv.NumericParameterType, ...], path: str) -> None:
    if len(items) > MAX_PARAMETER_TYPES:
        errs.too_many(path, len(items), MAX_PARAMETER_TYPES)
        return
    seen: set[tuple[str, str]] = set()
    for i, item in enumerate(items):
        at = f"{path}[{i}]"
        if item.api_version:
            _api_version(errs, item.api_version, f"{at}.apiVersion")
        if not item.kind:
            errs.required(f"{at}.kind")
        key = (item.api_version, item.kind)
        if item.kind and key in seen:
            errs.duplicate(at, f"{item.api_version}/{item.kind}" if item.api_version else item.kind)
        seen.add(key)
        if not item.cel_template.strip():
            errs.required(f"{at}.celTemplate")
        elif len(item.cel_template.encode()) > TEMPLATE_MAX:
            errs.too_long(f"{at}.celTemplate", TEMPLATE_MAX)
        elif not _placeholders_balanced(item.cel_template):
            errs.invalid_detail(f"{at}.celTemplate", "unbalanced {{ }} placeholder")


def parameters_ref(errs: Errs, spec: cv.ResourceClaimSpec, path: str) -> None:
    ref = spec.parameters_ref
    if ref is None:
        return
    at = f"{path}.parametersRef"
    if spec.parameters is not None:
        errs.forbidden(at, "may not be set together with parameters")
    if ref.api_group:
        errs.messages(f"{at}.apiGroup", ref.api_group, names.dns1123_subdomain(ref.api_group))
    if not ref.kind:
        errs.required(f"{at}.kind")
    if not ref.name:
        errs.required(f"{at}.name")
    else:
        errs.messages(f"{at}.name", ref.name, names.dns1123_subdomain(ref.name))


def numeric_status(errs: Errs, status: cv.ResourceClaimStatus) -> None:
    alloc = status.numeric_allocation
    if alloc is None:
        return
    path = "status.numericAllocation"
    if status.phase not in (cv.ALLOCATED, cv.REALLOCATE):
        errs.forbidden(path, "may only be set while the claim is allocated")
    if not alloc.node_name:
        errs.required(f"{path}.nodeName")
    else:
        errs.messages(f"{path}.nodeName", alloc.node_name, names.dns1123_subdomain(alloc.node_name))
    if not alloc.api_version:
        errs.required(f"{path}.apiVersion")
    if not alloc.kind:
        errs.required(f"{path}.kind")


def validate_capacity(errs: Errs, obj: nv.NodeResourceCapacity, old: nv.NodeResourceCapacity | None) -> None:
    validate_object_meta(errs, obj.metadata, namespaced=False, name_check=names.dns1123_subdomain)
    if not obj.node_name:
        errs.required("nodeName")
    else:
        errs.messages("nodeName", obj.node_name, names.dns1123_subdomain(obj.node_name))
    common.driver_name(errs, obj.driver_name, "driverName")
    if len(obj.instances) > MAX_INSTANCES:
        errs.too_many("instances", len(obj.instances), MAX_INSTANCES)
    else:
        seen: set[str] = set()
        for i, inst in enumerate(obj.instances):
            at = f"instances[{i}]"
            if not inst.id:
                errs.required(f"{at}.id")
            elif len(inst.id) > _ID_MAX:
                errs.too_long(f"{at}.id", _ID_MAX, "characters")
            elif inst.id in seen:
                errs.duplicate(f"{at}.id", inst.id)
            seen.add(inst.id)
            if not inst.api_version:
                errs.required(f"{at}.apiVersion")
            else:
                _api_version(errs, inst.api_version, f"{at}.apiVersion")
            if not inst.kind:
                errs.required(f"{at}.kind")
            common.raw_extension(errs, inst.data, f"{at}.data", DATA_MAX)
    if old is not None:
        validate_meta_update(errs, obj.metadata, old.metadata)
        if obj.node_name != old.node_name:
            errs.invalid("nodeName", obj.node_name, "field is immutable")
        if obj.driver_name != old.driver_name:
            errs.invalid("driverName", obj.driver_name, "field is immutable")
