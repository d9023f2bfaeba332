"""The garbage collector's ownership graph and its decisions (pure: no I/O, no clock).

Kubernetes' garbage collector (pkg/controller/garbagecollector) deletes an object once none of
its owners exists any more. Owners are matched **by uid**: an ownerReference names an owner's
apiVersion, kind, name and uid, and an object of that kind and name with another uid (the owner
deleted and re-created) does not keep the old dependents alive. A namespaced owner must live in
the dependent's namespace; a cluster-scoped dependent can only have cluster-scoped owners.

Per object (``decide``), as upstream's ``attemptToDeleteItem`` / ``processDeletingDependentsItem``
/ ``orphanDependents``:

* being deleted with the ``orphan`` finalizer: remove the references to it from every dependent,
  then the finalizer (the object goes);
* being deleted with ``foregroundDeletion``: once no dependent that references it with
  ``blockOwnerDeletion: true`` exists any more, remove the finalizer (its dependents are deleted
  meanwhile, as their owner is "waiting for dependents");
* otherwise, for an object with owners: each reference is *solid* (owner exists), *dangling*
  (owner gone, or another object under its name) or *waiting* (owner being deleted in the
  foreground). With a solid owner the others are dropped from the object's references; without,
  the object is deleted: in the foreground if it has dependents of its own and an owner waits
  for it, else with the policy its own finalizers ask for (Background by default).

A reference to a kind draflow does not serve cannot be resolved (upstream's REST mapping error):
such an object is left alone rather than deleted for an owner that might exist.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

import msgspec

from draflow.events.api.base import ApiStruct
from draflow.events.api.codec import object_meta
from draflow.events.api.meta import OwnerReference
from draflow.events.api.registry import lookup_resource, resource_types
from draflow.events.objects import FOREGROUND_FINALIZER, ORPHAN_FINALIZER

__all__ = [
    "DeleteObject",
    "GCAction",
    "Graph",
    "Item",
    "RemoveFinalizer",
    "RemoveOwnerReferences",
    "decide",
    "decide_all",
    "item_of",
    "served_kinds",
]


class Item(msgspec.Struct, frozen=True, kw_only=True):
    """One object as the collector sees it: identity, owners, deletion state."""

    kind: str  # registry kind (``ClassicResourceClaim``)
    wire_kind: str  # the kind ownerReferences name (``ResourceClaim``)
    group: str
    namespaced: bool
    namespace: str
    name: str
    uid: str
    owners: tuple[OwnerReference, ...] = ()
    finalizers: tuple[str, ...] = ()
    deleting: bool = False


class DeleteObject(msgspec.Struct, frozen=True, kw_only=True, tag=True):
    kind: str
    namespace: str
    name: str
    uid: str  # precondition
    policy: str  # propagationPolicy: Background | Foreground | Orphan
    reason: str


class RemoveOwnerReferences(msgspec.Struct, frozen=True, kw_only=True, tag=True):
    kind: str
    namespace: str
    name: str
    uid: str
    owner_uids: tuple[str, ...]
    reason: str


class RemoveFinalizer(msgspec.Struct, frozen=True, kw_only=True, tag=True):
    kind: str
    namespace: str
    name: str
    uid: str
    finalizer: str


GCAction = DeleteObject | RemoveOwnerReferences | RemoveFinalizer


def served_kinds() -> frozenset[tuple[str, str]]:
    """(group, kind as ownerReferences spell it) of every served kind."""
    return frozenset((rt.group, getattr(rt.struct, "WIRE_KIND", rt.kind)) for rt in resource_types())


def item_of(obj: ApiStruct) -> Item | None:
    """The collector's view of a stored object (None for a kind it does not serve)."""
    rt = lookup_resource(obj.KIND)
    if rt is None:
        return None
    meta = object_meta(obj)
    return Item(
        kind=rt.kind,
        wire_kind=getattr(rt.struct, "WIRE_KIND", rt.kind),
        group=rt.group,
        namespaced=rt.namespaced,
        namespace=meta.namespace,
        name=meta.name,
        uid=meta.uid,
        owners=meta.owner_references,
        finalizers=meta.finalizers,
        deleting=meta.deletion_timestamp is not None,
    )


def _group(api_version: str) -> str:
    return api_version.rpartition("/")[0] if "/" in api_version else ""


class Graph:
    """Items by uid and, per owner uid, the uids of the objects that reference it."""

    def __init__(self, served: frozenset[tuple[str, str]] | None = None) -> None:
        self.items: dict[str, Item] = {}
        self._by_key: dict[tuple[str, str, str], str] = {}  # (kind, namespace, name) -> uid
        self._dependents: defaultdict[str, set[str]] = defaultdict(set)
        self.served = served if served is not None else served_kinds()

    def __len__(self) -> int:
        return len(self.items)

    def put(self, item: Item) -> set[str]:
        """Add or update an object; the uids whose decision may have changed."""
        if not item.uid:
            return set()
        key = (item.kind, item.namespace, item.name)
        dirty: set[str] = set()
        previous = self._by_key.get(key)
        if previous is not None and previous != item.uid:
            dirty |= self.remove(previous)
        old = self.items.get(item.uid)
        if old is not None:
            dirty |= self._unlink(old)
        self.items[item.uid] = item
        self._by_key[key] = item.uid
        for ref in item.owners:
            if ref.uid:
                self._dependents[ref.uid].add(item.uid)
                dirty.add(ref.uid)
        return dirty | {item.uid} | self._dependents.get(item.uid, set())

    def remove(self, uid: str) -> set[str]:
        """The object is gone; the uids whose decision may have changed (its owners, dependents)."""
        old = self.items.pop(uid, None)
        if old is None:
            return set()
        if self._by_key.get((old.kind, old.namespace, old.name)) == uid:
            del self._by_key[(old.kind, old.namespace, old.name)]
        return self._unlink(old) | set(self._dependents.get(uid, ()))

    def _unlink(self, item: Item) -> set[str]:
        owners = {ref.uid for ref in item.owners if ref.uid}
        for owner in owners:
            deps = self._dependents.get(owner)
            if deps is not None:
                deps.discard(item.uid)
                if not deps:
                    del self._dependents[owner]
        return owners

    def dependents(self, uid: str) -> list[Item]:
        """The existing objects that reference ``uid`` as an owner, in a stable order."""
        deps = (self.items[d] for d in self._dependents.get(uid, ()) if d in self.items)
        return sorted(deps, key=lambda i: (i.kind, i.namespace, i.name))

    def owner(self, dependent: Item, ref: OwnerReference) -> Item | None:
        """The object ``ref`` points at, if it exists under that kind, name, namespace and uid."""
        owner = self.items.get(ref.uid)
        if owner is None or owner.wire_kind != ref.kind or owner.group != _group(ref.api_version):
            return None
        if owner.name != ref.name:
            return None
        if owner.namespaced and (not dependent.namespaced or owner.namespace != dependent.namespace):
            return None
        return owner

    def resolvable(self, ref: OwnerReference) -> bool:
        return (_group(ref.api_version), ref.kind) in self.served


def decide(graph: Graph, uid: str) -> list[GCAction]:
    """What the collector does about one object now (nothing when it is fine as it is)."""
    item = graph.items.get(uid)
    if item is None:
        return []
    if item.deleting:
        if ORPHAN_FINALIZER in item.finalizers:
            return _orphan(graph, item)
        if FOREGROUND_FINALIZER in item.finalizers:
            return _foreground(graph, item)
        return []
    refs = [r for r in item.owners if r.uid]
    if not refs or not all(graph.resolvable(r) for r in refs):
        return []
    solid: list[OwnerReference] = []
    dangling: list[OwnerReference] = []
    waiting: list[OwnerReference] = []
    for ref in refs:
        owner = graph.owner(item, ref)
        if owner is None:
            dangling.append(ref)
        elif owner.deleting and FOREGROUND_FINALIZER in owner.finalizers:
            waiting.append(ref)
        else:
            solid.append(ref)
    if solid:
        gone = tuple(r.uid for r in (*dangling, *waiting))
        if not gone:
            return []
        return [_unref(item, gone, "owners " + _names(dangling + waiting) + " are gone or going")]
    reason = (
        "owners " + _names(refs) + (" are gone" if not waiting else " are being deleted in the foreground")
    )
    if waiting and graph.dependents(item.uid):
        return [_delete(item, "Foreground", reason)]
    return [_delete(item, _own_policy(item), reason)]


def decide_all(graph: Graph, uids: Iterable[str]) -> list[GCAction]:
    """``decide`` for several objects, in a deterministic order."""
    out: list[GCAction] = []
    for uid in sorted(set(uids)):
        out += decide(graph, uid)
    return out


def _own_policy(item: Item) -> str:
    if ORPHAN_FINALIZER in item.finalizers:
        return "Orphan"
    if FOREGROUND_FINALIZER in item.finalizers:
        return "Foreground"
    return "Background"


def _orphan(graph: Graph, item: Item) -> list[GCAction]:
    actions: list[GCAction] = [
        _unref(dep, (item.uid,), f"owner {item.kind} {item.name} was deleted with propagationPolicy Orphan")
        for dep in graph.dependents(item.uid)
    ]
    actions.append(_unfinalize(item, ORPHAN_FINALIZER))
    return actions


def _foreground(graph: Graph, item: Item) -> list[GCAction]:
    blocking = [
        dep
        for dep in graph.dependents(item.uid)
        if any(r.uid == item.uid and r.block_owner_deletion for r in dep.owners)
    ]
    return [] if blocking else [_unfinalize(item, FOREGROUND_FINALIZER)]


def _names(refs: list[OwnerReference]) -> str:
    return ", ".join(f"{r.kind}/{r.name}" for r in refs)


def _delete(item: Item, policy: str, reason: str) -> DeleteObject:
    return DeleteObject(
        kind=item.kind, namespace=item.namespace, name=item.name, uid=item.uid, policy=policy, reason=reason
    )


def _unref(item: Item, owner_uids: tuple[str, ...], reason: str) -> RemoveOwnerReferences:
    return RemoveOwnerReferences(
        kind=item.kind,
        namespace=item.namespace,
        name=item.name,
        uid=item.uid,
        owner_uids=owner_uids,
        reason=reason,
    )


def _unfinalize(item: Item, finalizer: str) -> RemoveFinalizer:
    return RemoveFinalizer(
        kind=item.kind, namespace=item.namespace, name=item.name, uid=item.uid, finalizer=finalizer
    )
