"""Validation of DeviceClass, ResourceClaim, ResourceClaimTemplate and DeviceTaintRule.

Paraphrases ``pkg/apis/resource/validation/validation.go``: a claim's spec is validated on create
and only checked for immutability on update; status (allocation, reservedFor, devices) is checked
as a status write onto the old status (empty on create).
"""

from __future__ import annotations

from collections.abc import Sequence

from draflow.events.api import resource_v1 as r1
from draflow.events.quantity import Quantity
from draflow.services.apiserver.admission.cel import CEL_MAX_LENGTH, cel_problem
from draflow.services.dra.resourceclaim import RESERVED_FOR_MAX_SIZE
from draflow.services.dra.validation import common as c
from draflow.services.dra.validation import names
from draflow.services.dra.validation.errs import Errs
from draflow.services.dra.validation.meta import (
    validate_meta_update,
    validate_object_meta,
    validate_template_meta,
)

ALLOCATION_MODES = ("All", "ExactCount")
CONFIG_SOURCES = ("FromClaim", "FromClass")
_REF_DETAIL = (
    "must be the name of a request in the claim or the name of a request and a subrequest separated by '/'"
)


def selectors(errs: Errs, items: Sequence[r1.DeviceSelector], path: str) -> None:
    """CEL device selectors: required, at most 10 KiB, compiled (results cached, see ``admission.cel``)."""

    def one(sel: r1.DeviceSelector, at: str) -> None:
        if sel.cel is None:
            errs.required(f"{at}.cel")
            return
        expr, at = sel.cel.expression, f"{at}.cel.expression"
        if len(expr) > CEL_MAX_LENGTH:
            errs.too_long(at, CEL_MAX_LENGTH)
            return
        problem = cel_problem(expr)
        if problem is not None:
            if problem.forbidden:
                errs.forbidden(at, problem.message)
            elif not expr.strip():
                errs.required(at, problem.message)
            elif problem.internal:
                errs.internal(at, problem.message)
            else:
                errs.invalid(at, expr, problem.message)

    c.check_list(errs, items, c.MAX_SELECTORS, path, one)


def _request_names(claim: r1.DeviceClaim) -> dict[str, set[str] | None]:
    out: dict[str, set[str] | None] = {}
    for req in claim.requests:
        out[req.name] = {s.name for s in req.first_available} if req.first_available else None
    return out


def _has_ref(names_: dict[str, set[str] | None], ref: str) -> bool:
    parts = ref.split("/")
    if len(parts) > 2 or parts[0] not in names_:
        return False
    subs = names_[parts[0]]
    return len(parts) == 1 or (subs is not None and parts[1] in subs)


def _request_ref(errs: Errs, ref: str, path: str, known: dict[str, set[str] | None]) -> None:
    detail = _REF_DETAIL
    parts = ref.split("/")
    if len(parts) > 2:
        errs.invalid(path, ref, detail)
        return
    for part in parts:
        errs.messages(path, part, names.dns1123_label(part))
    if not _has_ref(known, ref):
        errs.invalid(path, ref, detail)


def _request_refs(errs: Errs, refs: tuple[str, ...], path: str, known: dict[str, set[str] | None]) -> None:
    c.check_set(errs, refs, c.MAX_REQUESTS, path, lambda r, at: _request_ref(errs, r, at, known), lambda r: r)


def _allocation_mode(errs: Errs, mode: str, count: int, path: str) -> None:
    if mode == "All":
        if count != 0:
            errs.invalid(f"{path}.count", count, "must not be specified when allocationMode is 'All'")
    elif mode == "ExactCount":
        if count <= 0:
            errs.invalid(f"{path}.count", count, "must be greater than zero")
    else:
        errs.not_supported(f"{path}.allocationMode", mode, ALLOCATION_MODES)


def _device_class_name(errs: Errs, name: str, path: str) -> None:
    if not name:
        errs.required(path)
    else:
        errs.messages(path, name, names.dns1123_subdomain(name))


def _capacity_requests(errs: Errs, cap: r1.CapacityRequirements | None, path: str) -> None:
    if cap is None:
        return
    for key, value in cap.requests.items():
        c.qualified_name(errs, key, f"{path}.requests")
        if Quantity.parse(value).sign < 0:
            errs.invalid(f"{path}.requests[{key}]", value, "must be greater than or equal to 0")


def _exact(errs: Errs, req: r1.ExactDeviceRequest, path: str) -> None:
    _device_class_name(errs, req.device_class_name, f"{path}.deviceClassName")
    selectors(errs, req.selectors, f"{path}.selectors")
    _allocation_mode(errs, req.allocation_mode, req.count, path)
    c.tolerations(errs, req.tolerations, f"{path}.tolerations")
    _capacity_requests(errs, req.capacity, f"{path}.capacity")


def _sub_request(errs: Errs, sub: r1.DeviceSubRequest, path: str) -> None:
    errs.messages(f"{path}.name", sub.name, names.dns1123_label(sub.name))
    _device_class_name(errs, sub.device_class_name, f"{path}.deviceClassName")
    selectors(errs, sub.selectors, f"{path}.selectors")
    _allocation_mode(errs, sub.allocation_mode, sub.count, path)
    c.tolerations(errs, sub.tolerations, f"{path}.tolerations")
    _capacity_requests(errs, sub.capacity, f"{path}.capacity")


def _request(errs: Errs, req: r1.DeviceRequest, path: str) -> None:
    errs.messages(f"{path}.name", req.name, names.dns1123_label(req.name))
    has_first, has_exact = bool(req.first_available), req.exactly is not None
    if not has_first and not has_exact:
        errs.required(path, "exactly one of `exactly` or `firstAvailable` is required")
    elif has_first and has_exact:
        errs.invalid(
            path,
            None,
            "exactly one of `exactly` or `firstAvailable` is required, but multiple fields are set",
        )
    elif req.exactly is not None:
        _exact(errs, req.exactly, f"{path}.exactly")
    else:
        c.check_set(
            errs,
            req.first_available,
            c.MAX_SUBREQUESTS,
            f"{path}.firstAvailable",
            lambda s, at: _sub_request(errs, s, at),
            lambda s: s.name,
        )


def _constraint(errs: Errs, con: r1.DeviceConstraint, path: str, known: dict[str, set[str] | None]) -> None:
    _request_refs(errs, con.requests, f"{path}.requests", known)
    if con.match_attribute is not None:
        c.fully_qualified_name(errs, con.match_attribute, f"{path}.matchAttribute")
    elif con.distinct_attribute is not None:
        c.fully_qualified_name(errs, con.distinct_attribute, f"{path}.distinctAttribute")
    else:
        errs.required(path, 'exactly one of "matchAttribute" or "distinctAttribute" is required')
    if con.match_attribute is not None and con.distinct_attribute is not None:
        errs.invalid(
            path,
            None,
            'exactly one of "matchAttribute" or "distinctAttribute" is required, but multiple fields are set',
        )


def validate_claim_spec(errs: Errs, spec: r1.ResourceClaimSpec, path: str) -> None:
    claim = spec.devices
    at = f"{path}.devices"
    known = _request_names(claim)
    c.check_set(
        errs,
        claim.requests,
        c.MAX_REQUESTS,
        f"{at}.requests",
        lambda r, p: _request(errs, r, p),
        lambda r: r.name,
    )
    c.check_list(
        errs,
        claim.constraints,
        c.MAX_CONSTRAINTS,
        f"{at}.constraints",
        lambda k, p: _constraint(errs, k, p, known),
    )

    def config(cfg: r1.DeviceClaimConfiguration, p: str) -> None:
        _request_refs(errs, cfg.requests, f"{p}.requests", known)
        c.opaque_config(errs, cfg.opaque, p)

    c.check_list(errs, claim.config, c.MAX_CONFIG, f"{at}.config", config)


# -- status --------------------------------------------------------------------------------------


def _result(
    errs: Errs, res: r1.DeviceRequestAllocationResult, path: str, known: dict[str, set[str] | None]
) -> None:
    _request_ref(errs, res.request, f"{path}.request", known)
    c.driver_name(errs, res.driver, f"{path}.driver")
    c.pool_name(errs, res.pool, f"{path}.pool")
    errs.messages(f"{path}.device", res.device, names.dns1123_label(res.device))
    c.binding_conditions(errs, res.binding_conditions, res.binding_failure_conditions, path)
    c.tolerations(errs, res.tolerations, f"{path}.tolerations")
    if res.share_id is not None:
        errs.messages(f"{path}.shareID", res.share_id, names.uuid_messages(res.share_id))
    c.skip_node_operations(errs, res.skip_node_operations, f"{path}.skipNodeOperations")


def _allocation(errs: Errs, alloc: r1.AllocationResult, path: str, known: dict[str, set[str] | None]) -> None:
    at = f"{path}.devices"
    c.check_list(
        errs, alloc.devices.results, c.MAX_RESULTS, f"{at}.results", lambda r, p: _result(errs, r, p, known)
    )

    def config(cfg: r1.DeviceAllocationConfiguration, p: str) -> None:
        if not cfg.source:
            errs.required(f"{p}.source")
        elif cfg.source not in CONFIG_SOURCES:
            errs.not_supported(f"{p}.source", cfg.source, CONFIG_SOURCES)
        _request_refs(errs, cfg.requests, f"{p}.requests", known)
        c.opaque_config(errs, cfg.opaque, p)

    c.check_list(errs, alloc.devices.config, 2 * c.MAX_CONFIG, f"{at}.config", config)
    if alloc.node_selector is not None:
        c.node_selector(errs, alloc.node_selector, f"{path}.nodeSelector")


def _device_status(
    errs: Errs, dev: r1.AllocatedDeviceStatus, path: str, allocated: set[tuple[str, ...]]
) -> None:
    c.driver_name(errs, dev.driver, f"{path}.driver")
    c.pool_name(errs, dev.pool, f"{path}.pool")
    errs.messages(f"{path}.device", dev.device, names.dns1123_label(dev.device))
    if dev.share_id is not None:
        errs.messages(f"{path}.shareID", dev.share_id, names.uuid_messages(dev.share_id))
    key = (dev.driver, dev.pool, dev.device, dev.share_id or "")
    if key not in allocated:
        shown = "/".join(key[:3]) + (f"/{key[3]}" if key[3] else "")
        errs.invalid(path, shown, "must be an allocated device in the claim")
    if len(dev.conditions) > c.MAX_DEVICE_CONDITIONS:
        errs.too_many(f"{path}.conditions", len(dev.conditions), c.MAX_DEVICE_CONDITIONS)
    c.conditions(errs, dev.conditions, f"{path}.conditions")
    if dev.data is not None:
        c.raw_extension(errs, dev.data, f"{path}.data", c.DEVICE_STATUS_DATA_MAX)
    net = dev.network_data
    if net is not None:
        if len(net.interface_name) > 256:
            errs.too_long(f"{path}.networkData.interfaceName", 256)
        if len(net.hardware_address) > 128:
            errs.too_long(f"{path}.networkData.hardwareAddress", 128)
        c.check_set(
            errs,
            net.ips,
            16,
            f"{path}.networkData.ips",
            lambda ip, p: c.interface_address(errs, ip, p),
            lambda ip: ip,
        )


def validate_claim_status(
    errs: Errs, claim: r1.ResourceClaim, old: r1.ResourceClaim | None, path: str = "status"
) -> None:
    status, old_status = claim.status, old.status if old is not None else r1.ResourceClaimStatus()
    known = _request_names(claim.spec.devices)

    def consumer(ref: r1.ResourceClaimConsumerReference, p: str) -> None:
        for field, value in (("resource", ref.resource), ("name", ref.name), ("uid", ref.uid)):
            if not value:
                errs.required(f"{p}.{field}")

    c.check_set(
        errs, status.reserved_for, RESERVED_FOR_MAX_SIZE, f"{path}.reservedFor", consumer, lambda r: r.uid
    )
    allocated: set[tuple[str, ...]] = set()
    if status.allocation is not None:
        allocated = {
            (r.driver, r.pool, r.device, r.share_id or "") for r in status.allocation.devices.results
        }
    c.check_set(
        errs,
        status.devices,
        -1,
        f"{path}.devices",
        lambda d, p: _device_status(errs, d, p, allocated),
        lambda d: (d.driver, d.pool, d.device, d.share_id or ""),
    )
    if status.reserved_for:
        if status.allocation is None:
            errs.forbidden(f"{path}.reservedFor", "may not be specified when `allocated` is not set")
        elif claim.metadata.deletion_timestamp is not None:
            new_entries = set(status.reserved_for) - set(old_status.reserved_for)
            if new_entries:
                errs.forbidden(
                    f"{path}.reservedFor",
                    "new entries may not be added while `deallocationRequested` or `deletionTimestamp` "
                    "are set",
                )
    if old_status.allocation is not None and status.allocation is not None:
        if status.allocation != old_status.allocation:
            errs.invalid(f"{path}.allocation", None, "field is immutable")
    elif status.allocation is not None:
        _allocation(errs, status.allocation, f"{path}.allocation", known)


# -- kinds ---------------------------------------------------------------------------------------


def validate_resource_claim(errs: Errs, obj: r1.ResourceClaim, old: r1.ResourceClaim | None) -> None:
    validate_object_meta(errs, obj.metadata, namespaced=True, name_check=names.dns1123_subdomain)
    if old is None:
        validate_claim_spec(errs, obj.spec, "spec")
    else:
        validate_meta_update(errs, obj.metadata, old.metadata)
        if obj.spec != old.spec:
            errs.invalid("spec", None, "field is immutable")
    validate_claim_status(errs, obj, old)


def validate_resource_claim_template(
    errs: Errs, obj: r1.ResourceClaimTemplate, old: r1.ResourceClaimTemplate | None
) -> None:
    validate_object_meta(errs, obj.metadata, namespaced=True, name_check=names.dns1123_subdomain)
    if old is None:
        validate_template_meta(errs, obj.spec.metadata, "spec.metadata")
        validate_claim_spec(errs, obj.spec.spec, "spec.spec")
    else:
        validate_meta_update(errs, obj.metadata, old.metadata)
        if obj.spec != old.spec:
            errs.invalid("spec", None, "field is immutable")


def validate_device_class(errs: Errs, obj: r1.DeviceClass, old: r1.DeviceClass | None) -> None:
    validate_object_meta(errs, obj.metadata, namespaced=False, name_check=names.dns1123_subdomain)
    if old is not None:
        validate_meta_update(errs, obj.metadata, old.metadata)
    spec = obj.spec
    # Unchanged selectors count as "stored": upstream does not recompile them on update.
    if old is None or spec.selectors != old.spec.selectors:
        selectors(errs, spec.selectors, "spec.selectors")
    c.check_list(
        errs, spec.config, c.MAX_CONFIG, "spec.config", lambda cfg, p: c.opaque_config(errs, cfg.opaque, p)
    )
    ern = spec.extended_resource_name
    if ern is not None and not names.is_extended_resource_name(ern):
        errs.invalid("spec.extendedResourceName", ern, "must be a valid extended resource name")


def validate_device_taint_rule(errs: Errs, obj: r1.DeviceTaintRule, old: r1.DeviceTaintRule | None) -> None:
    validate_object_meta(errs, obj.metadata, namespaced=False, name_check=names.dns1123_subdomain)
    if old is not None:
        validate_meta_update(errs, obj.metadata, old.metadata)
    sel = obj.spec.device_selector
    if sel is not None:
        if sel.driver is not None:
            c.driver_name(errs, sel.driver, "spec.deviceSelector.driver")
        if sel.pool is not None:
            c.pool_name(errs, sel.pool, "spec.deviceSelector.pool")
        if sel.device is not None:
            errs.messages("spec.deviceSelector.device", sel.device, names.dns1123_label(sel.device))
    c.taint(errs, obj.spec.taint, "spec.taint")
    if len(obj.status.conditions) > 8:
        errs.too_many("status.conditions", len(obj.status.conditions), 8)
    else:
        c.conditions(errs, obj.status.conditions, "status.conditions")


ADMIN_NAMESPACE_LABEL = "resource.kubernetes.io/admin-access"


def check_admin_access(
    errs: Errs, obj: r1.ResourceClaim | r1.ResourceClaimTemplate, ns_labels: dict[str, str]
) -> None:
    """``adminAccess: true`` needs the admin-access label on the claim's namespace (upstream's
    claim/template strategies check it on create; the namespace is looked up by the caller)."""
    if ns_labels.get(ADMIN_NAMESPACE_LABEL) == "true":
        return
    spec, path = (obj.spec, "spec") if isinstance(obj, r1.ResourceClaim) else (obj.spec.spec, "spec.spec")
    for i, req in enumerate(spec.devices.requests):
        if req.exactly is not None and req.exactly.admin_access:
            errs.forbidden(
                f"{path}.devices.requests[{i}].exactly.adminAccess",
                f"admin access to devices requires the `{ADMIN_NAMESPACE_LABEL}: true` label on the "
                "containing namespace",
            )
