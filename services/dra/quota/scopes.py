"""Which objects a scoped ResourceQuota covers (``spec.scopes`` and ``spec.scopeSelector``).

As upstream's ``generic.Matches`` with the pod and claim scope functions: every scope of the quota
must match; the claim evaluator matches no scope at all, so a scoped quota never charges
ResourceClaims; pods are matched by Terminating/NotTerminating (``activeDeadlineSeconds`` set),
BestEffort/NotBestEffort (no cpu/memory above zero requested or limited, pod-level resources
first), PriorityClass
(In/NotIn/Exists/DoesNotExist on ``priorityClassName``) and CrossNamespacePodAffinity.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from draflow.events.api.base import QuantityValue
from draflow.events.api.core_v1 import Pod, ResourceQuota, ScopedResourceSelectorRequirement
from draflow.events.quantity import Quantity, QuantityError

__all__ = ["covers", "selectors"]

_COMPUTE = ("cpu", "memory")


def selectors(quota: ResourceQuota) -> list[ScopedResourceSelectorRequirement]:
    """``spec.scopes`` (as Exists) followed by ``spec.scopeSelector.matchExpressions``."""
    out = [ScopedResourceSelectorRequirement(scope_name=s, operator="Exists") for s in quota.spec.scopes]
    if quota.spec.scope_selector is not None:
        out.extend(quota.spec.scope_selector.match_expressions)
    return out


def _positive(values: Mapping[str, QuantityValue]) -> bool:
    """A cpu or memory amount above zero (a zero one does not count, as upstream's QoS)."""
    for name in _COMPUTE:
        if name in values:
            try:
                if Quantity.parse(values[name]).sign > 0:
                    return True
            except QuantityError:  # admission refuses it; never crash on the log
                continue
    return False


def _best_effort(pod: Pod) -> bool:
    """Upstream's ``ComputePodQOS`` is BestEffort: no cpu or memory above zero requested or
    limited — in the pod-level resources when the pod has them (``spec.resources``), else in any
    container."""
    if pod.spec.resources is not None:
        return not (_positive(pod.spec.resources.requests) or _positive(pod.spec.resources.limits))
    for c in (*pod.spec.init_containers, *pod.spec.containers):
        if _positive(c.resources.requests) or _positive(c.resources.limits):
            return False
    return True


def _cross_namespace_affinity(pod: Pod) -> bool:
    affinity: dict[str, Any] = pod.spec.affinity or {}
    for kind in ("podAffinity", "podAntiAffinity"):
        block = affinity.get(kind) or {}
        terms = list(block.get("requiredDuringSchedulingIgnoredDuringExecution") or [])
        terms += [
            w.get("podAffinityTerm") or {}
            for w in block.get("preferredDuringSchedulingIgnoredDuringExecution") or []
        ]
        for term in terms:
            if term.get("namespaces") or term.get("namespaceSelector") is not None:
                return True
    return False


def _pod_matches(pod: Pod, sel: ScopedResourceSelectorRequirement) -> bool:
    scope = sel.scope_name
    if scope == "Terminating":
        return pod.spec.active_deadline_seconds is not None and pod.spec.active_deadline_seconds >= 0
    if scope == "NotTerminating":
        return not (pod.spec.active_deadline_seconds is not None and pod.spec.active_deadline_seconds >= 0)
    if scope == "BestEffort":
        return _best_effort(pod)
    if scope == "NotBestEffort":
        return not _best_effort(pod)
    if scope == "PriorityClass":
        name = pod.spec.priority_class_name
        if sel.operator == "Exists":
            return bool(name)
        if sel.operator == "DoesNotExist":
            return not name
        if sel.operator == "In":
            return name in sel.values
        if sel.operator == "NotIn":
            return name not in sel.values
        return False
    if scope == "CrossNamespacePodAffinity":
        return _cross_namespace_affinity(pod)
    return False


def covers(quota: ResourceQuota, obj: object) -> bool:
    """Whether ``quota`` charges ``obj`` at all (namespace and scopes; resources are per key)."""
    meta = getattr(obj, "metadata", None)
    if meta is None or meta.namespace != quota.metadata.namespace:
        return False
    sels = selectors(quota)
    if not sels:
        return True
    if not isinstance(obj, Pod):
        return False
    return all(_pod_matches(obj, s) for s in sels)
