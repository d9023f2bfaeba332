"""The device taint eviction service: level-triggered passes of ``plan_evictions`` over the cache.

Each pass reads the clock once (``now``) and, on the pods, claims, slices and DeviceTaintRules as
stored:

1. a pod due is marked (``PodDisruptionTargeted``: ``DisruptionTarget=True``,
   ``DeletionByDeviceTaintManager``), a Normal Event ``DeviceTaintManagerEviction`` ``Marking for
   deletion`` is recorded (from ``device-taint-eviction-controller``) and the pod is deleted through
   the apiserver (graceful, uid precondition: its kubelet stops it, unprepares and gives the claims
   back); an eviction scheduled earlier that is no longer needed gets ``Cancelling deletion``;
2. each DeviceTaintRule's ``EvictionInProgress`` condition is written through the status API when
   it changed: at once for a new rule or a new generation, else at most every 10 s (upstream's
   ``ruleStatusPeriod``); for effect None only once per generation.

Passes run after every change of those kinds and when the earliest scheduled eviction or status
update falls due (a timer, no polling). Decisions carry ``now`` (``at``) and the log position they
were taken on (``observed_seq``). The count of pods evicted per rule is kept by the process, "since
starting the controller", as upstream's.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import msgspec

from draflow.events.api.meta import Condition
from draflow.events.api.resource_v1 import DeviceTaintRule
from draflow.events.node import PodDisruptionTargeted
from draflow.services.device_taint_eviction.planner import (
    CONDITION_TYPE,
    EVICTION_EVENT_REASON,
    EVICTION_MESSAGE,
    EVICTION_REASON,
    EvictionPlan,
    PodEviction,
    plan_evictions,
    rule_condition,
)
from draflow.services.runtime.controller import Runtime

__all__ = ["ACTOR", "COMPONENT", "RULE_STATUS_PERIOD", "DeviceTaintEvictionService"]

log = logging.getLogger(__name__)

ACTOR = "device-taint-eviction-controller"
COMPONENT = ACTOR  # the source of its Events, upstream's controller name
RULE_STATUS_PERIOD = timedelta(seconds=10)
KINDS = frozenset({"Pod", "ResourceClaim", "ResourceSlice", "DeviceTaintRule"})

Key = tuple[str, str]


def _stamp(now: datetime) -> str:
    return now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _micro(now: datetime) -> str:
    return now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


class DeviceTaintEvictionService:
    def __init__(self, rt: Runtime, *, clock: Callable[[], datetime] | None = None) -> None:
        self.rt = rt
        rt.kinds = KINDS
        self.clock = clock or (lambda: datetime.now(UTC))
        self.evicted: dict[str, int] = {}  # rule uid -> pods evicted because of it (this process)
        self._pending: dict[Key, str] = {}  # pods with an eviction scheduled last pass -> uid
        self._wake: asyncio.TimerHandle | None = None

    async def sync(self) -> None:
        rt = self.rt
        now = self.clock()
        observed = rt.cache.position
        pods = rt.items("Pod")
        claims = rt.items("ResourceClaim")
        slices = rt.items("ResourceSlice")
        rules = rt.items("DeviceTaintRule")
        plan = plan_evictions(pods, claims, slices, rules, now)
        for ev in plan.due:
            await self._evict(ev, now, observed)
        await self._cancel_dropped(plan)
        if plan.due:  # the rules' status tells the state after these evictions
            pods, claims = rt.items("Pod"), rt.items("ResourceClaim")
            plan = plan_evictions(pods, claims, slices, rules, now)
        next_status = await self._rule_statuses(rules, plan, pods, claims, slices, now)
        self._arm(min((t for t in (plan.next_due, next_status) if t is not None), default=None))

    def _arm(self, when: datetime | None) -> None:
        if self._wake is not None:
            self._wake.cancel()
            self._wake = None
        if when is not None:
            delay = max((when - self.clock()).total_seconds(), 0.0) + 0.01
            self._wake = asyncio.get_running_loop().call_later(delay, self.rt.kick)

    # -- eviction ---------------------------------------------------------------------------------

    async def _evict(self, ev: PodEviction, now: datetime, observed: int) -> None:
        rt = self.rt
        pod = rt.get("Pod", ev.namespace, ev.name)
        if pod is None or pod.metadata.uid != ev.uid or pod.metadata.deletion_timestamp is not None:
            return
        marked = any(
            c.type == "DisruptionTarget" and c.status == "True" and c.reason == EVICTION_REASON
            for c in pod.status.conditions
        )
        await rt.record_event(
            "Pod",
            ev.namespace,
            ev.name,
            "Normal",
            EVICTION_EVENT_REASON,
            "Marking for deletion",
            component=COMPONENT,
        )
        if not marked:
            fact = PodDisruptionTargeted(
                reason=EVICTION_REASON, message=EVICTION_MESSAGE, at=_micro(now), observed_seq=observed
            )
            if not await rt.append("Pod", ev.namespace, ev.name, [fact]):
                return  # changed meanwhile: the next pass decides again
        log.info(
            "evicting pod %s/%s (due %s): %s",
            ev.namespace,
            ev.name,
            _stamp(ev.when),
            ", ".join(str(r) for r in ev.reasons),
        )
        if await rt.delete("Pod", ev.namespace, ev.name, uid=ev.uid):
            for reason in ev.reasons:
                if reason.kind == 0:
                    self.evicted[reason.rule_uid] = self.evicted.get(reason.rule_uid, 0) + 1

    async def _cancel_dropped(self, plan: EvictionPlan) -> None:
        """Upstream's ``Cancelling deletion`` for pods whose scheduled eviction went away while
        they stay (the taint went, a toleration came)."""
        rt = self.rt
        scheduled = {(p.namespace, p.name): p.uid for p in plan.scheduled}
        due = {(p.namespace, p.name) for p in plan.due}
        for key, uid in self._pending.items():
            if key in scheduled or key in due:
                continue
            pod = rt.get("Pod", *key)
            if pod is None or pod.metadata.uid != uid or pod.metadata.deletion_timestamp is not None:
                continue
            await rt.record_event(
                "Pod",
                key[0],
                key[1],
                "Normal",
                EVICTION_EVENT_REASON,
                "Cancelling deletion",
                component=COMPONENT,
            )
        self._pending = scheduled

    # -- rule status ------------------------------------------------------------------------------

    async def _rule_statuses(
        self,
        rules: list[DeviceTaintRule],
        plan: EvictionPlan,
        pods: list,
        claims: list,
        slices: list,
        now: datetime,
    ) -> datetime | None:
        """Write each rule's condition when due; returns when the next write may be due."""
        next_at: datetime | None = None
        for rule in rules:
            meta = rule.metadata
            existing = next((c for c in rule.status.conditions if c.type == CONDITION_TYPE), None)
            fresh = existing is None or existing.observed_generation != meta.generation
            if not fresh and rule.spec.taint.effect != "NoExecute":
                continue  # None and other effects: computed once per generation, as upstream
            if not fresh and existing is not None and existing.last_transition_time:
                since = now - _parse(existing.last_transition_time)
                if since < RULE_STATUS_PERIOD:
                    due = _parse(existing.last_transition_time) + RULE_STATUS_PERIOD
                    if _differs(existing, self._condition(rule, plan, pods, claims, slices, now)):
                        next_at = due if next_at is None or due < next_at else next_at
                    continue
            wanted = self._condition(rule, plan, pods, claims, slices, now)
            if existing is not None and not _differs(existing, wanted):
                continue
            wanted = msgspec.structs.replace(wanted, last_transition_time=_stamp(now))
            kept = tuple(c for c in rule.status.conditions if c.type != CONDITION_TYPE)
            status = msgspec.structs.replace(rule.status, conditions=(*kept, wanted))
            if await self.rt.update_status(rule, status):
                log.info(
                    "DeviceTaintRule %s: %s %s: %s", meta.name, wanted.reason, wanted.status, wanted.message
                )
        return next_at

    def _condition(
        self, rule: DeviceTaintRule, plan: EvictionPlan, pods: list, claims: list, slices: list, now: datetime
    ) -> Condition:
        evicted = self.evicted.get(rule.metadata.uid, 0)
        return rule_condition(rule, plan, evicted, pods=pods, claims=claims, slices=slices, now=now)


def _differs(a: Condition, b: Condition) -> bool:
    return (a.status, a.reason, a.message, a.observed_generation) != (
        b.status,
        b.reason,
        b.message,
        b.observed_generation,
    )
