"""The garbage collector service: the ownership graph kept from the log, decisions carried out.

The cache (:class:`services.runtime.controller.Runtime`: the log folded, then followed)
feeds every change of every served kind into :class:`~services.garbage_collector.graph.Graph`;
a change marks the objects whose decision it can move (the object, its owners, its dependents),
and the next pass decides only those. The first pass, and one every ``full_resync_s``, rebuilds
the graph from the cache and decides every object, so a lost write is redone.

Writes, each with the object's uid as precondition:

* ``DeleteObject`` → the apiserver's delete with the propagation policy (graceful for pods: the
  kubelet tears a running pod down first);
* ``RemoveOwnerReferences`` → ``OwnerReferencesRemoved`` appended on the object's subject at the
  cached version (a conflict: the object moved, the next pass decides again);
* ``RemoveFinalizer`` → the apiserver's finalize at the cached resourceVersion; the last finalizer
  gone on an object being deleted removes it.

The actions for one owner run in order and stop at the first that fails (an ``orphan`` finalizer
is removed only after every dependent was orphaned).
"""

from __future__ import annotations

import logging
import time

from events.api.registry import resource_types
from events.objects import OwnerReferencesRemoved
from projections.objects import Change
from services.garbage_collector.graph import (
    DeleteObject,
    GCAction,
    Graph,
    RemoveFinalizer,
    RemoveOwnerReferences,
    decide,
    item_of,
)
from services.runtime.controller import Runtime

__all__ = ["ACTOR", "GarbageCollectorService"]

log = logging.getLogger(__name__)

ACTOR = "garbage-collector"


class GarbageCollectorService:
    def __init__(self, rt: Runtime, *, full_resync_s: float = 30.0) -> None:
        self.rt = rt
        rt.kinds = frozenset(t.kind for t in resource_types())  # Events own nothing
        self.full_resync_s = full_resync_s
        self.graph = Graph()
        self._dirty: set[str] = set()
        self._last_full: float | None = None
        self.actions_done = 0
        rt.cache.listen(self._on_change)

    def _on_change(self, kind: str, namespace: str, name: str, change: Change) -> None:
        if self._last_full is None or (self.rt.kinds is not None and kind not in self.rt.kinds):
            return  # the first pass builds the graph from the cache
        item = item_of(change.object)
        if item is None:
            return
        if change.type == "DELETED":
            self._dirty |= self.graph.remove(item.uid)
        else:
            self._dirty |= self.graph.put(item)

    def _rebuild(self) -> set[str]:
        graph = Graph(self.graph.served)
        for kind in self.rt.kinds or ():
            for obj in self.rt.items(kind):
                item = item_of(obj)
                if item is not None:
                    graph.put(item)
        self.graph = graph
        return set(graph.items)

    async def sync(self) -> None:
        now = time.monotonic()
        full = self._last_full is None or now - self._last_full >= self.full_resync_s
        if full:
            self._last_full = now
            self._dirty = set()
            uids = self._rebuild()
        else:
            uids, self._dirty = self._dirty, set()
        try:
            for uid in sorted(uids):
                actions = decide(self.graph, uid)
                if actions:
                    await self.execute(actions)
        except BaseException:
            self._last_full = None  # the hints taken are lost: the retry is a full pass
            raise

    async def execute(self, actions: list[GCAction]) -> None:
        """Carry out one object's actions in order; stop at the first that does not succeed."""
        for action in actions:
            if not await self._one(action):
                return
            self.actions_done += 1

    async def _one(self, a: GCAction) -> bool:
        rt = self.rt
        current = rt.get(a.kind, a.namespace, a.name)
        if current is None or current.metadata.uid != a.uid:
            return False
        async with rt.step(a.kind, a.namespace, a.name, f"garbage-collector {type(a).__name__}"):
            if isinstance(a, DeleteObject):
                log.info(
                    "%s: deleting %s %s/%s (%s): %s", ACTOR, a.kind, a.namespace, a.name, a.policy, a.reason
                )
                return await rt.delete(a.kind, a.namespace, a.name, uid=a.uid, propagation_policy=a.policy)
            if isinstance(a, RemoveOwnerReferences):
                log.info("%s: orphaning %s %s/%s: %s", ACTOR, a.kind, a.namespace, a.name, a.reason)
                return await rt.append(
                    a.kind, a.namespace, a.name, [OwnerReferencesRemoved(owner_uids=a.owner_uids)]
                )
            assert isinstance(a, RemoveFinalizer)
            log.info("%s: removing %s from %s %s/%s", ACTOR, a.finalizer, a.kind, a.namespace, a.name)
            return await rt.remove_finalizer(
                a.kind, a.namespace, a.name, a.finalizer, resource_version=current.metadata.resource_version
            )
