"""Which kinds draflow serves: (apiVersion, kind) -> wire Struct (+ conversion to storage), and
resource names for the CLI (plural, singular, short names, scope), as ``kubectl api-resources``.

Every kind is stored in one version (the "storage" version, v1 for resource.k8s.io); older
versions are decoded into their own Structs and converted (``events.api.conversion_*``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from events.api.base import ApiStruct

__all__ = [
    "ResourceType",
    "Served",
    "WireType",
    "lookup_resource",
    "lookup_wire",
    "resource_types",
    "wire_types",
]


@dataclass(frozen=True)
class ResourceType:
    """One served resource (like a row of ``kubectl api-resources``)."""

    group: str  # "" for the core group
    kind: str
    plural: str
    singular: str
    short_names: tuple[str, ...]
    namespaced: bool
    struct: type[ApiStruct]  # storage version Struct
    # Plural/singular/short names only as ``name.group`` (the classic cdi.k8s.io ResourceClaim
    # shares its plural with resource.k8s.io's).
    qualified_only: bool = False

    @property
    def api_version(self) -> str:
        return self.struct.API_VERSION


@dataclass(frozen=True)
class WireType:
    """A served (apiVersion, kind): the Struct it decodes into and how to reach storage."""

    api_version: str
    kind: str
    struct: type[ApiStruct]
    to_storage: Callable[[ApiStruct], ApiStruct] | None = None


class Served:
    """One entry of the kind table (``events.api.kinds``): a resource and its extra wire versions."""

    __slots__ = ("resource", "wire")

    def __init__(self, resource: ResourceType, *wire: WireType) -> None:
        self.resource = resource
        self.wire = wire


_WIRE: dict[tuple[str, str], WireType] = {}
_RESOURCES: dict[str, ResourceType] = {}  # by kind
_NAMES: dict[str, ResourceType] = {}  # every accepted spelling, lower-case


def _index(resource: ResourceType, *wire: WireType) -> None:
    """Serve a resource: its storage version plus any extra wire versions."""
    _RESOURCES[resource.kind] = resource
    _WIRE[(resource.struct.API_VERSION, resource.kind)] = WireType(
        resource.struct.API_VERSION, resource.kind, resource.struct
    )
    for w in wire:
        _WIRE[(w.api_version, w.kind)] = w
    for spelling in (resource.kind, resource.plural, resource.singular, *resource.short_names):
        if spelling == resource.kind or not resource.qualified_only:
            _NAMES[spelling.lower()] = resource
        if resource.group:
            _NAMES[f"{spelling}.{resource.group}".lower()] = resource


def lookup_wire(api_version: str, kind: str) -> WireType | None:
    _ensure_loaded()
    return _WIRE.get((api_version, kind))


def wire_types() -> list[WireType]:
    """Every served (apiVersion, kind): the storage versions and the older wire versions."""
    _ensure_loaded()
    return list(_WIRE.values())


def lookup_resource(name: str) -> ResourceType | None:
    """By kind, plural, singular or short name (``rc``, ``resourceclaims``, ``pods.v1`` not)."""
    _ensure_loaded()
    return _NAMES.get(name.lower())


def resource_types() -> list[ResourceType]:
    _ensure_loaded()
    return list(_RESOURCES.values())


_loaded = False


def _ensure_loaded() -> None:
    """Index the kind table on first use (it imports this module for ``ResourceType``)."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    from events.api.kinds import KINDS  # every served kind, the classic ones included

    for served in KINDS:
        _index(served.resource, *served.wire)
