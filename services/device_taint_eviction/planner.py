"""Device taint eviction, pure: which pods a NoExecute device taint evicts, when, and the rule status.

After upstream ``pkg/controller/devicetainteviction`` (``claimEvictionTime``,
``allEvictingDeviceTaints``, ``podEvictionTime``, ``maybeUpdateRuleStatus``):

* a device's NoExecute taints come from its ResourceSlice (the newest generation of its pool)
  and from every DeviceTaintRule with effect NoExecute whose selector matches it (driver, pool,
  device; a rule without a selector matches nothing);
* an allocated claim is evicted at the earliest ``timeAdded`` of a taint on one of its devices
  that the device's allocation result does not tolerate — only tolerations with effect
  ``NoExecute`` count; one without ``tolerationSeconds`` tolerates the taint for good, otherwise
  the smallest ``tolerationSeconds`` (0 when negative) is added to ``timeAdded``;
* a pod is evicted at the earliest eviction time of the claims it uses (``spec.resourceClaims``,
  the claim allocated, the pod's own when generated, the pod in its ``reservedFor``), once bound
  to a node, while not done and not being deleted;
* a DeviceTaintRule's ``EvictionInProgress`` condition: True ``PodsPendingEviction`` while pods
  are to be evicted because of it ("2 pods need to be evicted in 1 namespace."), else False
  ``Completed`` (some evicted) or ``NotStarted``; for effect None a simulation of NoExecute
  (``NoEffect``, how many devices it selects and pods it would evict); other effects
  ``OtherEffect``; each with "N pods evicted since starting the controller." when N > 0.

Every time comes from the objects (``timeAdded``) and the ``now`` the caller passes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import msgspec

from draflow.events.api.core_v1 import Pod
from draflow.events.api.meta import Condition
from draflow.events.api.resource_v1 import (
    Device,
    DeviceRequestAllocationResult,
    DeviceTaint,
    DeviceTaintRule,
    ResourceClaim,
    ResourceSlice,
)
from draflow.services.dra.resourceclaim import (
    ClaimNameError,
    is_for_pod,
    is_pod_terminal,
    is_reserved_for_pod,
    resolve_claim_name,
)
from draflow.services.dra.structured.selection import tolerates

__all__ = [
    "CONDITION_TYPE",
    "EVICTION_EVENT_REASON",
    "EVICTION_MESSAGE",
    "EVICTION_REASON",
    "ClaimEviction",
    "EvictionPlan",
    "PodEviction",
    "Pools",
    "TaintSource",
    "claim_eviction",
    "plan_evictions",
    "rule_condition",
]

NO_EXECUTE = "NoExecute"
CONDITION_TYPE = "EvictionInProgress"  # resourcealpha.DeviceTaintConditionEvictionInProgress
EVICTION_REASON = "DeletionByDeviceTaintManager"
EVICTION_MESSAGE = "Device Taint manager: deleting due to NoExecute taint"
EVICTION_EVENT_REASON = "DeviceTaintManagerEviction"


def _parse(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).astimezone(UTC)


@dataclass(frozen=True, order=True)
class TaintSource:
    """Where a taint comes from: a DeviceTaintRule (``rule``) or a slice's device (the rest).
    Ordered as upstream sorts reasons: rules first, by name; then driver, pool, device, index."""

    kind: int  # 0: a rule, 1: a slice
    rule: str = ""  # rule name
    rule_uid: str = ""
    driver: str = ""
    pool: str = ""
    device: str = ""
    index: int = 0
    slice: str = ""

    def __str__(self) -> str:
        if self.kind == 0:
            return f"DeviceTaintRule {self.rule}"
        return f"ResourceSlice {self.slice} {self.driver}/{self.pool}/{self.device} taint #{self.index}"


class Pools:
    """Devices by (driver, pool, name), from the newest generation of each pool's slices."""

    def __init__(self, slices: Iterable[ResourceSlice]) -> None:
        newest: dict[tuple[str, str], int] = {}
        listed = list(slices)
        for s in listed:
            key = (s.spec.driver, s.spec.pool.name)
            newest[key] = max(newest.get(key, s.spec.pool.generation), s.spec.pool.generation)
        self.devices: dict[tuple[str, str, str], tuple[ResourceSlice, Device]] = {}
        for s in sorted(listed, key=lambda s: s.metadata.name):
            key = (s.spec.driver, s.spec.pool.name)
            if s.spec.pool.generation != newest[key]:
                continue
            for d in s.spec.devices:
                self.devices.setdefault((*key, d.name), (s, d))

    def get(self, driver: str, pool: str, device: str) -> tuple[ResourceSlice, Device] | None:
        return self.devices.get((driver, pool, device))


def rule_matches(rule: DeviceTaintRule, driver: str, pool: str, device: str) -> bool:
    sel = rule.spec.device_selector
    if sel is None:
        return False
    return (
        (sel.driver is None or sel.driver == driver)
        and (sel.pool is None or sel.pool == pool)
        and (sel.device is None or sel.device == device)
    )


def _evicting_taints(
    result: DeviceRequestAllocationResult, pools: Pools, rules: Iterable[DeviceTaintRule]
) -> list[tuple[TaintSource, DeviceTaint]]:
    out: list[tuple[TaintSource, DeviceTaint]] = []
    found = pools.get(result.driver, result.pool, result.device)
    if found is not None:
        slc, device = found
        for i, taint in enumerate(device.taints):
            if taint.effect == NO_EXECUTE:
                src = TaintSource(1, driver=result.driver, pool=result.pool, device=device.name, index=i)
                out.append((_with_slice(src, slc), taint))
    for rule in rules:
        if rule.spec.taint.effect == NO_EXECUTE and rule_matches(
            rule, result.driver, result.pool, result.device
        ):
            meta = rule.metadata
            out.append((TaintSource(0, rule=meta.name, rule_uid=meta.uid), rule.spec.taint))
    return out


def _with_slice(src: TaintSource, slc: ResourceSlice) -> TaintSource:
    return TaintSource(
        src.kind,
        driver=src.driver,
        pool=src.pool,
        device=src.device,
        index=src.index,
        slice=slc.metadata.name,
    )


@dataclass(frozen=True)
class ClaimEviction:
    """When the pods of a claim must go, and which taints say so (sorted)."""

    when: datetime
    reasons: tuple[TaintSource, ...]


def claim_eviction(
    claim: ResourceClaim, pools: Pools, rules: Iterable[DeviceTaintRule]
) -> ClaimEviction | None:
    """``claimEvictionTime`` for an allocated claim; None: nothing evicts it."""
    allocation = claim.status.allocation
    if allocation is None:
        return None
    rules = list(rules)
    when: datetime | None = None
    reasons: set[TaintSource] = set()
    for result in allocation.devices.results:
        for src, taint in _evicting_taints(result, pools, rules):
            limits = [
                t.toleration_seconds
                for t in result.tolerations
                if t.effect == NO_EXECUTE and tolerates(t, taint.key, taint.value, taint.effect)
            ]
            if limits and any(s is None for s in limits):
                continue  # tolerated for good
            if taint.time_added is None:
                continue  # upstream: no time, no eviction (the apiserver always sets one)
            at = _parse(taint.time_added)
            if limits:
                at += timedelta(seconds=max(min(int(s) for s in limits if s is not None), 0))
            reasons.add(src)
            when = at if when is None or at < when else when
    if when is None:
        return None
    return ClaimEviction(when, tuple(sorted(reasons)))


@dataclass(frozen=True)
class PodEviction:
    namespace: str
    name: str
    uid: str
    when: datetime
    reasons: tuple[TaintSource, ...]


@dataclass(frozen=True)
class EvictionPlan:
    """Pods to evict now, pods whose eviction comes later, and per rule uid the pods (and their
    namespaces) pending eviction because of it."""

    due: tuple[PodEviction, ...] = ()
    scheduled: tuple[PodEviction, ...] = ()
    pending: dict[str, tuple[int, int]] = field(default_factory=dict)

    @property
    def next_due(self) -> datetime | None:
        return min((p.when for p in self.scheduled), default=None)


def _pod_eviction(
    pod: Pod,
    claims: Mapping[tuple[str, str], ClaimEviction],
    by_name: Mapping[tuple[str, str], ResourceClaim],
) -> PodEviction | None:
    meta = pod.metadata
    when: datetime | None = None
    reasons: set[TaintSource] = set()
    for pod_claim in pod.spec.resource_claims:
        try:
            resolved = resolve_claim_name(pod, pod_claim)
        except ClaimNameError:
            continue  # not created yet: not tainted either
        if resolved.name is None:
            continue
        key = (meta.namespace, resolved.name)
        claim, eviction = by_name.get(key), claims.get(key)
        if claim is None or eviction is None:
            continue
        if resolved.must_check_owner and is_for_pod(pod, claim) is not None:
            continue
        if not is_reserved_for_pod(pod, claim):
            continue
        reasons.update(eviction.reasons)
        when = eviction.when if when is None or eviction.when < when else when
    if when is None:
        return None
    return PodEviction(meta.namespace, meta.name, meta.uid, when, tuple(sorted(reasons)))


def plan_evictions(
    pods: Iterable[Pod],
    claims: Iterable[ResourceClaim],
    slices: Iterable[ResourceSlice],
    rules: Iterable[DeviceTaintRule],
    now: datetime,
) -> EvictionPlan:
    """The controller's view at ``now`` (see the module docstring)."""
    pools = Pools(slices)
    rules = list(rules)
    by_name = {(c.metadata.namespace, c.metadata.name): c for c in claims}
    evictions: dict[tuple[str, str], ClaimEviction] = {}
    for key, claim in by_name.items():
        found = claim_eviction(claim, pools, rules)
        if found is not None:
            evictions[key] = found
    due: list[PodEviction] = []
    scheduled: list[PodEviction] = []
    counted: dict[str, tuple[int, set[str]]] = {}
    if not evictions:
        return EvictionPlan()
    for pod in sorted(pods, key=lambda p: (p.metadata.namespace, p.metadata.name)):
        if not pod.spec.node_name or pod.metadata.deletion_timestamp is not None or is_pod_terminal(pod):
            continue
        ev = _pod_eviction(pod, evictions, by_name)
        if ev is None:
            continue
        (due if ev.when <= now else scheduled).append(ev)
        for src in ev.reasons:
            if src.kind == 0:
                n, namespaces = counted.get(src.rule_uid, (0, set()))
                counted[src.rule_uid] = (n + 1, namespaces | {pod.metadata.namespace})
    pending = {uid: (n, len(namespaces)) for uid, (n, namespaces) in counted.items()}
    return EvictionPlan(tuple(due), tuple(scheduled), pending)


def _count(n: int, one: str, many: str) -> str:
    return one if n == 1 else many % n


def _simulate(
    rule: DeviceTaintRule,
    pods: Iterable[Pod],
    claims: Iterable[ResourceClaim],
    slices: Iterable[ResourceSlice],
    now: datetime,
) -> tuple[int, int, int, int]:
    """Effect None: (published devices selected, allocated devices selected, pods that would be
    evicted, their namespaces) were the effect NoExecute."""
    slices, claims = list(slices), list(claims)
    pools = Pools(slices)
    published = sum(1 for (driver, pool, device) in pools.devices if rule_matches(rule, driver, pool, device))
    allocated = sum(
        1
        for c in claims
        if c.status.allocation is not None
        for r in c.status.allocation.devices.results
        if rule_matches(rule, r.driver, r.pool, r.device)
    )
    taint = msgspec.structs.replace(rule.spec.taint, effect=NO_EXECUTE)
    as_no_execute = msgspec.structs.replace(rule, spec=msgspec.structs.replace(rule.spec, taint=taint))
    plan = plan_evictions(pods, claims, slices, [as_no_execute], now)
    pods_n, namespaces = plan.pending.get(rule.metadata.uid, (0, 0))
    return published, allocated, pods_n, namespaces


def rule_condition(
    rule: DeviceTaintRule,
    plan: EvictionPlan,
    evicted: int,
    *,
    pods: Iterable[Pod],
    claims: Iterable[ResourceClaim],
    slices: Iterable[ResourceSlice],
    now: datetime,
) -> Condition:
    """The rule's ``EvictionInProgress`` condition (no ``lastTransitionTime``: the caller sets it
    when the condition changes). ``evicted``: pods evicted because of the rule since the
    controller started; ``pods``/``claims``/``slices``/``now``: for the effect None simulation."""
    effect = rule.spec.taint.effect
    status, reason, message = "False", f"Effect{effect}", ""
    if effect == NO_EXECUTE:
        pending, namespaces = plan.pending.get(rule.metadata.uid, (0, 0))
        if pending:
            status, reason = "True", "PodsPendingEviction"
            message = _count(pending, "1 pod needs to be evicted in ", "%d pods need to be evicted in ")
            message += _count(namespaces, "1 namespace.", "%d different namespaces.")
        else:
            reason = "Completed" if evicted else "NotStarted"
    elif effect == "None":
        reason = "NoEffect"
        published, allocated, would, namespaces = _simulate(rule, pods, claims, slices, now)
        message = (
            _count(published, "1 published device selected. ", "%d published devices selected. ")
            + _count(allocated, "1 allocated device selected. ", "%d allocated devices selected. ")
            + _count(would, "1 pod would be evicted in ", "%d pods would be evicted in ")
            + _count(namespaces, "1 namespace ", "%d different namespaces ")
            + "if the effect was NoExecute. This information will not be updated again. "
            "Recreate the DeviceTaintRule to trigger an update."
        )
    else:
        reason, message = "OtherEffect", "Eviction only happens for the NoExecute effect."
    if evicted:
        message += (" " if message else "") + _count(evicted, "1 pod ", "%d pods ")
        message += "evicted since starting the controller."
    return Condition(
        type=CONDITION_TYPE,
        status=status,
        reason=reason,
        message=message,
        observed_generation=rule.metadata.generation,
    )
