"""Which ResourceQuota statuses to write: the quota reconciler's decision, pure and replayable.

``fold_change`` keeps a ``QuotaState`` in step with the folded objects and ``reconcile`` decides;
the service calls both, and so does ``draflow verify-replay`` when it checks a recorded status.
"""

from __future__ import annotations

import msgspec

from draflow.events.api import classic_v1alpha1 as cv
from draflow.events.api.core_v1 import Pod, ResourceQuota
from draflow.events.api.resource_v1 import DeviceClass, ResourceClaim
from draflow.projections.objects import Change
from draflow.services.dra.quota.state import QuotaState, status_of

__all__ = ["TRACKED", "fold_change", "reconcile"]

TRACKED = frozenset({DeviceClass.KIND, Pod.KIND, ResourceClaim.KIND, ResourceQuota.KIND, cv.CLAIM_KIND})


def fold_change(state: QuotaState, kind: str, namespace: str, name: str, change: Change) -> None:
    """One object change (of a ``TRACKED`` kind) into ``state``."""
    if change.type == "DELETED":
        state.delete(kind, namespace, name)
    elif isinstance(change.object, DeviceClass | Pod | ResourceClaim | ResourceQuota | cv.ResourceClaim):
        state.apply(change.object)


def reconcile(state: QuotaState, namespace: str | None = None) -> list[ResourceQuota]:
    """Every quota (of ``namespace``; None: all) whose status differs from what the state implies,
    with the new status.

    The service appends one status event per returned quota; an empty list means all quotas are
    up to date (so replaying the same events appends nothing new).
    """
    out: list[ResourceQuota] = []
    for key, quota in sorted(state.quotas.items()):
        if namespace is not None and key[0] != namespace:
            continue
        status = status_of(quota, state.quota_usage(quota), state.index)
        if status != quota.status:
            out.append(msgspec.structs.replace(quota, status=status))
    return out
