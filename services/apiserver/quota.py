"""ResourceQuota admission in the apiserver: a ``QuotaState`` kept from the store's changes.

The apiserver folds every object anyway; this listener feeds the ones quota reads (DeviceClasses,
Pods, ResourceClaims, ResourceQuotas) into the same reducer the quota-reconciler runs, so a write
is checked against exactly the usage ``status.used`` will show. Only Pods and ResourceClaims
(structured, and classic ones: KEP-3063/4381 claim counts) are charged
(``admission.quota.check_quota``); a refusal is upstream's 403 ``exceeded quota: ...`` and the
caller appends nothing.
"""

from __future__ import annotations

from draflow.events.api import classic_v1alpha1 as cv
from draflow.events.api.base import ApiStruct
from draflow.events.api.core_v1 import Pod, ResourceQuota
from draflow.events.api.resource_v1 import DeviceClass, ResourceClaim
from draflow.projections.objects import Change
from draflow.services.apiserver import errors
from draflow.services.apiserver.admission.quota import check_quota
from draflow.services.dra.quota.state import QuotaState

__all__ = ["QuotaAdmission"]

TRACKED = frozenset({DeviceClass.KIND, Pod.KIND, ResourceClaim.KIND, ResourceQuota.KIND, cv.CLAIM_KIND})
_PREFIX = "forbidden: "


class QuotaAdmission:
    def __init__(self) -> None:
        self.state = QuotaState()

    def on_change(self, kind: str, namespace: str, name: str, change: Change) -> None:
        """A store listener: keep the quota state at the store's objects."""
        if kind not in TRACKED:
            return
        if change.type == "DELETED":
            self.state.delete(kind, namespace, name)
        elif isinstance(change.object, DeviceClass | Pod | ResourceClaim | ResourceQuota | cv.ResourceClaim):
            self.state.apply(change.object)

    def quotas(self, namespace: str) -> list[ResourceQuota]:
        return [q for (ns, _), q in self.state.quotas.items() if ns == namespace]

    def charged(self, obj: ApiStruct) -> bool:
        """Whether writing ``obj`` is subject to a quota (a charged kind in a namespace with one)."""
        if not isinstance(obj, Pod | ResourceClaim | cv.ResourceClaim):
            return False
        return bool(self.quotas(obj.metadata.namespace))

    def check(self, obj: ApiStruct, old: ApiStruct | None = None) -> None:
        """Raise 403 Forbidden when the write would exceed a quota of the object's namespace."""
        if not self.charged(obj):
            return
        assert isinstance(obj, Pod | ResourceClaim | cv.ResourceClaim)
        problems = check_quota(obj, self.quotas(obj.metadata.namespace), self.state, old=old)
        if problems:
            rule = problems[0].rule
            detail = rule[len(_PREFIX) :] if rule.startswith(_PREFIX) else rule
            raise errors.forbidden(obj.KIND, obj.metadata.name, detail)
