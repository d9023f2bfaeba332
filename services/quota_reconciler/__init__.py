"""quota-reconciler: ResourceQuota usage for DRA claims and extended resources (KEP-5004).

Pure core (this package has no NATS or SQLite yet; the service shell wires it later)::

    from services.quota_reconciler import QuotaState, reconcile

    state = QuotaState()                 # fold of DeviceClass / Pod / ResourceClaim / ResourceQuota
    state.apply(obj); state.delete(kind, namespace, name)
    for quota in reconcile(state):       # quotas whose status must change, new status inside
        ...append a status event...

Usage rules: ``services.quota_reconciler.usage`` (and docs/extended-resources.md). Admission
uses the same state: ``services.apiserver.admission.quota.check_quota``.
"""

from services.quota_reconciler.reconcile import QuotaState, reconcile, status_of
from services.quota_reconciler.scopes import covers
from services.quota_reconciler.usage import (
    ALL_MODE_DEVICES,
    Usage,
    claim_devices,
    claim_usage,
    class_keys,
    is_tracked,
    pod_usage,
    verified_owner,
)

__all__ = [
    "ALL_MODE_DEVICES",
    "QuotaState",
    "Usage",
    "claim_devices",
    "claim_usage",
    "class_keys",
    "covers",
    "is_tracked",
    "pod_usage",
    "reconcile",
    "status_of",
    "verified_owner",
]
