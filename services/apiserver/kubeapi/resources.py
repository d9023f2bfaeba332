"""The REST mapping: which group/version/resource serves which kind, as discovery advertises it.

Built from ``draflow.events.api.registry`` (every served kind and wire version) plus core/v1 Events. A
resource is served in its storage version (preferred) and in every older wire version the registry
decodes (resource.k8s.io v1beta2, v1beta1, v1alpha3); ``draflow.services.apiserver.kubeapi.versions`` converts
stored objects back to the older shapes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from draflow.events.api.base import ApiStruct
from draflow.events.api.registry import generation, lookup_wire, resource_types, wire_types
from draflow.events.objects import EVENT_KIND, KubeEvent, status_type

__all__ = ["Resource", "by_kind", "by_path", "group_versions", "groups", "resources"]

_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
# kubectl's "all" category (kubectl get all) and the short names upstream gives these resources
_CATEGORY_ALL = frozenset({"Pod", "Deployment", "Job"})
_VERSION_ORDER = ("v1", "v1beta2", "v1beta1", "v1alpha3", "v1alpha2", "v1alpha1")


@dataclass(frozen=True)
class Resource:
    group: str
    kind: str  # registry kind (internal token for the classic claim)
    wire_kind: str  # the kind clients see
    plural: str
    singular: str
    short_names: tuple[str, ...]
    namespaced: bool
    struct: type[ApiStruct]
    versions: tuple[str, ...]  # served versions, storage (preferred) first
    has_status: bool
    categories: tuple[str, ...] = field(default=())
    custom: bool = False  # served by a CustomResourceDefinition

    @property
    def storage_version(self) -> str:
        return self.versions[0]

    def api_version(self, version: str) -> str:
        return f"{self.group}/{version}" if self.group else version

    def wire_struct(self, version: str) -> type[ApiStruct]:
        """The Struct the kind decodes into in ``version`` (the storage Struct or an older shape)."""
        wire = lookup_wire(self.api_version(version), self.wire_kind) or lookup_wire(
            self.api_version(version), self.kind
        )
        return wire.struct if wire is not None else self.struct


def _rank(version: str) -> int:
    return _VERSION_ORDER.index(version) if version in _VERSION_ORDER else len(_VERSION_ORDER)


def _build() -> list[Resource]:
    wires: dict[tuple[str, str], set[str]] = {}
    for w in wire_types():
        group, _, version = w.api_version.rpartition("/")
        wires.setdefault((group, w.kind), set()).add(version)
    out = []
    for rt in resource_types():
        if rt.crd:  # a custom resource: the versions its CRD serves, its own kind
            out.append(
                Resource(
                    group=rt.group,
                    kind=rt.kind,
                    wire_kind=rt.kind,
                    plural=rt.plural,
                    singular=rt.singular,
                    short_names=rt.short_names,
                    namespaced=rt.namespaced,
                    struct=rt.struct,
                    versions=rt.served_versions,
                    has_status=rt.status_subresource,
                    custom=True,
                )
            )
            continue
        storage = rt.struct.API_VERSION.rsplit("/", 1)[-1]
        wire_kind = getattr(rt.struct, "WIRE_KIND", rt.kind)
        older = (wires.get((rt.group, rt.kind), set()) | wires.get((rt.group, wire_kind), set())) - {storage}
        versions = (storage, *sorted(older, key=_rank))
        out.append(
            Resource(
                group=rt.group,
                kind=rt.kind,
                wire_kind=wire_kind,
                plural=rt.plural,
                singular=rt.singular,
                short_names=rt.short_names,
                namespaced=rt.namespaced,
                struct=rt.struct,
                versions=versions,
                has_status=status_type(rt.kind) is not None,
                categories=("all",) if rt.kind in _CATEGORY_ALL else (),
            )
        )
    out.append(Resource("", EVENT_KIND, "Event", "events", "event", ("ev",), True, KubeEvent, ("v1",), False))
    return out


def resources() -> tuple[Resource, ...]:
    """Every served resource; rebuilt when CRDs add or remove custom resources."""
    return _resources(generation())


@lru_cache(maxsize=1)
def _resources(gen: int) -> tuple[Resource, ...]:
    return tuple(_build())


def _paths() -> dict[tuple[str, str, str], Resource]:
    return _paths_of(generation())


@lru_cache(maxsize=1)
def _paths_of(gen: int) -> dict[tuple[str, str, str], Resource]:
    return {(r.group, v, r.plural): r for r in resources() for v in r.versions}


def by_path(group: str, version: str, plural: str) -> Resource | None:
    return _paths().get((group, version, plural))


def by_kind(kind: str) -> Resource | None:
    return next((r for r in resources() if r.kind == kind), None)


def groups() -> dict[str, list[str]]:
    """group -> served versions (preferred first); the core group is ``""``."""
    out: dict[str, list[str]] = {}
    for r in resources():
        versions = out.setdefault(r.group, [])
        for v in r.versions:
            if v not in versions:
                versions.append(v)
    return out


def group_versions() -> list[tuple[str, str]]:
    return [(g, v) for g, vs in groups().items() for v in vs]


def verbs(resource: Resource) -> list[str]:
    if resource.kind == EVENT_KIND:
        return ["get", "list", "watch"]
    return list(_VERBS)
