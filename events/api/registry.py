"""Which kinds draflow serves: (apiVersion, kind) -> wire Struct (+ conversion to storage), and
resource names for the CLI (plural, singular, short names, scope), as ``kubectl api-resources``.

Every kind is stored in one version (the "storage" version, v1 for resource.k8s.io); older
versions are decoded into their own Structs and converted (``draflow.events.api.conversion_*``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from draflow.events.api.base import ApiStruct

__all__ = [
    "ResourceType",
    "Served",
    "WireType",
    "clash",
    "custom_crds",
    "generation",
    "lookup_resource",
    "lookup_wire",
    "register_custom",
    "resource_types",
    "unregister_custom",
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
    # custom resources (``draflow.events.api.apiextensions_v1``): the storage apiVersion and the
    # name of the CustomResourceDefinition that serves the kind
    storage: str = ""
    crd: str = ""
    status_subresource: bool = False

    @property
    def served_versions(self) -> tuple[str, ...]:
        """A custom resource's served versions (storage first); () for the built-in kinds."""
        if not self.crd:
            return ()
        entry = _CUSTOM.get(self.crd)
        versions = [w.api_version.rsplit("/", 1)[-1] for w in entry[1]] if entry is not None else []
        storage = self.api_version.rsplit("/", 1)[-1]
        return (storage, *[v for v in versions if v != storage])

    @property
    def api_version(self) -> str:
        return self.storage or self.struct.API_VERSION


@dataclass(frozen=True)
class WireType:
    """A served (apiVersion, kind): the Struct it decodes into and how to reach storage."""

    api_version: str
    kind: str
    struct: type[ApiStruct]
    to_storage: Callable[[ApiStruct], ApiStruct] | None = None

    @property
    def stored_kind(self) -> str:
        """The kind it is stored and named under (``ClassicResourceClaim`` for the classic
        claim's wire kind; a custom resource's own kind)."""
        own = self.struct.__dict__.get("KIND", self.struct.KIND)
        return own if isinstance(own, str) and own else self.kind


class Served:
    """One entry of the kind table (``draflow.events.api.kinds``): a resource and its extra wire versions."""

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
    if not resource.crd:  # a custom resource lists every served version itself
        _WIRE[(resource.struct.API_VERSION, resource.kind)] = WireType(
            resource.struct.API_VERSION, resource.kind, resource.struct
        )
    for w in wire:
        _WIRE[(w.api_version, w.kind)] = w
    for spelling in (resource.kind, resource.plural, resource.singular, *resource.short_names):
        taken = _NAMES.get(spelling.lower())
        if resource.crd and taken is not None and taken is not resource:
            pass  # a custom resource never shadows another one's short spelling: use name.group
        elif spelling == resource.kind or not resource.qualified_only:
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


_CUSTOM: dict[str, tuple[ResourceType, tuple[WireType, ...]]] = {}  # by CRD name


def register_custom(resource: ResourceType, wire: list[WireType]) -> None:
    """Serve a custom resource (its CRD was created or changed); replaces the CRD's old rows.

    Raises ValueError when the kind or a name is already served by something else: kinds are
    the store's keys, so two resources may not share one (the CRD's admission says so first)."""
    _ensure_loaded()
    clash = _clash(resource)
    if clash:
        raise ValueError(clash)
    unregister_custom(resource.crd)
    _CUSTOM[resource.crd] = (resource, tuple(wire))
    _index(resource, *wire)
    _bump()


def clash(resource: ResourceType) -> str:
    """Why ``resource`` cannot be served next to the others ("" when it can)."""
    _ensure_loaded()
    return _clash(resource)


def _clash(resource: ResourceType) -> str:
    other = _RESOURCES.get(resource.kind)
    if other is not None and other.crd != resource.crd:
        return f'kind "{resource.kind}" is already served by {other.plural}.{other.group or "core"}'
    for spelling in (resource.plural, resource.singular, *resource.short_names):
        taken = _NAMES.get(spelling.lower())
        if taken is not None and taken.crd != resource.crd and taken.group == resource.group:
            return f'name "{spelling}" is already used by {taken.plural}.{taken.group or "core"}'
    return ""


def unregister_custom(crd: str) -> None:
    """Stop serving the resource of CRD ``crd`` (deleted); nothing when it is not served."""
    entry = _CUSTOM.pop(crd, None)
    if entry is None:
        return
    resource, wire = entry
    if _RESOURCES.get(resource.kind) is resource:
        del _RESOURCES[resource.kind]
    for w in wire:
        if _WIRE.get((w.api_version, w.kind)) is w:
            del _WIRE[(w.api_version, w.kind)]
    for key in [k for k, v in _NAMES.items() if v is resource]:
        del _NAMES[key]
    _bump()


_generation = [0]


def _bump() -> None:
    _generation[0] += 1


def generation() -> int:
    """Moves on whenever the served custom resources change (caches of the kind table key on it)."""
    return _generation[0]


def custom_crds() -> dict[str, ResourceType]:
    """The custom resources served now, by CRD name."""
    return {name: rt for name, (rt, _) in _CUSTOM.items()}


_loaded = False


def _ensure_loaded() -> None:
    """Index the kind table on first use (it imports this module for ``ResourceType``)."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    from draflow.events.api.kinds import KINDS  # every served kind, the classic ones included

    for served in KINDS:
        _index(served.resource, *served.wire)
