"""Admission for classic DRA (KEP-3063, ``cdi.k8s.io/v1alpha1``): defaulting and validation.

Also the ACME example driver's ``NodeGpuCapacity`` (``gpu.acme.com/v1alpha1``).

The KEP gives the shapes but few rules; where it is silent the rules are those of Kubernetes
1.27-1.31 (``resource.k8s.io/v1alpha2``): names are DNS subdomains, the driver name follows the
CSI driver name rules, the claim spec is immutable, at most 128 potential/unsuitable nodes, at
most 32 users in ``reservedFor``, parameters are JSON objects of at most 10 KiB. Errors name
the object by its wire kind (``ResourceClaim default/gpu: spec.resourceClassName: Required
value``), like the rest of the admission package.

Entry points: :func:`apply_classic_defaults`, :func:`validate_classic` (spec and status, create
or update), :func:`validate_kep_pod` (the KEP part of a Pod), :func:`admit_classic`.
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

from draflow.events.api import acme_gpu_v1alpha1 as acme
from draflow.events.api import classic_v1alpha1 as cv
from draflow.events.api import core_v1 as c1
from draflow.events.api import numeric_v1alpha2 as nv
from draflow.events.api.base import ApiStruct
from draflow.events.api.classic_pod import pod_claims
from draflow.events.api.codec import object_meta
from draflow.events.api.errors import ApiError, FieldError
from draflow.events.quantity import Quantity
from draflow.services.dra.classic.podclaims import generated_claim_name
from draflow.services.dra.numeric import validation as numeric
from draflow.services.dra.validation import common, names
from draflow.services.dra.validation.errs import Errs
from draflow.services.dra.validation.meta import (
    validate_meta_update,
    validate_object_meta,
    validate_template_meta,
)

__all__ = [
    "MAX_NODES",
    "MAX_RESERVED_FOR",
    "PARAMETERS_MAX",
    "admit_classic",
    "apply_classic_defaults",
    "claim_spec_defaults",
    "validate_classic",
    "validate_kep_pod",
]

S = TypeVar("S", bound=ApiStruct)

# Phase changes the KEP describes: the driver allocates (Pending -> Allocated) and frees
# (Allocated/Reallocate -> Pending), the scheduler asks for reallocation (Allocated -> Reallocate).
# draflow adds one: a driver that cannot free a claim cancels the request (Reallocate ->
# Allocated, the reallocation saga's compensation), so the claim is not stuck in Reallocate.
_TRANSITIONS = frozenset(
    {
        (cv.PENDING, cv.PENDING),
        (cv.PENDING, cv.ALLOCATED),
        (cv.ALLOCATED, cv.ALLOCATED),
        (cv.ALLOCATED, cv.REALLOCATE),
        (cv.ALLOCATED, cv.PENDING),
        (cv.REALLOCATE, cv.REALLOCATE),
        (cv.REALLOCATE, cv.PENDING),
        (cv.REALLOCATE, cv.ALLOCATED),
    }
)
MAX_NODES = 128  # v1alpha2 PodSchedulingNodeListMaxSize (potential and unsuitable nodes)
MAX_RESERVED_FOR = 32  # v1alpha2 ResourceClaimReservedForMaxSize
PARAMETERS_MAX = 10 * 1024


def claim_spec_defaults(spec: cv.ResourceClaimSpec) -> cv.ResourceClaimSpec:
    """KEP: waiting for a Pod (Delayed) is the default allocation mode."""
    if spec.allocation_mode:
        return spec
    return msgspec.structs.replace(spec, allocation_mode=cv.DELAYED)


def apply_classic_defaults(obj: S, namespace: str = "default") -> S:
    """Namespace, allocationMode Delayed, status phase Pending and userLimit 1 (when unset)."""
    if isinstance(obj, cv.ResourceClaim):
        meta = obj.metadata
        if not meta.namespace:
            meta = msgspec.structs.replace(meta, namespace=namespace)
        status = obj.status
        if not status.phase or status.user_limit is None:
            status = msgspec.structs.replace(
                status,
                phase=status.phase or cv.PENDING,
                user_limit=1 if status.user_limit is None else status.user_limit,
            )
        return msgspec.structs.replace(obj, metadata=meta, spec=claim_spec_defaults(obj.spec), status=status)
    cluster_scoped = cv.ResourceClass | acme.NodeGpuCapacity | nv.NodeResourceCapacity
    if isinstance(obj, cluster_scoped) and obj.metadata.namespace:
        obj = msgspec.structs.replace(obj, metadata=msgspec.structs.replace(obj.metadata, namespace=""))
    if isinstance(obj, acme.NodeGpuCapacity) and not obj.spec.node_name:
        obj = msgspec.structs.replace(
            obj, spec=msgspec.structs.replace(obj.spec, node_name=obj.metadata.name)
        )
    return obj


def _parameters(errs: Errs, value: Any, path: str) -> None:
    """Opaque parameters: optional; when set a JSON object of at most 10 KiB."""
    if value is not None:
        common.raw_extension(errs, value, path, PARAMETERS_MAX)


def _node_name(errs: Errs, value: str, path: str) -> None:
    errs.messages(path, value, names.dns1123_subdomain(value))


def _node_list(errs: Errs, nodes: tuple[str, ...], path: str) -> None:
    if len(nodes) > MAX_NODES:
        errs.too_many(path, len(nodes), MAX_NODES)
        return
    seen: set[str] = set()
    for i, node in enumerate(nodes):
        _node_name(errs, node, f"{path}[{i}]")
        if node in seen:
            errs.duplicate(f"{path}[{i}]", node)
        seen.add(node)


def _claim_spec(errs: Errs, spec: cv.ResourceClaimSpec, path: str) -> None:
    if not spec.resource_class_name:
        errs.required(f"{path}.resourceClassName")
    else:
        name = spec.resource_class_name
        errs.messages(f"{path}.resourceClassName", name, names.dns1123_subdomain(name))
    _parameters(errs, spec.parameters, f"{path}.parameters")
    numeric.parameters_ref(errs, spec, path)
    if not spec.allocation_mode:
        errs.required(f"{path}.allocationMode")
    elif spec.allocation_mode not in cv.ALLOCATION_MODES:
        errs.not_supported(f"{path}.allocationMode", spec.allocation_mode, cv.ALLOCATION_MODES)


def _status(errs: Errs, status: cv.ResourceClaimStatus) -> None:
    path = "status"
    if status.phase and status.phase not in cv.PHASES:
        errs.not_supported(f"{path}.phase", status.phase, cv.PHASES)
    if status.driver_name:
        common.driver_name(errs, status.driver_name, f"{path}.driverName")
    elif status.phase in (cv.ALLOCATED, cv.REALLOCATE):
        errs.required(f"{path}.driverName", "the driver that allocated the claim must be recorded")
    limit = status.user_limit
    if limit is not None and limit != cv.UNLIMITED and limit < 1:
        errs.invalid(f"{path}.userLimit", limit, "must be -1 (unlimited) or greater than or equal to 1")
    if status.scheduling is not None:
        sched = status.scheduling
        if sched.scheduler.selected_node:
            _node_name(errs, sched.scheduler.selected_node, f"{path}.scheduling.scheduler.selectedNode")
        _node_list(errs, sched.scheduler.potential_nodes, f"{path}.scheduling.scheduler.potentialNodes")
        _node_list(errs, sched.driver.unsuitable_nodes, f"{path}.scheduling.driver.unsuitableNodes")
        answered = sched.driver.answered_potential_nodes
        _node_list(errs, answered, f"{path}.scheduling.driver.answeredPotentialNodes")
        if sched.driver.available_on_nodes is not None:
            common.node_selector(
                errs, sched.driver.available_on_nodes, f"{path}.scheduling.driver.availableOnNodes"
            )
    if status.attributes and status.phase != cv.ALLOCATED and status.phase != cv.REALLOCATE:
        errs.forbidden(f"{path}.attributes", "may only be set while the claim is allocated")
    numeric.numeric_status(errs, status)
    common.conditions(errs, status.conditions, f"{path}.conditions")
    reserved = status.reserved_for
    if reserved and status.phase != cv.ALLOCATED:
        errs.forbidden(f"{path}.reservedFor", "users may only be added while the claim is Allocated")
    if len(reserved) > MAX_RESERVED_FOR:
        errs.too_many(f"{path}.reservedFor", len(reserved), MAX_RESERVED_FOR)
    elif limit is not None and limit != cv.UNLIMITED and len(reserved) > max(limit, 0):
        errs.invalid(
            f"{path}.reservedFor", len(reserved), f"must not have more users than userLimit ({limit})"
        )
    seen: set[str] = set()
    for i, ref in enumerate(reserved):
        at = f"{path}.reservedFor[{i}]"
        if not ref.kind:
            errs.required(f"{at}.kind")
        if not ref.name:
            errs.required(f"{at}.name")
        if not ref.uid:
            errs.required(f"{at}.uid")
        elif ref.uid in seen:
            errs.duplicate(f"{at}.uid", ref.uid)
        seen.add(ref.uid)


def _validate_class(errs: Errs, obj: cv.ResourceClass, old: cv.ResourceClass | None) -> None:
    validate_object_meta(errs, obj.metadata, namespaced=False, name_check=names.dns1123_subdomain)
    common.driver_name(errs, obj.driver_name, "driverName")
    _parameters(errs, obj.parameters, "parameters")
    numeric.numeric_parameters(errs, obj.numeric_parameters, "numericParameters")
    if old is not None:
        validate_meta_update(errs, obj.metadata, old.metadata)


def _validate_claim(errs: Errs, obj: cv.ResourceClaim, old: cv.ResourceClaim | None) -> None:
    validate_object_meta(errs, obj.metadata, namespaced=True, name_check=names.dns1123_subdomain)
    _claim_spec(errs, obj.spec, "spec")
    _status(errs, obj.status)
    if old is not None:
        validate_meta_update(errs, obj.metadata, old.metadata)
        if obj.spec != old.spec:
            errs.invalid_detail("spec", "field is immutable (the claim spec can only be set on creation)")
        before, after = old.status.phase or cv.PENDING, obj.status.phase or cv.PENDING
        if after in cv.PHASES and (before, after) not in _TRANSITIONS:
            errs.invalid("status.phase", after, f"cannot change from {before} to {after}")


def validate_classic(obj: ApiStruct, old: ApiStruct | None = None) -> list[FieldError]:
    """Every problem of a classic object (create when ``old`` is None); run on defaulted objects."""
    meta = object_meta(obj)
    kind = getattr(obj, "WIRE_KIND", obj.KIND)
    errs = Errs(kind, meta.namespace, meta.name or meta.generate_name)
    if old is not None and type(old) is not type(obj):
        errs.invalid("kind", kind, f"cannot update a {getattr(old, 'WIRE_KIND', old.KIND)} with a {kind}")
        return errs.items
    if isinstance(obj, cv.ResourceClass):
        _validate_class(errs, obj, old if isinstance(old, cv.ResourceClass) else None)
    elif isinstance(obj, cv.ResourceClaim):
        _validate_claim(errs, obj, old if isinstance(old, cv.ResourceClaim) else None)
    elif isinstance(obj, c1.Pod):
        return validate_kep_pod(obj)
    elif isinstance(obj, acme.NodeGpuCapacity):
        _validate_capacity(errs, obj, old if isinstance(old, acme.NodeGpuCapacity) else None)
    elif isinstance(obj, nv.NodeResourceCapacity):
        numeric.validate_capacity(errs, obj, old if isinstance(old, nv.NodeResourceCapacity) else None)
    else:
        errs.invalid_detail("", f"kind {kind} is not a classic DRA kind")
    return errs.items


MAX_GPUS = 64


def _validate_capacity(errs: Errs, obj: acme.NodeGpuCapacity, old: acme.NodeGpuCapacity | None) -> None:
    """The ACME driver's per-node object: named after its node, unique GPU names, memory > 0."""
    validate_object_meta(errs, obj.metadata, namespaced=False, name_check=names.dns1123_subdomain)
    if obj.spec.node_name != obj.metadata.name:
        errs.invalid("spec.nodeName", obj.spec.node_name, "must be the object's name (one object per node)")
    if len(obj.spec.gpus) > MAX_GPUS:
        errs.too_many("spec.gpus", len(obj.spec.gpus), MAX_GPUS)
    seen: set[str] = set()
    for i, gpu in enumerate(obj.spec.gpus):
        at = f"spec.gpus[{i}]"
        if not gpu.name:
            errs.required(f"{at}.name")
        else:
            errs.messages(f"{at}.name", gpu.name, names.dns1123_label(gpu.name))
            if gpu.name in seen:
                errs.duplicate(f"{at}.name", gpu.name)
            seen.add(gpu.name)
        if Quantity.parse(gpu.memory).sign <= 0:
            errs.invalid(f"{at}.memory", gpu.memory, "must be greater than zero")
    if old is not None:
        validate_meta_update(errs, obj.metadata, old.metadata)


def _template(errs: Errs, template: cv.ClaimTemplate, path: str) -> None:
    if template.metadata is not None:
        validate_template_meta(errs, template.metadata, f"{path}.metadata")
    if template.spec is not None and template.has_flat_fields():
        errs.invalid_detail(
            path,
            "set either spec or the flattened fields "
            "(resourceClassName, parameters, parametersRef, allocationMode)",
        )
        return
    spec = claim_spec_defaults(cv.template_spec(template))
    _claim_spec(errs, spec, f"{path}.spec" if template.spec is not None else path)


def validate_kep_pod(pod: c1.Pod) -> list[FieldError]:
    """The KEP part of a Pod (its ``cdi.k8s.io/pod-resources`` annotation), in KEP field paths."""
    errs = Errs("Pod", pod.metadata.namespace, pod.metadata.name or pod.metadata.generate_name)
    try:
        claims = pod_claims(pod)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        errs.invalid_detail("metadata.annotations[cdi.k8s.io/pod-resources]", f"not a KEP claim list: {exc}")
        return errs.items
    if claims is None:
        return []
    entries: dict[str, cv.PodResourceClaim] = {}
    for i, entry in enumerate(claims.resource_claims):
        at = f"spec.resourceClaims[{i}]"
        if not entry.name:
            errs.required(f"{at}.name")
        else:
            errs.messages(f"{at}.name", entry.name, names.dns1123_label(entry.name))
            if entry.name in entries:
                errs.duplicate(f"{at}.name", entry.name)
            entries[entry.name] = entry
        has_name, has_template = entry.resource_claim_name is not None, entry.template is not None
        if has_name == has_template:
            errs.invalid_detail(at, "must specify exactly one of resourceClaimName or template")
        if entry.resource_claim_name is not None:
            errs.messages(
                f"{at}.resourceClaimName",
                entry.resource_claim_name,
                names.dns1123_subdomain(entry.resource_claim_name),
            )
        if entry.template is not None:
            _template(errs, entry.template, f"{at}.template")
            if not pod.metadata.name:
                errs.required("metadata.name", "a Pod with inline claim templates needs a fixed name")
            elif entry.name:
                generated = generated_claim_name(pod.metadata.name, entry.name)
                for msg in names.dns1123_subdomain(generated):
                    errs.invalid(at, generated, f"generated claim name <pod name>-<name> is invalid: {msg}")
    for field, attr, containers in (
        ("containers", "containers", pod.spec.containers),
        ("initContainers", "init_containers", pod.spec.init_containers),
    ):
        by_name = {c.name: i for i, c in enumerate(containers)}
        used: dict[str, tuple[str, ...]] = getattr(claims, attr)
        for cname, claim_names in used.items():
            if cname not in by_name:
                errs.not_found(f"spec.{field}", cname, "no such container")
                continue
            seen: set[str] = set()
            for j, claim_name in enumerate(claim_names):
                at = f"spec.{field}[{by_name[cname]}].resources.claims[{j}]"
                if claim_name not in entries:
                    errs.not_supported(at, claim_name, sorted(entries))
                elif claim_name in seen:
                    errs.duplicate(at, claim_name)
                seen.add(claim_name)
    return errs.items


def admit_classic(obj: S, old: S | None = None, namespace: str = "default") -> S:
    """Create (``old`` None) or spec update of a classic object: keep/drop status, default,
    validate; raises ``ApiError`` with every problem. Status writes call ``validate_classic``."""
    if isinstance(obj, cv.ResourceClaim):
        status = old.status if isinstance(old, cv.ResourceClaim) else cv.ResourceClaimStatus()
        obj = msgspec.structs.replace(obj, status=status)
    defaulted = apply_classic_defaults(obj, namespace)
    errors = validate_classic(defaulted, old)
    if errors:
        raise ApiError(errors)
    return defaulted
