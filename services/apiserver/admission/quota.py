"""ResourceQuota admission for pods and ResourceClaims: refuse what would exceed a quota.

As upstream's quota admission plugin (``plugin/pkg/admission/resourcequota``): the object's
usage (minus the old object's on update) is the request; zero entries are dropped; for every
quota of the namespace, the request masked to the quota's ``hard`` keys plus the current ``used``
must stay within ``hard``, otherwise the write is refused with
``exceeded quota: <quota>, requested: <k>=<v>, used: <k>=<v>, limited: <k>=<v>`` (keys of the
exceeded resources only, sorted, comma-separated) — and nothing is appended.

Pure: the caller passes the objects it knows (a ``QuotaState``); ``used`` is recomputed from
them, the same reducer the quota-reconciler runs, so admission and the reported ``status.used``
cannot disagree.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from draflow.events.api import classic_v1alpha1 as cv
from draflow.events.api.core_v1 import Pod, ResourceQuota
from draflow.events.api.errors import FORBIDDEN, FieldError
from draflow.events.api.resource_v1 import ResourceClaim
from draflow.events.quantity import Quantity, QuantityError
from draflow.services.dra.quota.scopes import covers
from draflow.services.dra.quota.state import QuotaState
from draflow.services.dra.quota.usage import Usage, subtract

__all__ = ["check_quota", "exceeded_message", "request_of"]


Charged = Pod | ResourceClaim | cv.ResourceClaim


def request_of(obj: Charged, state: QuotaState, old: Charged | None = None) -> Usage:
    """What writing ``obj`` adds to its namespace's usage (zeros dropped)."""
    new = state.usage_of(obj)
    before = state.usage_of(old) if old is not None else {}
    return {k: v for k, v in subtract(new, before).items() if v != 0}


def _pretty(values: Mapping[str, Quantity]) -> str:
    return ",".join(f"{k}={values[k]}" for k in sorted(values))


def exceeded_message(
    quota: ResourceQuota, requested: Mapping[str, int], used: Mapping[str, int]
) -> str | None:
    """Upstream's refusal for one quota, or None when the request fits it."""
    hard: dict[str, Quantity] = {}
    for key, value in quota.spec.hard.items():
        try:
            hard[key] = Quantity.parse(value)
        except QuantityError:
            continue
    masked = {k: v for k, v in requested.items() if k in hard}
    failed = sorted(k for k, v in masked.items() if Quantity.from_int(used.get(k, 0) + v) > hard[k])
    if not failed:
        return None
    return (
        f"exceeded quota: {quota.metadata.name}, "
        f"requested: {_pretty({k: Quantity.from_int(masked[k]) for k in failed})}, "
        f"used: {_pretty({k: Quantity.from_int(used.get(k, 0)) for k in failed})}, "
        f"limited: {_pretty({k: hard[k] for k in failed})}"
    )


def check_quota(
    obj: object,
    quotas: Iterable[ResourceQuota],
    state: QuotaState,
    *,
    old: object = None,
    used: Mapping[str, int] | None = None,
) -> list[FieldError]:
    """Errors for a create/update of ``obj`` (empty = admitted); only pods and claims are charged.

    ``state`` holds the current objects (``old`` included, ``obj`` not yet); ``used`` overrides
    the usage it gives each quota. Quotas of other namespaces, and scoped quotas the object does
    not match (claims match no scope), do not apply. The first quota refusing the request is
    reported, as upstream does.
    """
    if not isinstance(obj, Pod | ResourceClaim | cv.ResourceClaim):
        return []
    before = old if isinstance(old, Pod | ResourceClaim | cv.ResourceClaim) else None
    meta = obj.metadata
    requested = request_of(obj, state, before)
    if not requested:
        return []
    for quota in sorted(quotas, key=lambda q: q.metadata.name):
        if not covers(quota, obj):
            continue
        current = used if used is not None else state.quota_usage(quota)
        message = exceeded_message(quota, requested, current)
        if message is not None:
            return [
                FieldError(
                    kind=obj.KIND,
                    namespace=meta.namespace,
                    name=meta.name or meta.generate_name,
                    type=FORBIDDEN,
                    rule=f"forbidden: {message}",
                )
            ]
    return []
