"""apiextensions.k8s.io/v1: CustomResourceDefinition, and the one Struct every custom object is.

A CRD's ``openAPIV3Schema`` is kept as the JSON it was written in (a dict): it is data about other
objects, read by the apiserver's structural-schema code (``draflow.services.apiserver.crd``), and
re-encodes exactly as applied.

Custom objects have no Struct of their own: their shape is only known at run time. Every one is a
:class:`CustomObject` (``apiVersion``, ``kind``, ``metadata`` and the rest of the manifest as
``content``), stored under the CRD's kind like any served kind. ``custom_resource`` turns a CRD
into the registry rows that make its kind decodable and nameable
(``draflow.events.api.registry.register_custom``).
"""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec

from draflow.events.api.base import ApiStruct
from draflow.events.api.meta import ObjectMeta
from draflow.events.api.registry import ResourceType, WireType

__all__ = [
    "CRD_GROUP",
    "CustomObject",
    "CustomResourceColumnDefinition",
    "CustomResourceConversion",
    "CustomResourceDefinition",
    "CustomResourceDefinitionCondition",
    "CustomResourceDefinitionNames",
    "CustomResourceDefinitionSpec",
    "CustomResourceDefinitionStatus",
    "CustomResourceDefinitionVersion",
    "CustomResourceSubresourceScale",
    "CustomResourceSubresources",
    "CustomResourceValidation",
    "SelectableField",
    "custom_resource",
    "storage_version",
]

CRD_GROUP = "apiextensions.k8s.io"


class CustomResourceDefinitionNames(ApiStruct, frozen=True):
    plural: str = ""
    singular: str = ""
    short_names: tuple[str, ...] = ()
    kind: str = ""
    list_kind: str = ""
    categories: tuple[str, ...] = ()


class CustomResourceValidation(ApiStruct, frozen=True):
    open_apiv3_schema: dict[str, Any] | None = msgspec.field(default=None, name="openAPIV3Schema")


class CustomResourceColumnDefinition(ApiStruct, frozen=True):
    name: str = ""
    type: str = ""
    format: str = ""
    description: str = ""
    priority: int = 0
    json_path: str = ""


class CustomResourceSubresourceScale(ApiStruct, frozen=True):
    spec_replicas_path: str = ""
    status_replicas_path: str = ""
    label_selector_path: str | None = None


class CustomResourceSubresources(ApiStruct, frozen=True):
    status: dict[str, Any] | None = None
    scale: CustomResourceSubresourceScale | None = None


class SelectableField(ApiStruct, frozen=True):
    json_path: str = ""


class CustomResourceDefinitionVersion(ApiStruct, frozen=True):
    name: str = ""
    served: bool = False
    storage: bool = False
    deprecated: bool = False
    deprecation_warning: str | None = None
    schema: CustomResourceValidation | None = None
    subresources: CustomResourceSubresources | None = None
    additional_printer_columns: tuple[CustomResourceColumnDefinition, ...] = ()
    selectable_fields: tuple[SelectableField, ...] = ()


class CustomResourceConversion(ApiStruct, frozen=True):
    strategy: str = ""
    webhook: dict[str, Any] | None = None


class CustomResourceDefinitionSpec(ApiStruct, frozen=True):
    group: str = ""
    names: CustomResourceDefinitionNames = msgspec.field(default_factory=CustomResourceDefinitionNames)
    scope: str = ""
    versions: tuple[CustomResourceDefinitionVersion, ...] = ()
    conversion: CustomResourceConversion | None = None
    preserve_unknown_fields: bool = False


class CustomResourceDefinitionCondition(ApiStruct, frozen=True):
    type: str = ""
    status: str = ""
    last_transition_time: str | None = None
    reason: str = ""
    message: str = ""


class CustomResourceDefinitionStatus(ApiStruct, frozen=True):
    conditions: tuple[CustomResourceDefinitionCondition, ...] = ()
    accepted_names: CustomResourceDefinitionNames | None = None
    stored_versions: tuple[str, ...] = ()


class CustomResourceDefinition(ApiStruct, frozen=True):
    API_VERSION: ClassVar[str] = f"{CRD_GROUP}/v1"
    KIND: ClassVar[str] = "CustomResourceDefinition"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: CustomResourceDefinitionSpec = msgspec.field(default_factory=CustomResourceDefinitionSpec)
    status: CustomResourceDefinitionStatus = msgspec.field(default_factory=CustomResourceDefinitionStatus)


class CustomObject(ApiStruct, frozen=True):
    """An object of a custom resource: ``content`` is every top-level field but the three named.

    ``KIND`` and ``API_VERSION`` are the object's own (the class serves every CRD), so code that
    names an object by ``obj.KIND`` works for custom objects too.
    """

    api_version: str = ""
    kind: str = ""
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    content: dict[str, Any] = msgspec.field(default_factory=dict)

    @property
    def KIND(self) -> str:  # type: ignore[override]
        return self.kind

    @property
    def API_VERSION(self) -> str:  # type: ignore[override]
        return self.api_version

    def manifest(self) -> dict[str, Any]:
        """The object as the API shows it: apiVersion, kind, metadata, then the rest."""
        meta = msgspec.json.decode(msgspec.json.encode(self.metadata))
        return {"apiVersion": self.api_version, "kind": self.kind, "metadata": meta, **self.content}


def storage_version(crd: CustomResourceDefinition) -> str:
    """The version objects are stored in (exactly one has ``storage: true`` once validated)."""
    for v in crd.spec.versions:
        if v.storage:
            return v.name
    return crd.spec.versions[0].name if crd.spec.versions else ""


def custom_resource(crd: CustomResourceDefinition) -> tuple[ResourceType, list[WireType]]:
    """The registry rows of a CRD: its resource (kind, names, scope) and one wire type per served
    version, all decoding into :class:`CustomObject` (versions differ only in ``apiVersion``: the
    ``None`` conversion strategy)."""
    spec = crd.spec
    names = spec.names
    rt = ResourceType(
        spec.group,
        names.kind,
        names.plural,
        names.singular or names.kind.lower(),
        tuple(names.short_names),
        spec.scope != "Cluster",
        CustomObject,
        storage=f"{spec.group}/{storage_version(crd)}",
        crd=crd.metadata.name,
        status_subresource=any(
            v.storage and v.subresources is not None and v.subresources.status is not None
            for v in spec.versions
        ),
    )
    wires = [WireType(f"{spec.group}/{v.name}", names.kind, CustomObject) for v in spec.versions if v.served]
    return rt, wires
