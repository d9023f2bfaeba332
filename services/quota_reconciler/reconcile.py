"""Which ResourceQuota statuses to write: the quota reconciler's decision, pure and replayable."""

from __future__ import annotations

import msgspec

from events.api.core_v1 import ResourceQuota
from services.dra.quota.state import QuotaState, status_of

__all__ = ["reconcile"]


def reconcile(state: QuotaState) -> list[ResourceQuota]:
    """Every quota whose status differs from what the state implies, with the new status.

    The service appends one status event per returned quota; an empty list means all quotas are
    up to date (so replaying the same events appends nothing new).
    """
    out: list[ResourceQuota] = []
    for _, quota in sorted(state.quotas.items()):
        status = status_of(quota, state.quota_usage(quota), state.index)
        if status != quota.status:
            out.append(msgspec.structs.replace(quota, status=status))
    return out
