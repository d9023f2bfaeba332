"""The object fold: API objects rebuilt from their events by a registry of pure reducers.

An object's state is its storage Struct, or None (never created, or deleted). ``fold(state,
type_name, event, seq)`` calls the reducer registered for the event's type and stamps
``metadata.resourceVersion = str(seq)``: the resourceVersion is the stream sequence of the last
event on the object's subject, whatever its type, so it is always the ``expected_last_seq`` for the
next append. An event type without a reducer leaves the object as it is (but still moves its
resourceVersion).

Reducers for the generic lifecycle events (``draflow.events.objects``: ``KApplied``, ``KStatusUpdated``,
``KFinalizersChanged``, ``KDeletionRequested``, ``KDeleted``) and for ``KubeEventRecorded`` are
defined here. The reducers of the domain events appended on object subjects are pure functions in
their own modules, each listing them in a ``REDUCERS`` table (``draflow.projections.dra``: claims and
pods; ``draflow.projections.node``: the node plane); this module imports those tables explicitly and
assembles the one fold every process uses (the apiserver, ``draflow get -w``, controllers'
caches, the scheduler's snapshot)::

    def _allocated(claim: ResourceClaim | None, ev: ClaimAllocated) -> ResourceClaim | None:
        if claim is None:
            return None
        return replace(claim, status=replace(claim.status, allocation=ev.allocation))

    REDUCERS = {ClaimAllocated: _allocated, ...}

:func:`reducer` adds a reducer for an event type that is not draflow's own (tests, extensions).

``ObjectIndex`` holds many objects in memory (the apiserver's store, a watch's cache): pure, no I/O.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from msgspec.structs import replace

from draflow.events.api import core_v1 as c1
from draflow.events.api.apiextensions_v1 import CustomObject
from draflow.events.api.base import ApiStruct
from draflow.events.api.registry import resource_types
from draflow.events.envelope import Envelope, Event
from draflow.events.objects import (
    APPLIED,
    DELETED,
    DELETION_REQUESTED,
    EVENT_KIND,
    FINALIZERS_CHANGED,
    STATUS_UPDATED,
    CustomObjectApplied,
    CustomObjectDeleted,
    CustomObjectDeletionRequested,
    CustomObjectFinalizersChanged,
    CustomObjectStatusUpdated,
    KubeEvent,
    KubeEventDeleted,
    KubeEventRecorded,
    OwnerReferencesRemoved,
    object_event_type,
)
from draflow.projections.dra import REDUCERS as DRA_REDUCERS
from draflow.projections.indexers import Indexers, IndexFunc
from draflow.projections.node import REDUCERS as NODE_REDUCERS
from draflow.projections.numeric import REDUCERS as NUMERIC_REDUCERS

__all__ = [
    "Change",
    "ObjectIndex",
    "Reducer",
    "fold",
    "object_projection",
    "reducer",
]

Reducer = Callable[[Any, Any], Any]  # (state: ApiStruct | None, event) -> ApiStruct | None
_REDUCERS: dict[str, Reducer] = {}


def reducer(*event_types: type[Event] | str) -> Callable[[Reducer], Reducer]:
    """Register ``fn`` as the reducer of these event types (classes or type names)."""

    def deco(fn: Reducer) -> Reducer:
        for t in event_types:
            name = t if isinstance(t, str) else t.type_name()
            existing = _REDUCERS.get(name)
            if existing is not None and existing is not fn:
                raise TypeError(f"event type {name!r} already has a reducer ({existing.__qualname__})")
            _REDUCERS[name] = fn
        return fn

    return deco


def _stamp(obj: Any, seq: int) -> Any:
    meta = obj.metadata
    rv = str(seq)
    if meta.resource_version == rv:
        return obj
    return replace(obj, metadata=replace(meta, resource_version=rv))


def fold(state: Any, type_name: str, event: Any, seq: int) -> Any:
    """The object after ``event`` (at stream sequence ``seq``); None when it does not exist."""
    fn = _REDUCERS.get(type_name)
    new = state if fn is None else fn(state, event)
    return None if new is None else _stamp(new, seq)


# -- reducers of the generic lifecycle events -------------------------------------------------------


def _applied(state: Any, ev: Any) -> Any:
    obj = ev.object
    if state is None or not hasattr(obj, "status"):
        return obj
    return replace(obj, status=state.status)


def _status_updated(state: Any, ev: Any) -> Any:
    return None if state is None else replace(state, status=ev.status)


def _finalizers_changed(state: Any, ev: Any) -> Any:
    if state is None:
        return None
    return replace(state, metadata=replace(state.metadata, finalizers=tuple(ev.finalizers)))


def _deletion_requested(state: Any, ev: Any) -> Any:
    if state is None:
        return None
    meta = replace(
        state.metadata,
        deletion_timestamp=state.metadata.deletion_timestamp or ev.deletion_timestamp,
        deletion_grace_period_seconds=ev.grace_period_seconds,
    )
    new = replace(state, metadata=meta)
    if isinstance(new, c1.Namespace):
        new = replace(new, status=replace(new.status, phase="Terminating"))
    return new


def _deleted(state: Any, ev: Any) -> Any:
    return None


_GENERIC: dict[str, Reducer] = {
    APPLIED: _applied,
    STATUS_UPDATED: _status_updated,
    FINALIZERS_CHANGED: _finalizers_changed,
    DELETION_REQUESTED: _deletion_requested,
    DELETED: _deleted,
}


def _event_recorded(state: KubeEvent | None, ev: KubeEventRecorded) -> KubeEvent:
    new = ev.event
    if state is None:
        return new if new.count > 0 else replace(new, count=1)
    return replace(
        state,
        count=state.count + max(new.count, 1),
        last_timestamp=new.last_timestamp or state.last_timestamp,
        message=new.message,
    )


def _event_deleted(state: KubeEvent | None, ev: KubeEventDeleted) -> None:
    return None


def _owner_references_removed(state: Any, ev: OwnerReferencesRemoved) -> Any:
    """Any kind: the references to these owners go, the others stay in order."""
    if state is None:
        return None
    meta = state.metadata
    kept = tuple(r for r in meta.owner_references if r.uid not in ev.owner_uids)
    if kept == meta.owner_references:
        return state
    return replace(state, metadata=replace(meta, owner_references=kept))


def _custom_status_updated(state: CustomObject | None, ev: CustomObjectStatusUpdated) -> CustomObject | None:
    """A custom object keeps its status in ``content`` (no Struct of its own)."""
    if state is None:
        return None
    content = {k: v for k, v in state.content.items() if k != "status"}
    if ev.status is not None:
        content["status"] = ev.status
    return replace(state, content=content)


_OBJECT_EVENTS: dict[type[Event], Reducer] = {
    CustomObjectApplied: _applied,
    CustomObjectStatusUpdated: _custom_status_updated,
    CustomObjectFinalizersChanged: _finalizers_changed,
    CustomObjectDeletionRequested: _deletion_requested,
    CustomObjectDeleted: _deleted,
    KubeEventRecorded: _event_recorded,
    KubeEventDeleted: _event_deleted,
    OwnerReferencesRemoved: _owner_references_removed,
}


def _assemble() -> None:
    """The one fold: every reducer table, listed here."""
    for rt in resource_types():
        for verb, fn in _GENERIC.items():
            try:
                cls = object_event_type(rt.kind, verb)
            except KeyError:  # e.g. no StatusUpdated for a kind without status
                continue
            reducer(cls)(fn)
    for table in (_OBJECT_EVENTS, DRA_REDUCERS, NODE_REDUCERS, NUMERIC_REDUCERS):
        for event_type, fn in table.items():
            reducer(event_type)(fn)


_assemble()


def object_projection(kind: str) -> Any:
    """One kind's objects as a ``draflow.projections.base.Projection``: row key = the object's subject,
    state = the object. For services that keep their own persisted copy (``draflow.infra.projection_store``)
    or a ``MemoryView`` instead of asking the apiserver."""
    from draflow.events.api.registry import lookup_resource
    from draflow.events.subjects import encode_token
    from draflow.projections.base import Projection

    rt = lookup_resource(kind)
    if kind != EVENT_KIND and rt is None:
        raise KeyError(f"kind {kind!r} is not served")
    struct: type[Any] = KubeEvent if rt is None else rt.struct

    class Objects(Projection[Any]):
        name = f"objects_{kind.lower()}"
        state_type = struct
        subjects = (f"{encode_token(kind)}.*.*",)

        def apply(self, key: str, state: Any, env: Envelope[Event]) -> Any:
            return fold(state, env.type, env.data, env.seq)

    return Objects()


# -- many objects in memory -----------------------------------------------------------------------


class Change(NamedTuple):
    """One watch event: ADDED / MODIFIED / DELETED with the object (its last state for DELETED)."""

    type: str
    object: ApiStruct
    seq: int


Key = tuple[str, str]  # (namespace or "", name)


class ObjectIndex:
    """Objects by kind and key, with each subject's version.

    ``apply`` ignores events at or below the subject's version, so the same event may arrive
    twice (applied locally right after an append, then again from the log) without harm. A
    deleted object's version stays as a *tombstone* until :meth:`settle` says the log has been
    folded past it: from then on every event at or below that position counts as seen (the
    *floor*), so the tombstone is no longer needed and goes. A process that follows the log
    settles after each batch, so it holds live objects only, not its history; one that never
    settles (a fold in a test, a tool) keeps every tombstone.
    """

    def __init__(self) -> None:
        self._objects: dict[str, dict[Key, ApiStruct]] = {}
        self._versions: dict[tuple[str, str, str], int] = {}
        self._ns_counts: Counter[str] = Counter()
        self._floor = 0  # every event at or below it has been folded (see settle)
        self._tombstones: list[tuple[int, tuple[str, str, str]]] = []  # heap of (version, subject)
        self._indexers = Indexers()

    def add_index(self, name: str, kind: str, fn: IndexFunc) -> None:
        """Keep ``kind``'s objects findable by the values ``fn`` gives (:meth:`by_index`); a
        second registration under the same name is a no-op, so a reader may ask every time."""
        self._indexers.add(name, kind, fn, self._objects.get(kind, {}))

    def by_index(self, name: str, value: object) -> list[ApiStruct]:
        """The objects the indexer ``name`` finds under ``value``, by namespace and name."""
        keys = self._indexers.keys(name, value)
        if not keys:
            return []
        kind_objects = self._objects.get(self._indexers.kind(name), {})
        return [kind_objects[k] for k in keys if k in kind_objects]

    def version(self, kind: str, namespace: str, name: str) -> int:
        """The subject's version: sequence of its last event, 0 if it has none."""
        return self._versions.get((kind, namespace, name), 0)

    def get(self, kind: str, namespace: str, name: str) -> ApiStruct | None:
        objs = self._objects.get(kind)
        return None if objs is None else objs.get((namespace, name))

    def items(self, kind: str, namespace: str | None = None) -> list[ApiStruct]:
        """Objects of a kind (in one namespace, or all when None), sorted by namespace and name."""
        objs = self._objects.get(kind, {})
        keys = sorted(k for k in objs if namespace is None or k[0] == namespace)
        return [objs[k] for k in keys]

    def values(self, kind: str) -> Iterator[ApiStruct]:
        """Objects of a kind in no particular order (cheaper than ``items`` for a scan)."""
        return iter(list(self._objects.get(kind, {}).values()))

    def kinds(self) -> Iterator[str]:
        return iter(list(self._objects))

    def count_in_namespace(self, namespace: str) -> int:
        """How many namespaced objects (of any kind but Event) live in ``namespace``."""
        return self._ns_counts[namespace]

    def apply(
        self, kind: str, namespace: str, name: str, type_name: str, event: Any, seq: int
    ) -> Change | None:
        """Fold one event into the object it addresses; the resulting change, if any."""
        vkey = (kind, namespace, name)
        if seq <= self._versions.get(vkey, self._floor):
            return None
        self._versions[vkey] = seq
        objs = self._objects.setdefault(kind, {})
        key = (namespace, name)
        old = objs.get(key)
        new = fold(old, type_name, event, seq)
        if new is not old:
            self._indexers.change(kind, key, old, new)
        if new is None:
            heapq.heappush(self._tombstones, (seq, vkey))
            if old is None:
                return None
            del objs[key]
            if namespace and kind != EVENT_KIND:
                self._uncount(namespace)
            return Change("DELETED", old, seq)
        objs[key] = new
        if old is None:
            if namespace and kind != EVENT_KIND:
                self._ns_counts[namespace] += 1
            return Change("ADDED", new, seq)
        return Change("MODIFIED", new, seq)

    def put(self, kind: str, namespace: str, name: str, obj: ApiStruct, version: int) -> None:
        """Seed the index with an object read elsewhere (a list reply) at its version."""
        objs = self._objects.setdefault(kind, {})
        if (namespace, name) not in objs and namespace and kind != EVENT_KIND:
            self._ns_counts[namespace] += 1
        self._indexers.change(kind, (namespace, name), objs.get((namespace, name)), obj)
        objs[(namespace, name)] = obj
        self._versions[(kind, namespace, name)] = version

    def apply_envelope(self, kind: str, namespace: str, name: str, env: Envelope[Event]) -> Change | None:
        return self.apply(kind, namespace, name, env.type, env.data, env.seq)

    def _uncount(self, namespace: str) -> None:
        left = self._ns_counts[namespace] - 1
        if left > 0:
            self._ns_counts[namespace] = left
        else:
            del self._ns_counts[namespace]

    def settle(self, position: int) -> None:
        """Every event up to ``position`` has been folded (the log delivers in order): forget the
        tombstones at or below it, which the floor now stands for."""
        if position <= self._floor:
            return
        self._floor = position
        heap = self._tombstones
        while heap and heap[0][0] <= position:
            seq, vkey = heapq.heappop(heap)
            if self._versions.get(vkey) == seq and self.get(*vkey) is None:
                del self._versions[vkey]

    def size(self) -> int:
        """How many objects the index holds (what a snapshot of it costs in proportion to)."""
        return sum(len(objs) for objs in self._objects.values())

    def tombstones(self) -> int:
        """How many deleted subjects' versions are still held (not yet settled)."""
        return len(self._tombstones)

    def sizes(self) -> dict[str, int]:
        """Entries held, per structure (what memory in proportion to live state is checked by)."""
        return {
            "objects": sum(len(objs) for objs in self._objects.values()),
            "kinds": sum(1 for objs in self._objects.values() if objs),
            "versions": len(self._versions),
            "namespaces": len(self._ns_counts),
            "tombstones": len(self._tombstones),
        }

    def image(self) -> tuple[dict[str, dict[Key, ApiStruct]], dict[tuple[str, str, str], int]]:
        """A consistent copy of the state (the objects are immutable, so shallow copies do): what
        a snapshot encodes while this index goes on folding."""
        return {kind: dict(objs) for kind, objs in self._objects.items()}, dict(self._versions)

    @classmethod
    def from_image(
        cls, objects: dict[str, dict[Key, ApiStruct]], versions: dict[tuple[str, str, str], int]
    ) -> ObjectIndex:
        """The index a snapshot's image describes (the inverse of :meth:`image`)."""
        index = cls()
        index._objects = {kind: dict(objs) for kind, objs in objects.items()}
        index._versions = dict(versions)
        for kind, objs in index._objects.items():
            if kind != EVENT_KIND:
                index._ns_counts.update(ns for ns, _ in objs if ns)
        index._tombstones = [(v, vkey) for vkey, v in index._versions.items() if index.get(*vkey) is None]
        heapq.heapify(index._tombstones)
        return index

    def adopt(self, other: ObjectIndex) -> None:
        """Take ``other``'s state in place (holders of this index see it: a snapshot loaded at start)."""
        self._objects, self._versions, self._ns_counts = other._objects, other._versions, other._ns_counts
        self._floor, self._tombstones = other._floor, other._tombstones
        self._indexers.rebuild(self._objects)

    def touch(self, kind: str, namespace: str, name: str, seq: int) -> Change | None:
        """An event this process cannot decode moved the subject: keep the version in step."""
        return self.apply(kind, namespace, name, "", None, seq)
