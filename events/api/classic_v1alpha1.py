"""Classic DRA (KEP-3063) API, group ``cdi.k8s.io/v1alpha1``: ResourceClass and ResourceClaim.

The shapes are the KEP's, field for field: a ResourceClass carries ``driverName`` and opaque
``parameters`` at the top level (no ``spec``); a ResourceClaim has ``spec.resourceClassName``,
opaque ``spec.parameters`` and ``spec.allocationMode`` (Immediate / Delayed), and a status written
by the scheduler and the driver (``phase`` Pending / Allocated / Reallocate, ``driverName``,
``scheduling.scheduler.{selectedNode,potentialNodes}``,
``scheduling.driver.{unsuitableNodes,availableOnNodes}``, ``attributes``, ``userLimit``,
``reservedFor``), plus one draflow field: ``scheduling.driver.answeredPotentialNodes``, the
``potentialNodes`` the driver's ``unsuitableNodes`` answer (the KEP's claim status cannot tell "no
node unsuitable" from "not answered yet"; upstream later moved the negotiation to a
PodSchedulingContext, whose ``status.resourceClaims`` entry per claim is the answer).

Kind clash: ``ResourceClaim`` is also the structured kind (resource.k8s.io/v1). Everything inside
draflow that is keyed by kind (registry, event type names, subjects ``draflow.ev.<Kind>...``) uses
the internal kind token ``ClassicResourceClaim``; manifests say ``kind: ResourceClaim`` with
``apiVersion: cdi.k8s.io/v1alpha1`` and decode into :class:`ResourceClaim` here. ``WIRE_KIND``
holds the kind to show users (:func:`draflow.events.api.classic_pod.encode_classic` uses it).
"""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec

from draflow.events.api.base import ApiStruct, Int32
from draflow.events.api.meta import Condition, NodeSelector, ObjectMeta, OwnerReference

__all__ = [
    "ALLOCATED",
    "ALLOCATION_MODES",
    "API_VERSION",
    "CLAIM_KIND",
    "CLASS_KIND",
    "DELAYED",
    "GROUP",
    "IMMEDIATE",
    "PENDING",
    "PHASES",
    "REALLOCATE",
    "UNLIMITED",
    "WIRE_CLAIM_KIND",
    "ClaimTemplate",
    "DriverSchedulingStatus",
    "NumericAllocation",
    "NumericParameterType",
    "PodResourceClaim",
    "ResourceClaim",
    "ResourceClaimParametersReference",
    "ResourceClaimSpec",
    "ResourceClaimStatus",
    "ResourceClass",
    "SchedulerSchedulingStatus",
    "SchedulingStatus",
    "template_spec",
]

GROUP = "cdi.k8s.io"
API_VERSION = f"{GROUP}/v1alpha1"
CLASS_KIND = "ResourceClass"
CLAIM_KIND = "ClassicResourceClaim"  # internal kind token (registry, events, subjects)
WIRE_CLAIM_KIND = "ResourceClaim"  # what manifests and users see

IMMEDIATE = "Immediate"
DELAYED = "Delayed"
ALLOCATION_MODES = (IMMEDIATE, DELAYED)

PENDING = "Pending"
ALLOCATED = "Allocated"
REALLOCATE = "Reallocate"
PHASES = (PENDING, ALLOCATED, REALLOCATE)

UNLIMITED = -1  # userLimit value: any number of users


class NumericParameterType(ApiStruct, frozen=True):
    """KEP-4381: one claim parameter type a numeric class accepts, and the CEL template that maps
    an object of that type onto a numeric model's parameter type."""

    api_version: str = ""  # group/version of the vendor parameter object
    kind: str = ""
    cel_template: str = ""
    shareable: bool = False  # copied into the allocation (any number of pods may use the claim)


class ResourceClass(ApiStruct, frozen=True):
    """Cluster-scoped; created by the administrator next to the driver deployment.

    ``numericParameters`` (KEP-4381) set: claims of this class are allocated by the scheduler's
    builtin controllers from published node capacity, with no driver controller."""

    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = CLASS_KIND
    WIRE_KIND: ClassVar[str] = CLASS_KIND
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    driver_name: str = ""
    # runtime.RawExtension: any JSON value, kept as decoded; the driver interprets it.
    parameters: Any = None
    numeric_parameters: tuple[NumericParameterType, ...] = ()


class ResourceClaimParametersReference(ApiStruct, frozen=True):
    """The claim's parameter object, in the claim's namespace (a vendor CRD object)."""

    api_group: str = ""  # "" for the core group
    kind: str = ""
    name: str = ""


class ResourceClaimSpec(ApiStruct, frozen=True):
    """Immutable after creation. ``allocationMode`` defaults to Delayed."""

    resource_class_name: str = ""
    parameters: Any = None
    allocation_mode: str = ""
    parameters_ref: ResourceClaimParametersReference | None = None


class SchedulerSchedulingStatus(ApiStruct, frozen=True):
    selected_node: str = ""
    potential_nodes: tuple[str, ...] = ()


class DriverSchedulingStatus(ApiStruct, frozen=True):
    unsuitable_nodes: tuple[str, ...] = ()
    # None: the resource is available on every node.
    available_on_nodes: NodeSelector | None = None
    # The scheduler's potentialNodes that unsuitable_nodes answers; () = no answer yet.
    answered_potential_nodes: tuple[str, ...] = ()


class SchedulingStatus(ApiStruct, frozen=True):
    scheduler: SchedulerSchedulingStatus = msgspec.field(default_factory=SchedulerSchedulingStatus)
    driver: DriverSchedulingStatus = msgspec.field(default_factory=DriverSchedulingStatus)


class NumericAllocation(ApiStruct, frozen=True):
    """KEP-4381's allocation result of a numeric claim (written by the scheduler).

    It embeds everything the node plugin needs so the claim stays usable after its class and
    parameter object are deleted: the whole ``resourceClass`` and ``parameters`` object as they
    were, the model parameters the template expanded to, and the model's allocation type
    (``apiVersion``/``kind``/``data``: which instances and how much of each)."""

    node_name: str = ""
    driver_name: str = ""
    api_version: str = ""  # of the model's allocation type
    kind: str = ""
    data: Any = None
    model_parameters: Any = None
    resource_class: Any = None
    parameters: Any = None
    shareable: bool = False


class ResourceClaimStatus(ApiStruct, frozen=True):
    """Written by the scheduler and the driver only (the status subresource upstream).

    ``userLimit`` is ``None`` until defaulted to 1 by the API server; -1 means unlimited.
    ``numericAllocation`` and ``conditions`` belong to numeric claims (KEP-4381).
    """

    phase: str = ""
    driver_name: str = ""
    scheduling: SchedulingStatus | None = None
    attributes: dict[str, str] = {}
    user_limit: Int32 | None = None
    reserved_for: tuple[OwnerReference, ...] = ()
    numeric_allocation: NumericAllocation | None = None
    conditions: tuple[Condition, ...] = ()


class ResourceClaim(ApiStruct, frozen=True):
    """The classic claim (internal kind ``ClassicResourceClaim``, wire kind ``ResourceClaim``)."""

    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = CLAIM_KIND
    WIRE_KIND: ClassVar[str] = WIRE_CLAIM_KIND
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: ResourceClaimSpec = msgspec.field(default_factory=ResourceClaimSpec)
    status: ResourceClaimStatus = msgspec.field(default_factory=ResourceClaimStatus)


class ClaimTemplate(ApiStruct, frozen=True):
    """An inline template in a KEP-shaped Pod (``spec.resourceClaims[].template``).

    The KEP's Go type nests ``metadata`` + ``spec``; its partial-GPU story writes the spec fields
    directly under ``template``. Both spellings are accepted (not both at once: validation);
    :func:`template_spec` gives the spec either way.
    """

    metadata: ObjectMeta | None = None
    spec: ResourceClaimSpec | None = None
    resource_class_name: str = ""
    parameters: Any = None
    allocation_mode: str = ""
    parameters_ref: ResourceClaimParametersReference | None = None

    def has_flat_fields(self) -> bool:
        flat = self.parameters is not None or self.parameters_ref is not None
        return bool(self.resource_class_name or self.allocation_mode) or flat


def template_spec(template: ClaimTemplate) -> ResourceClaimSpec:
    """The claim spec a template stands for (nested ``spec`` wins when both are given)."""
    if template.spec is not None:
        return template.spec
    return ResourceClaimSpec(
        resource_class_name=template.resource_class_name,
        parameters=template.parameters,
        allocation_mode=template.allocation_mode,
        parameters_ref=template.parameters_ref,
    )


class PodResourceClaim(ApiStruct, frozen=True):
    """KEP PodSpec.ResourceClaims entry: exactly one of ``resourceClaimName`` or ``template``."""

    name: str = ""
    resource_claim_name: str | None = None
    template: ClaimTemplate | None = None
