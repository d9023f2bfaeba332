"""quota-reconciler: keeps ResourceQuota ``status`` in step with DRA claims and extended resources.

The pure core::

    from services.dra.quota.state import QuotaState
    from services.quota_reconciler.reconcile import reconcile

    state = QuotaState()                 # fold of DeviceClass / Pod / ResourceClaim / ResourceQuota
    state.apply(obj); state.delete(kind, namespace, name)
    for quota in reconcile(state):       # quotas whose status must change, new status inside
        ...append a status event...

Usage rules: ``services.dra.quota`` (and docs/extended-resources.md). Admission uses the same
state: ``services.apiserver.admission.quota.check_quota``. The shell: ``service``.
"""
