"""ResourceQuota ``status`` recomputed from the current objects: a pure, replayable reducer.

``QuotaState`` holds the latest version of every object quota reads (DeviceClasses, Pods,
ResourceClaims, ResourceQuotas); ``apply``/``delete`` fold object events into it. Each object's
usage is a function of the current objects only (never a counter bumped by events), cached per
object and summed per namespace; an event refreshes exactly the usages it can change (the object,
the special claims of a pod, every object when a DeviceClass changes). So dropping the state and
replaying the log gives identical ``used`` values, and a restart loses nothing.
``status_of`` derives a quota's status from that state (``draflow.services.quota_reconciler.reconcile``
writes the ones that changed).
"""

from __future__ import annotations

from draflow.events.api import classic_v1alpha1 as cv
from draflow.events.api.core_v1 import Pod, ResourceQuota, ResourceQuotaStatus
from draflow.events.api.resource_v1 import DeviceClass, ResourceClaim
from draflow.events.quantity import Quantity
from draflow.services.dra.extended.claim import is_extended_resource_claim
from draflow.services.dra.extended.mapping import ExtendedResourceIndex
from draflow.services.dra.quota.scopes import covers, selectors
from draflow.services.dra.quota.usage import (
    Usage,
    add,
    claim_usage,
    classic_claim_usage,
    is_tracked,
    pod_usage,
    verified_owner,
)

__all__ = ["QuotaState", "status_of"]

Key = tuple[str, str]
Tracked = DeviceClass | Pod | ResourceClaim | ResourceQuota | cv.ResourceClaim


def _owner_uid(claim: ResourceClaim) -> str | None:
    """The controlling pod uid of a special claim (None for every other claim)."""
    if not is_extended_resource_claim(claim):
        return None
    ref = next((r for r in claim.metadata.owner_references if r.controller), None)
    return ref.uid if ref is not None and ref.kind == "Pod" else None


class QuotaState:
    """The objects quota depends on, keyed by (namespace, name); a fold over object events."""

    def __init__(self, *, sync_classes: bool = True) -> None:
        self.sync_classes = sync_classes
        self.index = ExtendedResourceIndex()
        self.pods: dict[Key, Pod] = {}
        self.claims: dict[Key, ResourceClaim] = {}
        self.quotas: dict[Key, ResourceQuota] = {}
        self.classic: dict[Key, cv.ResourceClaim] = {}  # KEP-3063/4381 claims
        # (namespace, pod uid) -> names of the special claims it controls
        self._owned: dict[Key, set[str]] = {}
        self._usage: dict[tuple[str, str, str], Usage] = {}
        self._totals: dict[str, Usage] = {}

    # -- folding --------------------------------------------------------------------------------

    def apply(self, obj: Tracked) -> None:
        """An object was created or updated (its latest version)."""
        key = (obj.metadata.namespace, obj.metadata.name)
        if isinstance(obj, DeviceClass):
            self.index.apply(obj)
            self._refresh_all()
        elif isinstance(obj, Pod):
            old = self.pods.get(key)
            self.pods[key] = obj
            self._refresh(Pod.KIND, *key)
            uids = {obj.metadata.uid} | ({old.metadata.uid} if old is not None else set())
            for uid in sorted(uids):
                self._refresh_owned(key[0], uid)
        elif isinstance(obj, ResourceClaim):
            old_claim = self.claims.get(key)
            old_uid = _owner_uid(old_claim) if old_claim is not None else None
            self._unown(key, old_uid)
            self.claims[key] = obj
            new_uid = _owner_uid(obj)
            if new_uid is not None:
                self._owned.setdefault((key[0], new_uid), set()).add(key[1])
            self._refresh(ResourceClaim.KIND, *key)
            for uid in sorted({u for u in (old_uid, new_uid) if u is not None}):
                self._refresh_owned(key[0], uid)
        elif isinstance(obj, ResourceQuota):
            self.quotas[key] = obj
        elif isinstance(obj, cv.ResourceClaim):
            self.classic[key] = obj
            self._refresh(cv.CLAIM_KIND, *key)

    def delete(self, kind: str, namespace: str, name: str) -> None:
        """An object is gone (kind as in ``obj.KIND``)."""
        key = (namespace, name)
        if kind == DeviceClass.KIND:
            self.index.delete(name)
            self._refresh_all()
        elif kind == Pod.KIND:
            old = self.pods.pop(key, None)
            self._refresh(Pod.KIND, *key)
            if old is not None:
                self._refresh_owned(namespace, old.metadata.uid)
        elif kind == ResourceClaim.KIND:
            old_claim = self.claims.pop(key, None)
            self._refresh(ResourceClaim.KIND, *key)
            if old_claim is not None:
                uid = _owner_uid(old_claim)
                self._unown(key, uid)
                if uid is not None:
                    self._refresh_owned(namespace, uid)
        elif kind == ResourceQuota.KIND:
            self.quotas.pop(key, None)
        elif kind == cv.CLAIM_KIND:
            self.classic.pop(key, None)
            self._refresh(cv.CLAIM_KIND, *key)

    def _unown(self, key: Key, uid: str | None) -> None:
        if uid is None:
            return
        names = self._owned.get((key[0], uid))
        if names is not None:
            names.discard(key[1])
            if not names:
                del self._owned[(key[0], uid)]

    def _refresh(self, kind: str, namespace: str, name: str) -> None:
        """Recompute one object's usage and move the namespace total by the difference."""
        slot = (kind, namespace, name)
        total = self._totals.setdefault(namespace, {})
        for k, v in self._usage.pop(slot, {}).items():
            total[k] -= v
        obj: Pod | ResourceClaim | cv.ResourceClaim | None
        if kind == Pod.KIND:
            obj = self.pods.get((namespace, name))
        elif kind == cv.CLAIM_KIND:
            obj = self.classic.get((namespace, name))
        else:
            obj = self.claims.get((namespace, name))
        if obj is None:
            return
        usage = self.usage_of(obj)
        self._usage[slot] = usage
        add(total, usage)

    def _refresh_owned(self, namespace: str, uid: str) -> None:
        for name in sorted(self._owned.get((namespace, uid), ())):
            self._refresh(ResourceClaim.KIND, namespace, name)

    def _refresh_all(self) -> None:
        for ns, name in sorted(self.pods):
            self._refresh(Pod.KIND, ns, name)
        for ns, name in sorted(self.claims):
            self._refresh(ResourceClaim.KIND, ns, name)

    # -- reads ----------------------------------------------------------------------------------

    def usage_of(self, obj: Pod | ResourceClaim | cv.ResourceClaim) -> Usage:
        """Quota usage of one object in this state (stored or about to be written)."""
        if isinstance(obj, Pod):
            return pod_usage(obj, self.index, sync_classes=self.sync_classes)
        if isinstance(obj, cv.ResourceClaim):
            return classic_claim_usage(obj)
        ns, name = obj.metadata.namespace, obj.metadata.name
        owner = None
        uid = _owner_uid(obj)
        if uid is not None:
            siblings = [self.claims[(ns, n)] for n in sorted(self._owned.get((ns, uid), ())) if n != name]
            owner = verified_owner(obj, self.pods, [*siblings, obj])
        return claim_usage(obj, self.index, owner, sync_classes=self.sync_classes)

    def namespace_usage(self, namespace: str) -> Usage:
        """Everything charged in a namespace (pods and claims), zeros dropped."""
        return {k: v for k, v in sorted(self._totals.get(namespace, {}).items()) if v}

    def quota_usage(self, quota: ResourceQuota) -> Usage:
        """What ``quota`` sees: its namespace's usage, or for a scoped quota its matching pods'."""
        ns = quota.metadata.namespace
        if not selectors(quota):
            return self.namespace_usage(ns)
        total: Usage = {}
        for (kind, ons, name), usage in sorted(self._usage.items()):
            if kind == Pod.KIND and ons == ns and covers(quota, self.pods[(ns, name)]):
                add(total, usage)
        return {k: v for k, v in sorted(total.items()) if v}

    def recomputed_usage(self, namespace: str) -> Usage:
        """``namespace_usage`` summed from scratch (a cross-check of the incremental totals)."""
        total: Usage = {}
        for (ns, _), p in sorted(self.pods.items()):
            if ns == namespace:
                add(total, self.usage_of(p))
        for (ns, _), c in sorted(self.claims.items()):
            if ns == namespace:
                add(total, self.usage_of(c))
        for (ns, _), k in sorted(self.classic.items()):
            if ns == namespace:
                add(total, self.usage_of(k))
        return {k: v for k, v in sorted(total.items()) if v}


def status_of(quota: ResourceQuota, usage: Usage, index: ExtendedResourceIndex) -> ResourceQuotaStatus:
    """``hard`` mirrors ``spec.hard``; ``used`` has every hard key this service measures.

    Keys it does not measure (cpu, memory, services, ...) are left out of ``used`` rather than
    reported as a misleading 0.
    """
    hard: dict[str, str | int | float] = {
        k: str(Quantity.parse(v)) for k, v in sorted(quota.spec.hard.items())
    }
    used: dict[str, str | int | float] = {
        k: str(Quantity.from_int(usage.get(k, 0))) for k in hard if is_tracked(k, index)
    }
    return ResourceQuotaStatus(hard=hard, used=used)
